// Browser end-to-end: a page served from 127.0.0.1 by the Rust test server (idem-store,
// IETF Idempotency-Key semantics) places an order through idem-wasm/browser. The browser
// goes offline while the server executes it, so the reply is lost; the page is reloaded
// while the intent waits to be retried; the network returns. The server must have
// executed the order once, every attempt must carry the same key, and the page must show
// the stored outcome.
//
// Environment: IDEM_E2E_SERVER (the e2e-server binary), IDEM_E2E_SITE (page + package
// files), CHROMIUM (default /usr/bin/chromium).
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { chromium } from "playwright-core";

const STEP_MS = 20_000;

/** Polls `check` every 50 ms until it returns a truthy value, for at most `ms`. */
async function until(what, check, ms = STEP_MS) {
  const end = Date.now() + ms;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > end) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

async function startServer(dir) {
  const child = spawn(
    process.env.IDEM_E2E_SERVER,
    ["--root", process.env.IDEM_E2E_SITE, "--db", join(dir, "e2e.redb"), "--work-ms", "1500", "--lifetime-s", "120"],
    { stdio: ["ignore", "pipe", "inherit"] },
  );
  const line = await new Promise((resolve, reject) => {
    const lines = createInterface({ input: child.stdout });
    lines.once("line", resolve);
    child.once("exit", (code) => reject(new Error(`e2e-server exited with ${code}`)));
    setTimeout(() => reject(new Error("e2e-server did not start")), 10_000);
  });
  const base = /^listening (http:\/\/127\.0\.0\.1:\d+)$/.exec(line)?.[1];
  assert.ok(base, `unexpected first line: ${line}`);
  return { child, base };
}

test("offline, lost reply, reload while retrying, back online: executed once", { timeout: 120_000 }, async () => {
  const dir = mkdtempSync(join(tmpdir(), "idem-e2e-"));
  const { child, base } = await startServer(dir);
  const stats = async () => (await fetch(`${base}/stats`)).json();
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
    args: [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
      "--disable-quic",
      "--no-first-run",
    ],
  });
  try {
    const context = await browser.newContext();
    const page = await context.newPage();
    const ready = () => document.body.dataset.ready === "true" && navigator.serviceWorker.controller !== null;
    const intent = () => {
      const li = document.querySelector("#intents li");
      return li && { key: li.dataset.key, state: li.dataset.state, attempts: Number(li.dataset.attempts), text: li.textContent };
    };

    await page.goto(`${base}/`);
    await page.waitForFunction(ready, null, { timeout: STEP_MS });

    // The user places the order; the request reaches the server, which starts executing.
    await page.click("#order");
    await until("the order to reach the server", async () => (await stats()).received.length >= 1);
    const sent = await page.evaluate(intent);
    assert.equal(sent.state, "in_flight");

    // The browser goes offline while the server works: the reply is lost.
    await context.setOffline(true);
    await page.waitForFunction(() => document.querySelector("#intents li")?.dataset.state === "queued", null, {
      timeout: STEP_MS,
    });
    const executed = await until("the server to finish the order", async () => {
      const s = await stats();
      return s.answered.length >= 1 && s;
    });
    assert.deepEqual(executed.executed, [sent.key], "the order ran on the server");
    assert.equal((await page.evaluate(intent)).state, "queued", "the client does not know: it will retry");

    // Reloaded while retrying (still offline: the shell comes from the service worker).
    await page.reload();
    await page.waitForFunction(ready, null, { timeout: STEP_MS });
    const reloaded = await page.evaluate(intent);
    assert.equal(reloaded.key, sent.key, "the same intent after the reload");
    assert.equal(reloaded.state, "queued");
    assert.equal(await page.textContent("#network"), "offline");

    // The network returns: the intent is sent again under its key and gets the replay.
    await context.setOffline(false);
    await page.waitForFunction(() => document.querySelector("#intents li")?.dataset.state === "completed", null, {
      timeout: STEP_MS,
    });
    const done = await page.evaluate(intent);
    assert.equal(done.key, sent.key);
    assert.match(done.text, /Order #1 confirmed/, "the page shows the stored outcome");

    const final = await stats();
    assert.deepEqual(final.executed, [sent.key], "executed exactly once");
    assert.ok(final.received.length >= 2, `at least the lost attempt and the retry: ${final.received.length}`);
    assert.ok(final.received.every((key) => key === sent.key), "every attempt carried the same key");
    const last = final.answered.at(-1);
    assert.deepEqual(last, { key: sent.key, status: 201, replayed: true }, "the retry got the stored outcome");

    // The outcome is kept: another reload shows it without sending again.
    await page.reload();
    await page.waitForFunction(ready, null, { timeout: STEP_MS });
    assert.match((await page.evaluate(intent)).text, /Order #1 confirmed/);
    assert.equal((await stats()).received.length, final.received.length, "no send after completion");
    console.log(
      `e2e: key ${sent.key}; ${final.received.length} attempts, ${final.executed.length} execution, ` +
        `answers ${final.answered.map((a) => a.status + (a.replayed ? " (replayed)" : "")).join(", ")}`,
    );
  } finally {
    await browser.close();
    await fetch(`${base}/shutdown`, { method: "POST" }).catch(() => {});
    child.kill();
    rmSync(dir, { recursive: true, force: true });
  }
});
