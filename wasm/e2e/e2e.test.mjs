// Browser end-to-end tests: the shop page (wasm/e2e/site), served from 127.0.0.1 by the
// Rust test server (idem-store, IETF Idempotency-Key semantics), places orders through
// idem-wasm/browser in Chromium. Lost replies, reloads, several tabs, a leading tab that
// closes or crashes, a database of version 0.1, and the service worker sending while no
// page is open. Every test checks on the server that each order was executed exactly once,
// that none was lost, and that every attempt carried its order's key.
//
// Environment: IDEM_E2E_SERVER (the e2e-server binary), IDEM_E2E_SITE (page + package
// files), CHROMIUM (default /usr/bin/chromium).
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { chromium } from "playwright-core";

const STEP_MS = 20_000;
const LONG_MS = 60_000;

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

/** The Rust test server on a fresh store; `workMs` is how long executing an order takes. */
async function startServer(workMs) {
  const dir = mkdtempSync(join(tmpdir(), "idem-e2e-"));
  const child = spawn(
    process.env.IDEM_E2E_SERVER,
    ["--root", process.env.IDEM_E2E_SITE, "--db", join(dir, "e2e.redb"), "--work-ms", String(workMs), "--lifetime-s", "150"],
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
  return {
    base,
    stats: async () => (await fetch(`${base}/stats`)).json(),
    async stop() {
      await fetch(`${base}/shutdown`, { method: "POST" }).catch(() => {});
      child.kill();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

let browser;
before(async () => {
  browser = await chromium.launch({
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
});
after(() => browser?.close());

/** A fresh browser profile and a server for one test; both end with it. */
async function scenario(workMs, body) {
  const server = await startServer(workMs);
  const context = await browser.newContext();
  try {
    await body({ server, context });
  } finally {
    await context.close();
    await server.stop();
  }
}

const ready = () =>
  document.body.dataset.ready === "true" && navigator.serviceWorker.controller !== null;

/** Opens the shop in a new tab of `context`. */
async function openShop(context, server, path = "/") {
  const page = await context.newPage();
  await page.goto(`${server.base}${path}`);
  await page.waitForFunction(ready, null, { timeout: STEP_MS });
  return page;
}

/** What a tab shows: every intent's key and state. */
const intents = (page) => page.evaluate(() => window.shop.sender.list().map(({ key, state }) => ({ key, state })));

/** Places `n` orders at once in `page`; resolves with their keys once all are durable. */
const order = (page, n) =>
  page.evaluate((n) => Promise.all(Array.from({ length: n }, () => window.shop.order().then((r) => r.key))), n);

/** Waits until `page` shows exactly `keys`, all completed. */
async function allCompleted(page, keys, ms = LONG_MS) {
  const want = [...keys].sort();
  await until(
    `${want.length} completed orders in ${page.url()}`,
    async () => {
      const shown = await intents(page);
      return shown.length === want.length && shown.every((i) => i.state === "completed") && shown;
    },
    ms,
  );
  assert.deepEqual((await intents(page)).map((i) => i.key).sort(), want);
}

/** On the server: every key in `keys` executed exactly once, nothing else executed or sent. */
async function executedOnce(server, keys) {
  const stats = await server.stats();
  const want = [...keys].sort();
  assert.deepEqual([...stats.executed].sort(), want, "each order executed exactly once, none lost");
  assert.ok(
    stats.received.every((key) => keys.includes(key)),
    "every attempt carried the key of one of the orders",
  );
  assert.ok(
    stats.headers.every((header, i) => header === `"${stats.received[i]}"`),
    "the key is sent as a structured field String",
  );
  return stats;
}

const leading = (page) => page.evaluate(() => window.shop.sender.leading);

/** Waits until `page` leads; resolves with when it began to (its clock, ms since the epoch). */
async function leads(page) {
  await page.waitForFunction(() => window.shop.sender.leading, null, { timeout: STEP_MS });
  return page.evaluate(() => window.shop.ledAt());
}

/** What `onChange` told `page`: the latest state of every intent it heard of. */
const heard = (page) => page.evaluate(() => Object.fromEntries(window.shop.seen));

test("offline, lost reply, reload while retrying, back online: executed once", { timeout: 120_000 }, () =>
  scenario(1_500, async ({ server, context }) => {
    const page = await openShop(context, server);
    const intent = () => {
      const li = document.querySelector("#intents li");
      return li && { key: li.dataset.key, state: li.dataset.state, attempts: Number(li.dataset.attempts), text: li.textContent };
    };

    // The user places the order; the request reaches the server, which starts executing.
    await page.click("#order");
    await until("the order to reach the server", async () => (await server.stats()).received.length >= 1);
    const sent = await page.evaluate(intent);
    assert.equal(sent.state, "in_flight");

    // The browser goes offline while the server works: the reply is lost.
    await context.setOffline(true);
    await page.waitForFunction(() => document.querySelector("#intents li")?.dataset.state === "queued", null, {
      timeout: STEP_MS,
    });
    const executed = await until("the server to finish the order", async () => {
      const s = await server.stats();
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

    const final = await executedOnce(server, [sent.key]);
    assert.ok(final.received.length >= 2, `at least the lost attempt and the retry: ${final.received.length}`);
    const last = final.answered.at(-1);
    assert.deepEqual(last, { key: sent.key, status: 201, replayed: true }, "the retry got the stored outcome");

    // The outcome is kept: another reload shows it without sending again.
    await page.reload();
    await page.waitForFunction(ready, null, { timeout: STEP_MS });
    assert.match((await page.evaluate(intent)).text, /Order #1 confirmed/);
    assert.equal((await server.stats()).received.length, final.received.length, "no send after completion");
    console.log(
      `e2e: key ${sent.key}; ${final.received.length} attempts, ${final.executed.length} execution, ` +
        `answers ${final.answered.map((a) => a.status + (a.replayed ? " (replayed)" : "")).join(", ")}`,
    );
  }),
);

test("the server takes the key as a structured field String or as a bare token", () =>
  scenario(0, async ({ server }) => {
    const post = (header, body) =>
      fetch(`${server.base}/orders`, { method: "POST", headers: { "Idempotency-Key": header }, body });
    const quoted = await post('"order-1"', '{"item":"A-1"}');
    assert.equal(quoted.status, 201);
    const bare = await post("order-1", '{"item":"A-1"}');
    assert.equal(bare.status, 201, "the same key, bare: the stored outcome");
    assert.equal(bare.headers.get("Idempotent-Replayed"), "true");
    assert.equal((await post('"order-1', "{}")).status, 400, "a String without its closing quote");
    assert.equal((await post('"a\\nb"', "{}")).status, 400, "an escape other than \\\" and \\\\");
    assert.deepEqual((await server.stats()).executed, ["order-1"]);
  }),
);

test("two tabs offline, 50 orders each at once; back online: 100 orders, each executed once", { timeout: 180_000 }, () =>
  scenario(20, async ({ server, context }) => {
    const tabs = [await openShop(context, server), await openShop(context, server)];
    await leads(tabs[0]);
    assert.equal(await leading(tabs[1]), false, "the first tab leads, the other waits");
    await context.setOffline(true);
    const placed = await Promise.all(tabs.map((tab) => order(tab, 50)));
    const keys = placed.flat();
    assert.equal(new Set(keys).size, 100, "100 distinct keys");
    // Durable before `order` resolved, and announced: both tabs show all 100, queued.
    for (const tab of tabs) {
      await until("every tab to show the 100 orders", async () => (await intents(tab)).length === 100);
      assert.ok((await intents(tab)).every((i) => i.state === "queued"));
    }
    assert.equal((await server.stats()).received.length, 0, "nothing is sent while offline");

    await context.setOffline(false);
    for (const tab of tabs) await allCompleted(tab, keys);
    await executedOnce(server, keys);
    const completed = Object.fromEntries(keys.map((key) => [key, "completed"]));
    for (const tab of tabs) assert.deepEqual(await heard(tab), completed, "onChange told every tab of every order");
  }),
);

for (const ending of ["closed", "crashed"]) {
  test(`the leading tab is ${ending} while sending: the other tab takes over, every order executed once`, { timeout: 180_000 }, () =>
    scenario(400, async ({ server, context }) => {
      const leader = await openShop(context, server);
      const other = await openShop(context, server);
      await leads(leader);
      assert.equal(await leading(other), false);
      // Placed in the other tab: it writes them, the leader sends them.
      const keys = await order(other, 30);
      await until("the server to be in the middle of the orders, some in flight", async () => {
        const s = await server.stats();
        return s.answered.length >= 4 && s.executed.length < 30 && s.received.length > s.answered.length;
      });

      let t0;
      if (ending === "closed") {
        t0 = Date.now();
        await leader.close();
      } else {
        const cdp = await context.newCDPSession(leader);
        const crashed = new Promise((resolve) => leader.once("crash", resolve));
        t0 = Date.now();
        cdp.send("Page.crash").catch(() => {}); // the renderer dies before it could answer
        await crashed;
      }
      const takeover = (await leads(other)) - t0;
      console.log(`e2e: leader ${ending}; the other tab leads ${takeover} ms later`);
      assert.ok(takeover < 1_000, `takeover within a second: ${takeover} ms`);

      await allCompleted(other, keys);
      await executedOnce(server, keys);
    }),
  );
}

test("every tab reloads while orders are in flight: nothing lost, nothing doubled", { timeout: 180_000 }, () =>
  scenario(400, async ({ server, context }) => {
    const tabs = [await openShop(context, server), await openShop(context, server)];
    const keys = (await Promise.all(tabs.map((tab) => order(tab, 15)))).flat();
    await until("the server to be in the middle of the orders, some in flight", async () => {
      const s = await server.stats();
      return s.answered.length >= 3 && s.executed.length < 30 && s.received.length > s.answered.length;
    });
    await Promise.all(tabs.map((tab) => tab.reload()));
    await Promise.all(tabs.map((tab) => tab.waitForFunction(ready, null, { timeout: STEP_MS })));
    for (const tab of tabs) await allCompleted(tab, keys);
    await until("one tab to lead", async () => (await Promise.all(tabs.map(leading))).filter(Boolean).length === 1);
    await executedOnce(server, keys);
  }),
);

test("every page closed with orders queued: back online, the service worker sends them", { timeout: 180_000 }, () =>
  scenario(20, async ({ server, context }) => {
    const tabs = [await openShop(context, server), await openShop(context, server)];
    await context.setOffline(true);
    const keys = (await Promise.all(tabs.map((tab) => order(tab, 5)))).flat();
    const tags = await tabs[1].evaluate(async () => (await navigator.serviceWorker.getRegistration()).sync.getTags());
    assert.deepEqual(tags, ["idem:idem"], "a Background Sync waits for the network");
    for (const tab of tabs) await tab.close();
    assert.equal(context.pages().length, 0, "no page of the site is open");

    await context.setOffline(false);
    await until("the service worker to send the orders", async () => (await server.stats()).executed.length === 10, LONG_MS);
    assert.equal(context.pages().length, 0, "sent with every page closed");
    // The worker stores each reply after the server answered it: once the server has
    // heard nothing from it for a second, every outcome is stored (a page opened before
    // that may lead and send again, under their keys, the orders still in flight).
    let heard = -1;
    await until("the service worker to go quiet", async () => {
      const now = (await server.stats()).received.length;
      const quiet = now === heard;
      heard = now;
      if (!quiet) await new Promise((r) => setTimeout(r, 1_000));
      return quiet;
    }, LONG_MS);
    const sent = await executedOnce(server, keys);

    // A page opened afterwards shows the outcomes the worker stored, and sends nothing.
    const page = await openShop(context, server);
    await allCompleted(page, keys, STEP_MS);
    assert.equal((await server.stats()).received.length, sent.received.length, "no send after completion");
  }),
);

test("a database written by version 0.1 is upgraded: the same orders, keys and records", { timeout: 120_000 }, () =>
  scenario(20, async ({ server, context }) => {
    const legacy = await context.newPage();
    await legacy.goto(`${server.base}/legacy.html`);
    await legacy.waitForFunction(() => document.body.dataset.ready === "true", null, { timeout: STEP_MS });
    await context.setOffline(true);
    const keys = await legacy.evaluate(async () => [(await window.shop.order()).key, (await window.shop.order()).key]);
    const before = await legacy.evaluate(async () => {
      const dbs = await indexedDB.databases();
      return dbs.find((d) => d.name === "idem")?.version;
    });
    assert.equal(before, 1, "version 0.1 wrote database version 1");
    await legacy.close();

    await context.setOffline(false);
    const page = await openShop(context, server);
    await allCompleted(page, keys);
    await executedOnce(server, keys);
    const stored = await page.evaluate(
      () =>
        new Promise((resolve, reject) => {
          const open = indexedDB.open("idem");
          open.onerror = () => reject(open.error);
          open.onsuccess = () => {
            const db = open.result;
            const count = db.transaction("intents").objectStore("intents").count();
            count.onsuccess = () => {
              resolve({ version: db.version, stores: [...db.objectStoreNames], records: count.result });
              db.close();
            };
          };
        }),
    );
    assert.deepEqual(stored, { version: 2, stores: ["intents", "ledger"], records: 2 });
  }),
);
