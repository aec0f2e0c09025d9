// Benchmark (printed, not asserted): idem-wasm/browser in headless Chromium with a queue of
// 2,000 intents. Prints the bytes each change writes to IndexedDB (one record per intent)
// beside what one snapshot of the whole queue weighs (what version 0.1 wrote on every
// change), and how long `submit` takes (until its record is durable) with 0 and with
// 2,000 intents queued.
//
// Environment: IDEM_E2E_SERVER (serves the page), IDEM_E2E_SITE, CHROMIUM.
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { chromium } from "playwright-core";

const QUEUED = 2_000;
const dir = mkdtempSync(join(tmpdir(), "idem-bench-"));
const server = spawn(
  process.env.IDEM_E2E_SERVER,
  ["--root", process.env.IDEM_E2E_SITE, "--db", join(dir, "bench.redb"), "--lifetime-s", "300"],
  { stdio: ["ignore", "pipe", "inherit"] },
);
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-quic", "--no-first-run"],
});
try {
  const line = await new Promise((resolve, reject) => {
    createInterface({ input: server.stdout }).once("line", resolve);
    server.once("exit", (code) => reject(new Error(`e2e-server exited with ${code}`)));
  });
  const base = line.replace(/^listening /, "");
  const page = await browser.newPage();
  await page.goto(`${base}/bench.html`);
  await page.waitForFunction(() => document.body.dataset.ready === "true", null, { timeout: 20_000 });
  const started = Date.now();
  const r = await page.evaluate((queued) => window.bench.run({ queued }), QUEUED);
  const ms = (x) => x.toFixed(1).padStart(8);
  const n = (x) => x.toLocaleString("en").padStart(8);
  console.log(`idem-wasm/browser: a queue of ${n(r.queued).trim()} intents in headless Chromium, IndexedDB with strict durability`);
  console.log(`                                      0 queued   ${r.queued.toLocaleString("en")} queued`);
  console.log(`submit, median (ms, until durable)    ${ms(r.submitMs.empty.median)}   ${ms(r.submitMs.full.median)}`);
  console.log(`submit, 90th percentile (ms)          ${ms(r.submitMs.empty.p90)}   ${ms(r.submitMs.full.p90)}`);
  console.log(`bytes written per change, ${r.queued.toLocaleString("en")} queued:`);
  console.log(`  submit (the new intent's record)    ${n(r.bytesPerChange.submit)}`);
  console.log(`  send or reply (that intent's record)${n(r.bytesPerChange.sendOrReply)}`);
  console.log(`  largest write while measuring       ${n(r.bytesPerChange.largest)}`);
  console.log(`  one snapshot of the whole queue     ${n(r.snapshotBytes)}   (what version 0.1 wrote per change)`);
  console.log(`(${r.writes} writes while measuring; ${((Date.now() - started) / 1000).toFixed(1)} s in all)`);
} finally {
  await browser.close();
  server.kill();
  rmSync(dir, { recursive: true, force: true });
}
