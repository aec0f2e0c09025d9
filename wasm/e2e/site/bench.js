// The benchmark page of wasm/e2e/bench.mjs: how much a change writes to IndexedDB and how
// long `submit` takes, with 0 and with 2,000 intents queued. The server is a function in
// the page: an order whose payload starts with "wait" is answered 503 with a Retry-After
// of an hour (so it stays queued), any other one 201.
import { IdemSender, indexedDbStorage } from "idem-wasm/browser";

/** The storage, with the size of every write it made. */
function counting(storage) {
  const writes = [];
  const size = (records) => (records ?? []).reduce((n, [, record]) => n + record.length, 0);
  return {
    writes,
    name: storage.name,
    load: () => storage.load(),
    write(change) {
      writes.push({
        add: change.add?.length ?? 0,
        put: change.put?.length ?? 0,
        bytes: size(change.add) + size(change.put) + (change.state?.length ?? 0),
      });
      return storage.write(change);
    },
  };
}

const server = async (url, init) => {
  const body = new TextDecoder().decode(init.body);
  if (body.startsWith("wait")) return new Response("busy", { status: 503, headers: { "Retry-After": "3600" } });
  return new Response("ok", { status: 201 });
};

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const p90 = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length * 0.9)];

/** Sends until nothing is in flight or due (every order waits for its Retry-After). */
async function quiet(sender) {
  for (let round = 0; round < 1_000; round++) {
    await sender.flush();
    const busy = sender.list().some((i) => i.state === "in_flight" || (i.state === "queued" && i.nextAttemptAt <= Date.now()));
    if (!busy) return;
  }
  throw new Error("the queue did not settle");
}

/** Times `samples` submits one after another; each is sent and answered behind it. */
async function timed(sender, samples, label) {
  const times = [];
  for (let i = 0; i < samples; i++) {
    const t0 = performance.now();
    await sender.submit("order", `wait ${label} ${i}`);
    times.push(performance.now() - t0);
  }
  await quiet(sender);
  return { median: median(times), p90: p90(times) };
}

async function run({ queued = 2_000, samples = 25, batch = 100 } = {}) {
  const storage = counting(indexedDbStorage({ database: "idem-bench" }));
  let lead;
  const leading = new Promise((resolve) => (lead = resolve));
  const sender = await IdemSender.open({
    url: "/orders",
    storage,
    fetch: server,
    backgroundSync: false,
    onLeader: (yes) => yes && lead(),
  });
  await leading;

  // Warm up (compiled code, the database's files) with orders that complete, then forget them.
  await Promise.all(Array.from({ length: samples }, (_, i) => sender.submit("order", `warm-up ${i}`)));
  await quiet(sender);
  for (const intent of sender.list()) await sender.forget(intent.key);

  const empty = await timed(sender, samples, "empty");
  while (sender.client.size < queued) {
    const n = Math.min(batch, queued - sender.client.size);
    await Promise.all(Array.from({ length: n }, (_, i) => sender.submit("order", `wait fill ${sender.client.size} ${i}`)));
  }
  await quiet(sender);
  const waiting = sender.list().filter((i) => i.state === "queued").length;

  storage.writes.length = 0;
  const full = await timed(sender, samples, "full");
  const adds = storage.writes.filter((w) => w.add > 0 && w.put === 0).map((w) => w.bytes);
  const puts = storage.writes.filter((w) => w.add === 0 && w.put === 1).map((w) => w.bytes);
  const result = {
    queued: waiting,
    submitMs: { empty, full },
    bytesPerChange: { submit: median(adds), sendOrReply: median(puts), largest: Math.max(...storage.writes.map((w) => w.bytes)) },
    writes: storage.writes.length,
    snapshotBytes: sender.client.snapshot().length,
  };
  sender.close();
  return result;
}

window.bench = { run };
document.body.dataset.ready = "true";
