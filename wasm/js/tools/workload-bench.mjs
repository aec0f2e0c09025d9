// A heavy workload for the npm package's .wasm, timed phase by phase: what the allocator
// (and any other change to the build) costs in speed and memory. Prints numbers; checks
// only that each phase did what it says.
//
//   node wasm/js/tools/workload-bench.mjs <target>/idem-wasm/pkg/node [records] [rounds]
//
// Phases: a MemoryReceiver takes `records` requests (begin, complete with a 1 KB body,
// replay), then lists and snapshots them and sweeps them out; an IdemClient begins 2,000
// intents of mixed payload sizes, sends and answers them in a shuffled order (so freed
// blocks are scattered), snapshots and forgets them, `rounds` times; fingerprintJson hashes
// a 200 KB document. Each phase's best of three runs is printed, and the size of the wasm memory at the end
// (its peak: a wasm memory never shrinks).
import { createRequire } from "node:module";
import { performance } from "node:perf_hooks";
import path from "node:path";

const [dir, recordsArg, roundsArg] = process.argv.slice(2);
if (!dir) {
  console.error("usage: workload-bench.mjs <package node dir> [records] [rounds]");
  process.exit(2);
}
const records = Number(recordsArg ?? 10000);
const rounds = Number(roundsArg ?? 3);
const require = createRequire(import.meta.url);
// The Node build keeps its instance to itself: catch it as it is made, to read the size of
// its memory (which only grows) at the end.
let instance;
const Instance = WebAssembly.Instance;
WebAssembly.Instance = function (module, imports) {
  instance = new Instance(module, imports);
  return instance;
};
const idem = require(path.resolve(dir, "idem_wasm.js"));
WebAssembly.Instance = Instance;

const T0 = 1_700_000_000_000;
const body = new Uint8Array(1024).fill(7);
let seed = 1;
const next = () => {
  // xorshift32: the same sequence on every run.
  seed ^= seed << 13;
  seed ^= seed >>> 17;
  seed ^= seed << 5;
  return seed >>> 0;
};
const random16 = () => {
  const out = new Uint8Array(16);
  for (let i = 0; i < 16; i++) out[i] = next() >>> 24;
  return out;
};
const shuffle = (items) => {
  for (let i = items.length - 1; i > 0; i--) {
    const j = next() % (i + 1);
    [items[i], items[j]] = [items[j], items[i]];
  }
  return items;
};
const expect = (cond, what) => {
  if (!cond) throw new Error(`workload-bench: ${what}`);
};

function receiver() {
  const r = new idem.MemoryReceiver({ tombstoneRetentionMs: 0 });
  const fp = idem.fingerprintBytes("payload");
  for (let i = 0; i < records; i++) {
    const id = { tenant: "t", operation: "pay", key: `key-${i}` };
    const d = r.begin(id, fp, T0 + i);
    expect(d.decision === "claimed", `record ${i} claimed`);
    r.complete(id, d.generation, "succeeded", { code: 200, body }, T0 + i);
  }
  for (let i = 0; i < records; i += 7) {
    const d = r.begin({ tenant: "t", operation: "pay", key: `key-${i}` }, fp, T0 + records);
    expect(d.decision === "replay", `record ${i} replayed`);
  }
  expect(r.list().length === records, "list holds every record");
  expect(r.snapshot().length > records * 1024, "snapshot holds every body");
  let swept = 0;
  while (swept < records) {
    const n = r.sweep(T0 + 2 * 86_400_000, 500);
    expect(n > 0, "sweep makes progress");
    swept += n;
  }
  r.free();
}

function client() {
  const c = new idem.IdemClient({ seed: 7 });
  for (let round = 0; round < rounds; round++) {
    const now = T0 + round * 1000;
    const keys = [];
    for (let i = 0; i < 2000; i++) {
      const payload = new Uint8Array(16 + ((i * 37) % 2000)).fill(i & 0xff);
      keys.push(c.begin("pay", payload, now, random16()).key);
    }
    const sent = [];
    for (let batch = c.due(now); batch.length > 0; batch = c.due(now)) {
      sent.push(...batch.map((attempt) => attempt.key));
    }
    expect(sent.length >= 2000, `every new intent is sent (${sent.length})`);
    for (const key of shuffle(sent)) {
      if (key.charCodeAt(0) % 3 === 0) c.onTransportError(key, now);
      else c.onResponse(key, { status: 201, body: "ok" }, now);
      c.takeChanges();
    }
    expect(c.snapshot().length > 0, "snapshot");
    for (const key of shuffle(keys.slice())) {
      const view = c.get(key);
      if (view.state === "completed") c.forget(key);
    }
    c.list();
  }
  c.free();
}

function fingerprint() {
  const items = [];
  for (let i = 0; i < 2000; i++) items.push({ id: i, name: `item ${i}`, price: i * 1.25, tags: ["a", "b"] });
  const text = JSON.stringify({ items });
  expect(/^[0-9a-f]{64}$/.test(idem.fingerprintJson(text)), "fingerprint of the document");
}

for (const [name, run] of [
  [`receiver, ${records} records`, receiver],
  [`client, ${rounds} x 2000 intents`, client],
  ["fingerprintJson, 200 KB", fingerprint],
]) {
  let best = Infinity;
  for (let i = 0; i < 3; i++) {
    const start = performance.now();
    run();
    best = Math.min(best, performance.now() - start);
  }
  console.log(`${name.padEnd(32)} ${best.toFixed(1).padStart(9)} ms`);
}
const memory = instance.exports.memory.buffer.byteLength;
console.log(`${"wasm memory at the end".padEnd(32)} ${(memory / 1048576).toFixed(1).padStart(9)} MiB`);
