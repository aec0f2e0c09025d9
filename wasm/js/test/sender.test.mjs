// The helper idem-wasm/browser against an in-process server with IETF Idempotency-Key
// semantics (built on the package's MemoryReceiver): lost replies, a reload while a
// request hangs, 409 with Retry-After, 422, the offline/online switch, the header's
// structured-field form and the storage's records.
import { test } from "node:test";
import assert from "node:assert/strict";
import { IdemClient, MemoryReceiver, fingerprintBytes } from "idem-wasm";
import { IdemSender, idempotencyKeyHeader, memoryStorage, retryAfter } from "idem-wasm/browser";

const utf8 = (bytes) => new TextDecoder().decode(bytes);
const FAST = { baseBackoffMs: 5, maxBackoffMs: 20, seed: 11 };

/** The client as its storage holds it. */
async function stored(storage) {
  const { state, intents } = await storage.load();
  return IdemClient.restoreParts(state, intents);
}

/** An `Idempotency-Key` value: an RFC 8941 String, or a bare token as older senders send. */
function parseKey(value) {
  if (value === null) return null;
  if (!value.startsWith('"')) return value;
  const inner = /^"((?:[\x20\x21\x23-\x5b\x5d-\x7e]|\\["\\])*)"$/.exec(value);
  assert.ok(inner, `not a structured field String: ${value}`);
  return inner[1].replace(/\\(["\\])/g, "$1");
}

/** POST /orders with IETF semantics; `faults` decides per request what the network does. */
function server({ faults = () => "deliver", leaseMs = 10_000 } = {}) {
  const receiver = new MemoryReceiver({ leaseMs });
  const seen = { keys: [], headers: [], executed: [], replayed: 0 };
  const fetch = async (url, init) => {
    const header = new Headers(init.headers).get("Idempotency-Key");
    const key = parseKey(header);
    seen.headers.push(header);
    const body = new Uint8Array(init.body);
    seen.keys.push(key);
    const fault = faults(seen.keys.length);
    if (fault === "unreachable") throw new TypeError("fetch failed");
    const aborted = () =>
      new Promise((_, reject) => init.signal?.addEventListener("abort", () => reject(init.signal.reason)));
    if (fault === "hang") return aborted();
    if (key === null) return new Response("Idempotency-Key missing", { status: 400 });
    const id = { tenant: "shop", operation: new URL(url).pathname, key };
    const decision = receiver.begin(id, fingerprintBytes(body), Date.now());
    let response;
    if (decision.decision === "claimed") {
      seen.executed.push(utf8(body));
      const outcome = `order ${seen.executed.length}`;
      receiver.complete(id, decision.generation, "succeeded", { code: 201, body: outcome }, Date.now());
      response = new Response(outcome, { status: 201 });
    } else if (decision.decision === "replay") {
      seen.replayed++;
      response = new Response(decision.body, { status: decision.code, headers: { "Idempotent-Replayed": "true" } });
    } else if (decision.decision === "in_progress") {
      response = new Response("in progress", { status: 409, headers: { "Retry-After": "1" } });
    } else if (decision.decision === "conflict") {
      response = new Response("key reused with another payload", { status: 422 });
    } else {
      response = new Response("outcome unknown", { status: 500 });
    }
    if (fault === "lose-reply") throw new TypeError("network changed"); // executed, reply lost
    if (fault === "slow") return Promise.race([aborted(), new Promise((r) => setTimeout(() => r(response), 300))]);
    return response;
  };
  return { fetch, seen, receiver };
}

const open = (storage, srv, extra = {}) =>
  IdemSender.open({ url: "http://127.0.0.1/orders", storage, fetch: srv.fetch, client: FAST, ...extra });

test("a submitted intent is persisted before its first send, and completes", async () => {
  const storage = memoryStorage();
  const srv = server();
  let savedBeforeSend;
  const checking = {
    ...srv,
    fetch: async (url, init) => {
      const key = parseKey(new Headers(init.headers).get("Idempotency-Key"));
      savedBeforeSend ??= (await stored(storage)).get(key)?.key === key;
      return srv.fetch(url, init);
    },
  };
  const changes = [];
  const sender = await open(storage, checking, { onChange: (i) => changes.push(i.state) });
  try {
    const { key } = await sender.submit("order", '{"sku":"A-1","qty":2}');
    const done = await sender.settled(key);
    assert.equal(savedBeforeSend, true);
    assert.equal(done.state, "completed");
    assert.equal(done.status, 201);
    assert.equal(utf8(done.body), "order 1");
    assert.deepEqual(srv.seen.keys, [key]);
    assert.deepEqual(srv.seen.headers, [`"${key}"`], "the key as a structured field String");
    assert.deepEqual(srv.seen.executed, ['{"sku":"A-1","qty":2}']);
    assert.deepEqual(changes, ["queued", "in_flight", "completed"]);
    await sender.flush();
    assert.equal((await stored(storage)).get(key).state, "completed", "the outcome is persisted");
    assert.equal((await sender.forget(key)).key, key);
    assert.equal((await stored(storage)).get(key), undefined);
    assert.equal((await storage.load()).intents.length, 0, "its record is gone");
  } finally {
    sender.stop();
  }
});

test("an expired intent stays stored until it is resolved, then may be forgotten", async () => {
  const storage = memoryStorage();
  const srv = server({ faults: () => "unreachable" });
  let now = 1_000;
  const client = { ...FAST, serverRetentionMs: 10_000, safetyMarginMs: 1_000 };
  const sender = await open(storage, srv, { client, now: () => now });
  try {
    const { key } = await sender.submit("order", '{"sku":"C-3"}');
    for (let i = 0; i < 200 && srv.seen.keys.length < 1; i++) await new Promise((r) => setTimeout(r, 5));
    now = 10_000; // the deadline: no answer came
    await sender.flush();
    assert.equal((await sender.settled(key)).state, "expired");
    await assert.rejects(sender.forget(key), /intent has no definitive answer.*resolve it first/);
    assert.equal((await stored(storage)).get(key).state, "expired", "its record stays");
    await assert.rejects(sender.resolve(key, "not_executed", " "), /reason: 1 bytes, empty/);

    const resolved = await sender.resolve(key, "not_executed", "no such order at the shop");
    assert.deepEqual(resolved.resolution, { resolvedAs: "not_executed", reason: "no such order at the shop", resolvedAt: 10_000 });
    assert.deepEqual((await stored(storage)).get(key).resolution, resolved.resolution, "the resolution is durable");
    assert.equal(srv.seen.executed.length, 0);
    assert.equal((await sender.forget(key)).key, key);
    assert.equal((await storage.load()).intents.length, 0, "its record is gone");
  } finally {
    sender.stop();
  }
});

test("503 with the problem unknown: the intent stops as unknown, with what an operator needs", async () => {
  // What idem proxy answers first when its upstream timed out (504, the key becomes
  // Unknown), then to every retry (503, problem "unknown") until the key is reconciled.
  const problem = {
    type: "about:blank",
    title: "Service Unavailable",
    status: 503,
    detail: "the outcome of the request with this Idempotency-Key is unknown until it is reconciled; retry later",
    idempotency: "unknown",
  };
  const sent = [];
  const fetch = async (url, init) => {
    sent.push(url);
    if (sent.length === 1) return new Response("upstream timed out", { status: 504 });
    if (sent.length === 2) return new Response("busy", { status: 503, headers: { "Retry-After": "0" } });
    return new Response(JSON.stringify(problem), {
      status: 503,
      headers: { "Content-Type": "application/problem+json", "Retry-After": "60" },
    });
  };
  const storage = memoryStorage();
  const sender = await IdemSender.open({ url: "https://shop.example/orders?via=app", storage, fetch, client: FAST });
  try {
    const { key } = await sender.submit("order", '{"sku":"D-4"}');
    const intent = await sender.settled(key);
    assert.equal(sent.length, 3, "a 504 and a plain 503 are retried; the unknown answer is not");
    assert.equal(intent.state, "unknown");
    assert.equal(intent.status, 503);
    assert.deepEqual(intent.reconcile, { key, operation: "POST /orders", problem });
    assert.equal(sender.client.nextWakeup(), undefined, "nothing more to send");
    await sender.flush();
    assert.equal(sent.length, 3);
    assert.deepEqual(sender.list().map((i) => i.reconcile?.operation), ["POST /orders"]);
    assert.equal((await stored(storage)).get(key).state, "unknown", "the state is durable");
    await assert.rejects(sender.forget(key), /intent has no definitive answer.*resolve it first/);
    const resolved = await sender.resolve(key, "completed", "reconciled at the shop: order 7 exists");
    assert.equal(resolved.state, "unknown");
    assert.equal(resolved.resolution.resolvedAs, "completed");
    assert.equal((await sender.forget(key)).key, key);
  } finally {
    sender.stop();
  }
});

test("lost replies and a reload mid-request: executed once, one key, stored outcome", async () => {
  const storage = memoryStorage();
  // 1: executed but the reply is lost; 2: unreachable; 3: hangs until the page reloads.
  const srv = server({ faults: (n) => ["lose-reply", "unreachable", "hang"][n - 1] ?? "deliver" });
  const first = await open(storage, srv);
  const { key } = await first.submit("order", '{"sku":"B-7"}');
  for (let i = 0; i < 200 && srv.seen.keys.length < 3; i++) await new Promise((r) => setTimeout(r, 5));
  assert.equal(srv.seen.keys.length, 3, "three attempts before the reload");
  assert.equal(first.get(key).state, "in_flight");
  first.stop(); // the page goes away with a request in flight

  const second = await open(storage, srv);
  try {
    const done = await second.settled(key);
    assert.equal(done.state, "completed");
    assert.equal(utf8(done.body), "order 1", "the outcome of the first execution, replayed");
    assert.equal(srv.seen.executed.length, 1, "executed exactly once");
    assert.equal(srv.seen.replayed, 1);
    assert.equal(new Set(srv.seen.keys).size, 1, "every attempt carried the same key");
    assert.equal(srv.seen.keys[0], key);
    assert.equal(done.attempts, 4);
  } finally {
    second.stop();
  }
});

test("a payload string that is not well-formed UTF-16 is refused: nothing saved, nothing sent", async () => {
  const storage = memoryStorage();
  const srv = server();
  const sender = await open(storage, srv);
  try {
    await assert.rejects(sender.submit("order", '{"sku":"A-\udc00"}'), {
      name: "Error",
      message: "payload: not well-formed UTF-16: code unit 10 is a lone surrogate (\\udc00)",
    });
    assert.deepEqual(sender.list(), []);
    // Nothing was persisted: a sender opened on the same storage finds no intent.
    const reopened = await open(storage, srv, { start: false });
    assert.deepEqual(reopened.list(), [], "no intent was persisted");
    reopened.stop();
    const { key } = await sender.submit("order", '{"sku":"A-\ufffd"}');
    await sender.settled(key);
    assert.deepEqual(srv.seen.executed, ['{"sku":"A-\ufffd"}'], "only the well-formed payload was sent");
  } finally {
    sender.stop();
  }
});

test("409 waits for Retry-After, 422 is a conflict", async () => {
  const srv = server();
  const storage = memoryStorage();
  // Another executor holds the key: claim it on the server first.
  const sender = await open(storage, srv, { start: false });
  try {
    const { key } = await sender.submit("order", "C-1");
    const id = { tenant: "shop", operation: "/orders", key };
    const held = srv.receiver.begin(id, fingerprintBytes("C-1"), Date.now());
    assert.equal(held.decision, "claimed");
    await sender.flush();
    const waiting = sender.get(key);
    assert.equal(waiting.state, "queued");
    assert.equal(waiting.lastStatus, 409);
    assert.ok(waiting.nextAttemptAt >= Date.now() + 500, "waits about the Retry-After second");
    srv.receiver.complete(id, held.generation, "succeeded", { code: 200, body: "done elsewhere" }, Date.now());

    const { key: reused } = await sender.submit("order", "D-1");
    srv.receiver.begin({ ...id, key: reused }, fingerprintBytes("other payload"), Date.now());
    await sender.flush();
    assert.equal(sender.get(reused).state, "conflict");
    assert.equal(sender.get(reused).status, 422);
  } finally {
    sender.stop();
  }
});

/** Runs `body` with a fake `navigator.onLine` and window events, as in a browser. */
async function withBrowserGlobals(body) {
  const events = new EventTarget();
  const saved = Object.getOwnPropertyDescriptor(globalThis, "navigator");
  const nav = { onLine: true };
  Object.defineProperty(globalThis, "navigator", { value: nav, configurable: true, writable: true });
  globalThis.addEventListener = events.addEventListener.bind(events);
  globalThis.removeEventListener = events.removeEventListener.bind(events);
  const network = (online) => {
    nav.onLine = online;
    events.dispatchEvent(new Event(online ? "online" : "offline"));
  };
  try {
    await body(network);
  } finally {
    delete globalThis.addEventListener;
    delete globalThis.removeEventListener;
    if (saved) Object.defineProperty(globalThis, "navigator", saved);
    else delete globalThis.navigator;
  }
}

test("offline: nothing is sent until the online event", () =>
  withBrowserGlobals(async (network) => {
    network(false);
    const srv = server();
    const sender = await open(memoryStorage(), srv);
    try {
      const { key } = await sender.submit("order", "E-1");
      await new Promise((r) => setTimeout(r, 50));
      assert.deepEqual(srv.seen.keys, [], "offline: no request");
      assert.equal(sender.get(key).state, "queued");
      network(true);
      const done = await sender.settled(key);
      assert.equal(done.state, "completed");
      assert.deepEqual(srv.seen.keys, [key]);
    } finally {
      sender.stop();
    }
  }));

test("going offline drops the request in flight; back online, the retry gets the replay", () =>
  withBrowserGlobals(async (network) => {
    const srv = server({ faults: (n) => (n === 1 ? "slow" : "deliver") });
    const sender = await open(memoryStorage(), srv);
    try {
      const { key } = await sender.submit("order", "F-1");
      for (let i = 0; i < 100 && srv.seen.executed.length === 0; i++) await new Promise((r) => setTimeout(r, 5));
      assert.equal(sender.get(key).state, "in_flight");
      network(false);
      for (let i = 0; i < 100 && sender.get(key).state === "in_flight"; i++) await new Promise((r) => setTimeout(r, 5));
      assert.equal(sender.get(key).state, "queued", "the reply is lost with the network");
      await new Promise((r) => setTimeout(r, 350)); // the server's answer would have come by now
      assert.equal(sender.get(key).state, "queued");
      network(true);
      const done = await sender.settled(key);
      assert.equal(utf8(done.body), "order 1");
      assert.deepEqual(srv.seen.keys, [key, key]);
      assert.equal(srv.seen.executed.length, 1);
      assert.equal(srv.seen.replayed, 1);
    } finally {
      sender.stop();
    }
  }));

test("Retry-After: seconds and HTTP dates", () => {
  assert.equal(retryAfter("3", 1_000), 4_000);
  assert.equal(retryAfter(null, 1_000), undefined);
  assert.equal(retryAfter("soon", 1_000), undefined);
  assert.equal(retryAfter("Wed, 21 Oct 2015 07:28:00 GMT", 0), Date.UTC(2015, 9, 21, 7, 28));
  assert.equal(retryAfter("Wed, 21 Oct 2015 07:28:00 GMT", Date.UTC(2020, 0, 1)), Date.UTC(2020, 0, 1));
});

test("Idempotency-Key: an RFC 8941 String", () => {
  assert.equal(idempotencyKeyHeader("01890a5d-ac96-774b-bcce-b302099a8057"), '"01890a5d-ac96-774b-bcce-b302099a8057"');
  assert.equal(idempotencyKeyHeader('a"b\\c'), '"a\\"b\\\\c"');
  assert.equal(parseKey(idempotencyKeyHeader('a"b\\c')), 'a"b\\c');
  assert.throws(() => idempotencyKeyHeader("caf\u00e9"), /not printable ASCII/);
});

/** A storage in memory that tells what each write held. */
function countingStorage() {
  const inner = memoryStorage();
  const writes = [];
  return {
    writes,
    load: () => inner.load(),
    write: (change) => {
      const size = (list) => (list ?? []).reduce((n, [, record]) => n + record.length, 0);
      writes.push({
        add: change.add?.length ?? 0,
        put: change.put?.length ?? 0,
        delete: change.delete?.length ?? 0,
        bytes: size(change.add) + size(change.put) + (change.state?.length ?? 0),
      });
      return inner.write(change);
    },
  };
}

test("one record per intent: a change writes that intent, not the queue", async () => {
  const storage = countingStorage();
  const srv = server();
  const sender = await open(storage, srv, { start: false });
  try {
    const keys = [];
    for (let i = 0; i < 20; i++) keys.push((await sender.submit("order", `order ${i}`)).key);
    const adds = storage.writes.filter((w) => w.add > 0);
    assert.equal(adds.length, 20, "one transaction per submit, none waiting on another");
    const state = sender.client.ledgerState().length;
    assert.deepEqual(
      adds.map((w) => [w.put, w.bytes]),
      keys.map((key, i) => [0, sender.client.intent(key).length + (i === 0 ? state : 0)]),
      "a submit writes its own record (the first one the new ledger's state too)",
    );
    assert.equal((await storage.load()).intents.length, 20);

    await sender.flush();
    assert.equal(srv.seen.executed.length, 20);

    // One more, sent alone: each write (in flight, then completed) holds its record only.
    const { key } = await sender.submit("order", "one more");
    storage.writes.length = 0;
    await sender.flush();
    assert.equal(sender.get(key).state, "completed");
    const bound = sender.client.intent(key).length + state;
    assert.equal(storage.writes.length, 2);
    for (const w of storage.writes) {
      assert.equal(w.add + w.put + w.delete, 1, JSON.stringify(w));
      assert.ok(w.bytes <= bound, `${w.bytes} bytes, at most ${bound}`);
    }
    assert.ok(bound * 10 < sender.client.snapshot().length, "far less than the whole queue");

    // Concurrent submits share transactions, and all of them are durable.
    storage.writes.length = 0;
    const many = await Promise.all(Array.from({ length: 30 }, (_, i) => sender.submit("order", `burst ${i}`)));
    assert.ok(storage.writes.length < 30, `${storage.writes.length} transactions for 30 submits`);
    const back = await stored(storage);
    assert.ok(many.every(({ key }) => back.get(key)?.state === "queued"));
    assert.equal(back.size, 51);
  } finally {
    sender.stop();
  }
});

test("a storage holding a version 1 snapshot: its intents become records on the first lead", async () => {
  const old = new IdemClient(FAST);
  const { key } = old.begin("order", "G-1", Date.now());
  void old.due(Date.now()); // in flight when the page went away
  const storage = countingStorage();
  await storage.write({ state: old.snapshot() });
  const srv = server();
  const sender = await open(storage, srv);
  try {
    const done = await sender.settled(key);
    assert.equal(done.state, "completed");
    assert.equal(done.attempts, 2, "sent again under its key");
    assert.deepEqual(srv.seen.keys, [key]);
    await sender.flush();
    const loaded = await storage.load();
    assert.equal(loaded.intents.length, 1, "the intent has a record of its own");
    assert.equal(IdemClient.restoreParts(loaded.state, []).size, 0, "the state holds no intent any more");
    assert.equal((await stored(storage)).get(key).state, "completed");
  } finally {
    sender.stop();
  }
});

/** Web Locks in one process, as browsers grant them: one holder per name, the others in line. */
function lockManager() {
  const held = new Map();
  const queues = new Map();
  const grant = (name) => {
    if (held.has(name)) return;
    const next = queues.get(name)?.shift();
    if (!next) return;
    held.set(name, next);
    Promise.resolve()
      .then(() => next.callback({ name }))
      .then(next.resolve, next.reject)
      .finally(() => {
        held.delete(name);
        grant(name);
      });
  };
  return {
    request(name, options, callback) {
      return new Promise((resolve, reject) => {
        const entry = { callback, resolve, reject };
        options.signal?.addEventListener("abort", () => {
          const queue = queues.get(name) ?? [];
          if (!queue.includes(entry)) return;
          queue.splice(queue.indexOf(entry), 1);
          reject(options.signal.reason ?? new DOMException("aborted", "AbortError"));
        });
        queues.set(name, [...(queues.get(name) ?? []), entry]);
        grant(name);
      });
    },
    async query() {
      return { held: [...held.keys()].map((name) => ({ name })), pending: [...queues].flatMap(([name, q]) => q.map(() => ({ name }))) };
    },
  };
}

/** A storage in memory that senders share by name, as tabs share an IndexedDB database. */
function sharedStorage(name) {
  return { name, ...memoryStorage() };
}

/** Events to wait for: `when(test)` resolves with the first later `emit(value)` that passes `test`. */
function signals() {
  const waiting = new Set();
  return {
    emit(value) {
      for (const w of waiting) {
        if (!w.test(value)) continue;
        waiting.delete(w);
        clearTimeout(w.timer);
        w.resolve(value);
      }
    },
    when(test, what, ms = 5_000) {
      return new Promise((resolve, reject) => {
        const w = { test, resolve };
        w.timer = setTimeout(() => {
          waiting.delete(w);
          reject(new Error(`timed out after ${ms} ms waiting for ${what}`));
        }, ms);
        waiting.add(w);
      });
    },
  };
}

test("two senders on one storage: one leads and sends, the other's intents too; stop hands the lead over", async () => {
  const storage = sharedStorage(`idem:test-${Date.now()}`);
  const locks = lockManager();
  const srv = server();
  const events = signals();
  const leadership = [];
  const openTab = (name, extra = {}) =>
    open(storage, srv, {
      locks,
      backgroundSync: false,
      onLeader: (leading) => {
        leadership.push([name, leading]);
        events.emit({ name, leading });
      },
      onChange: (intent) => events.emit({ name, intent }),
      ...extra,
    });
  const firstLeads = events.when((e) => e.name === "first" && e.leading, "the first sender to lead");
  const first = await openTab("first");
  await firstLeads;
  const second = await openTab("second");
  const third = await openTab("third", { start: false });
  try {
    assert.equal(second.leading, false);
    const heardByThird = (key) => events.when((e) => e.name === "third" && e.intent?.key === key && e.intent.state === "completed", "the third sender to hear the outcome");
    const { key } = await second.submit("order", "H-1");
    const thirdHeard = heardByThird(key);
    assert.equal((await stored(storage)).get(key).state, "queued", "durable when submit resolves");
    const done = await second.settled(key);
    assert.equal(done.state, "completed", "the follower hears the outcome");
    assert.deepEqual(srv.seen.keys, [key], "sent once, by the leader");
    await thirdHeard;

    const secondLeads = events.when((e) => e.name === "second" && e.leading, "the second sender to lead");
    first.stop();
    await secondLeads;
    const secondHears = events.when((e) => e.name === "second" && e.intent?.state === "completed", "the new leader to send it");
    const { key: next } = await first.submit("order", "H-2"); // a stopped sender still submits
    assert.equal((await secondHears).intent.key, next);
    assert.deepEqual(srv.seen.keys, [key, next]);
    assert.deepEqual(leadership, [["first", true], ["first", false], ["second", true]]);
    assert.equal(third.leading, false, "never started: never leads");
  } finally {
    for (const sender of [first, second, third]) sender.close();
  }
});
