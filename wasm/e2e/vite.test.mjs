// The browser package as a new user meets it, in Chromium: the Vite app of
// wasm/js/README.md ("A Vite app", wasm/e2e/vite), built with Vite and served by
// `vite preview`, whose preview.proxy routes /orders to `idem proxy`, which fronts an
// upstream that counts how many times it executed each key. Orders placed offline
// survive a reload offline (the page comes from the service worker's shell) and are
// each executed once when the browser is back online; an order whose outcome the proxy
// does not know stops as `unknown`, showing what an operator needs. Then a page of
// another origin, named by `idem proxy --cors-origin`, reads a 409's Retry-After and a
// 422's problem document through fetch; a page of an origin not named reads nothing.
//
// Environment: IDEM_BIN (the idem binary), IDEM_VITE_APP (a copy of wasm/e2e/vite, inside
// a folder whose node_modules holds idem-wasm, vite and playwright-core), CHROMIUM
// (default /usr/bin/chromium), IDEM_VITE_RUNS (runs of the offline scenario, default 10).
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:http";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { createRequire } from "node:module";
import { createInterface } from "node:readline";
import { chromium } from "playwright-core";

const STEP_MS = 20_000;
const RUNS = Number(process.env.IDEM_VITE_RUNS ?? 10);
const APP = process.env.IDEM_VITE_APP;
const VITE = join(dirname(createRequire(join(APP, "package.json")).resolve("vite/package.json")), "bin", "vite.js");

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

/** Listens on a free port of 127.0.0.1; resolves with the server's base URL. */
function listen(server) {
  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => resolve(`http://127.0.0.1:${server.address().port}`));
  });
}

/**
 * The API behind idem proxy: `POST /orders` executes an order (counted by the key the
 * proxy passes on) and answers 201 with its number. `slowNext(ms)` makes the next
 * execution take that long; `idle()` says whether none is running.
 */
async function startUpstream() {
  const executions = new Map();
  let slow = 0;
  let orders = 0;
  let running = 0;
  const server = createServer((request, response) => {
    const chunks = [];
    request.on("data", (chunk) => chunks.push(chunk));
    request.on("end", async () => {
      if (request.method !== "POST" || request.url !== "/orders") {
        response.writeHead(404).end();
        return;
      }
      const key = JSON.parse(request.headers["idempotency-key"] ?? "null");
      executions.set(key, (executions.get(key) ?? 0) + 1);
      const order = ++orders;
      const delay = slow;
      slow = 0;
      running++;
      if (delay > 0) await new Promise((r) => setTimeout(r, delay));
      running--;
      response.writeHead(201, { "Content-Type": "application/json" });
      response.end(JSON.stringify({ order, status: "confirmed", body: Buffer.concat(chunks).toString() }));
    });
  });
  const base = await listen(server);
  return {
    base,
    executions,
    slowNext: (ms) => (slow = ms),
    idle: () => running === 0,
    stop: () => new Promise((r) => server.close(r)),
  };
}

