// The helper idem-wasm/browser against an in-process server with IETF Idempotency-Key
// semantics (built on the package's MemoryReceiver): lost replies, a reload while a
// request hangs, 409 with Retry-After, 422, and the offline/online switch.
import { test } from "node:test";
import assert from "node:assert/strict";
import { IdemClient, MemoryReceiver, fingerprintBytes } from "idem-wasm";
import { IdemSender, memoryStorage, retryAfter } from "idem-wasm/browser";

const utf8 = (bytes) => new TextDecoder().decode(bytes);
const FAST = { baseBackoffMs: 5, maxBackoffMs: 20, seed: 11 };

/** POST /orders with IETF semantics; `faults` decides per request what the network does. */
function server({ faults = () => "deliver", leaseMs = 10_000 } = {}) {
  const receiver = new MemoryReceiver({ leaseMs });
  const seen = { keys: [], executed: [], replayed: 0 };
  const fetch = async (url, init) => {
    const key = new Headers(init.headers).get("Idempotency-Key");
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
      const key = new Headers(init.headers).get("Idempotency-Key");
      savedBeforeSend ??= IdemClient.restore(await storage.load()).get(key)?.key === key;
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
    assert.deepEqual(srv.seen.executed, ['{"sku":"A-1","qty":2}']);
    assert.deepEqual(changes, ["queued", "in_flight", "completed"]);
    await sender.flush();
    const stored = IdemClient.restore(await storage.load()).get(key);
    assert.equal(stored.state, "completed", "the outcome is persisted");
    assert.equal((await sender.forget(key)).key, key);
    assert.equal(IdemClient.restore(await storage.load()).get(key), undefined);
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
    const saved = await storage.load();
    assert.equal(saved === undefined ? 0 : IdemClient.restore(saved).size, 0, "no intent was persisted");
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