/** Runs `idem proxy` on a fresh store in front of `upstream`, with `flags`. */
async function startProxy(upstream, flags = []) {
  const dir = mkdtempSync(join(tmpdir(), "idem-vite-"));
  const args = ["--db", join(dir, "proxy.redb"), "proxy", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--upstream", upstream.base];
  const child = spawn(process.env.IDEM_BIN, [...args, "--tenant", "shop", ...flags], { stdio: ["ignore", "pipe", "inherit"] });
  const line = await new Promise((resolve, reject) => {
    createInterface({ input: child.stdout }).once("line", resolve);
    child.once("exit", (code) => reject(new Error(`idem proxy exited with ${code}`)));
    setTimeout(() => reject(new Error("idem proxy did not start")), 10_000);
  });
  const base = /^listening (http:\/\/127\.0\.0\.1:\d+)$/.exec(line)?.[1];
  assert.ok(base, `unexpected first line of idem proxy: ${line}`);
  return {
    base,
    stop() {
      child.kill();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** `vite preview` of the built app, its /orders routed to `proxy` (IDEM_PROXY). */
async function startPreview(proxy) {
  const port = await new Promise((resolve) => {
    const probe = createServer().listen(0, "127.0.0.1", () => {
      const { port } = probe.address();
      probe.close(() => resolve(port));
    });
  });
  const child = spawn(process.execPath, [VITE, "preview", "--host", "127.0.0.1", "--port", String(port), "--strictPort"], {
    cwd: APP,
    env: { ...process.env, IDEM_PROXY: proxy.base },
    stdio: ["ignore", "ignore", "inherit"],
  });
  const base = `http://127.0.0.1:${port}`;
  await until("vite preview to answer", () => fetch(`${base}/shell.json`).then((r) => r.ok, () => false), 15_000);
  return { base, stop: () => child.kill() };
}

let upstream, proxy, preview, browser;
before(async () => {
  const build = spawnSync(process.execPath, [VITE, "build"], { cwd: APP, encoding: "utf8" });
  assert.equal(build.status, 0, `vite build failed:\n${build.stdout}\n${build.stderr}`);
  upstream = await startUpstream();
  // A short upstream timeout: the `unknown` test makes one order outlast it.
  proxy = await startProxy(upstream, ["--upstream-timeout", "1s"]);
  preview = await startPreview(proxy);
  browser = await chromium.launch({
    executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--no-first-run"],
  });
});
after(async () => {
  await browser?.close();
  preview?.stop();
  proxy?.stop();
  await upstream?.stop();
});

/** Opens the shop in a fresh profile; resolves once the page is ready and the worker controls it. */
async function openShop(context) {
  const page = await context.newPage();
  await page.goto(preview.base);
  await ready(page);
  return page;
}

const ready = (page) =>
  page.waitForFunction(() => !document.getElementById("order").disabled && navigator.serviceWorker.controller !== null, null, {
    timeout: STEP_MS,
  });

/** What the page shows: each order's key, state and text. */
const orders = (page) =>
  page.$$eval("#orders li", (items) => items.map((li) => ({ key: li.dataset.key, state: li.dataset.state, text: li.textContent })));

/** Waits until the page shows `n` orders, all in `state`; resolves with them. */
const shown = (page, n, state) =>
  until(`${n} orders ${state}`, async () => {
    const list = await orders(page);
    return list.length === n && list.every((o) => o.state === state) && list;
  });

test(`orders placed offline, reloaded offline, sent once back online (${RUNS} runs)`, { timeout: 60_000 + RUNS * 20_000 }, async () => {
  for (let run = 1; run <= RUNS; run++) {
    const context = await browser.newContext();
    try {
      const page = await openShop(context);
      await context.setOffline(true);
      for (let i = 0; i < 3; i++) await page.click("#order");
      const queued = await shown(page, 3, "queued");
      const keys = queued.map((o) => o.key);
      assert.equal(new Set(keys).size, 3, `run ${run}: one key per order`);
      assert.ok(keys.every((key) => !upstream.executions.has(key)), `run ${run}: nothing reached the server offline`);

      // Reloaded offline: the page comes from the worker's shell, its orders from IndexedDB.
      await page.reload();
      await ready(page);
      assert.match(await page.textContent("#network"), /^offline/, `run ${run}`);
      assert.deepEqual((await shown(page, 3, "queued")).map((o) => o.key), keys, `run ${run}: the same orders after the reload`);

      await context.setOffline(false);
      const done = await shown(page, 3, "completed");
      assert.deepEqual(done.map((o) => o.key), keys, `run ${run}`);
      assert.ok(done.every((o) => /^confirmed, order #\d+$/.test(o.text)), `run ${run}: ${JSON.stringify(done)}`);
      for (const key of keys) assert.equal(upstream.executions.get(key), 1, `run ${run}: order ${key} executed once`);
    } finally {
      await context.close();
    }
  }
});

test("an order whose outcome the proxy does not know stops as unknown, with its key and operation", { timeout: 60_000 }, async () => {
  const context = await browser.newContext();
  try {
    const page = await openShop(context);
    // The upstream outlasts the proxy's --upstream-timeout: the proxy answers 504 and
    // keeps the key Unknown (the order may have run); the retry gets 503, "unknown".
    upstream.slowNext(2_500);
    await page.click("#order");
    const [order] = await shown(page, 1, "unknown");
    assert.equal(order.text, `unknown at the server: ask support to look at POST /orders, key ${order.key}`);
    // The upstream's execution ends well after the intent stopped: the retry did not run
    // it again, and the intent is still unknown, not sent again.
    await until("the slow execution to end", () => upstream.idle());
    assert.equal(upstream.executions.get(order.key), 1, "executed once");
    assert.equal((await orders(page))[0].state, "unknown");
  } finally {
    await context.close();
  }
});

/** A page server: `/` is an empty page, on two origins (two ports of 127.0.0.1). */
async function startPages() {
  const servers = [0, 1].map(() =>
    createServer((_request, response) => {
      response.writeHead(200, { "Content-Type": "text/html" });
      response.end("<!doctype html><title>another origin</title>");
    }),
  );
  const [named, other] = await Promise.all(servers.map(listen));
  return { named, other, stop: () => Promise.all(servers.map((s) => new Promise((r) => s.close(r)))) };
}

test("a page of an origin named by --cors-origin reads a 409's Retry-After and a 422's problem", { timeout: 60_000 }, async () => {
  const pages = await startPages();
  const cors = await startProxy(upstream, ["--cors-origin", pages.named]);
  const context = await browser.newContext();
  try {
    const page = await context.newPage();
    await page.goto(`${pages.named}/`);
    const key = `"cors-${Date.now()}"`;
    const post = (body) =>
      page.evaluate(
        async ({ url, key, body }) => {
          const response = await fetch(url, {
            method: "POST",
            headers: { "Content-Type": "application/json", "Idempotency-Key": key },
            body,
          });
          return {
            status: response.status,
            retryAfter: response.headers.get("Retry-After"),
            contentType: response.headers.get("Content-Type"),
            body: await response.text(),
          };
        },
        { url: `${cors.base}/orders`, key, body },
      );

    // The first request runs long; the same key meanwhile is in progress: 409.
    upstream.slowNext(1_500);
    const first = post('{"item":"tea"}');
    await until("the first request to reach the upstream", () => upstream.executions.has(JSON.parse(key)));
    const busy = await post('{"item":"tea"}');
    assert.equal(busy.status, 409, busy.body);
    assert.match(busy.retryAfter ?? "", /^[1-9]\d*$/, "Retry-After is exposed to the page");
    assert.equal(JSON.parse(busy.body).idempotency, "in-progress");
    assert.equal((await first).status, 201);

    // The key with another body: 422, and the page reads the problem document.
    const conflict = await post('{"item":"cake"}');
    assert.equal(conflict.status, 422);
    assert.equal(conflict.contentType, "application/problem+json");
    const problem = JSON.parse(conflict.body);
    assert.equal(problem.status, 422);
    assert.equal(problem.idempotency, "conflict");
    assert.match(problem.detail, /another request/);
    assert.equal(upstream.executions.get(JSON.parse(key)), 1);

    // A page of an origin not named reads nothing: the browser refuses the answer.
    await page.goto(`${pages.other}/`);
    const refused = await page.evaluate(
      (url) =>
        fetch(url, { method: "POST", headers: { "Content-Type": "application/json", "Idempotency-Key": '"elsewhere-1"' }, body: "{}" }).then(
          (r) => `read ${r.status}`,
          (e) => e.name,
        ),
      `${cors.base}/orders`,
    );
    assert.equal(refused, "TypeError");
  } finally {
    await context.close();
    cors.stop();
    await pages.stop();
  }
});
