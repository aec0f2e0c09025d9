// The packed npm package as a user gets it from `npm install`: ESM and CommonJS entries,
// the shared fingerprint vectors, the client, the receiver, and errors.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import init, {
  IdemClient,
  MemoryReceiver,
  canonicalJson,
  fingerprintBytes,
  fingerprintFields,
  fingerprintJson,
} from "idem-wasm";

const require = createRequire(import.meta.url);
const vectors = JSON.parse(readFileSync(process.env.IDEM_VECTORS, "utf8"));
const hex = (text) => Uint8Array.from(text.match(/../g) ?? [], (b) => parseInt(b, 16));
const utf8 = (bytes) => new TextDecoder().decode(bytes);

test("ESM and CommonJS entries expose the same API", async () => {
  await init(); // nothing to do in Node; present so browser code runs unchanged
  const cjs = require("idem-wasm");
  for (const name of ["IdemClient", "MemoryReceiver", "fingerprintBytes", "fingerprintFields", "fingerprintJson", "canonicalJson"]) {
    assert.equal(typeof cjs[name], "function", name);
  }
  assert.equal(cjs.fingerprintBytes("abc"), fingerprintBytes("abc"));
  const pkg = require("idem-wasm/package.json");
  assert.equal(pkg.name, "idem-wasm");
  assert.equal(typeof pkg.exports["./browser"].types, "string");
});

test("shared vectors: raw bytes", () => {
  assert.ok(vectors.bytes.length > 0);
  for (const v of vectors.bytes) assert.equal(fingerprintBytes(hex(v.hex)), v.fingerprint, v.name);
});

test("shared vectors: named fields", () => {
  assert.ok(vectors.fields.length > 0);
  for (const v of vectors.fields) {
    const pairs = v.fields.map(([name, value]) => [name, hex(value)]);
    if (v.error) assert.throws(() => fingerprintFields(pairs), { name: "Error", message: v.error }, v.name);
    else assert.equal(fingerprintFields(pairs), v.fingerprint, v.name);
  }
  assert.equal(fingerprintFields({ to: "acct-9", amount: "100" }), fingerprintFields([["amount", "100"], ["to", "acct-9"]]));
});

test("shared vectors: canonical JSON with ignored paths, RFC 8785 cases", () => {
  assert.ok(vectors.json.length >= 40);
  for (const v of vectors.json) {
    if (v.error) {
      assert.throws(() => fingerprintJson(v.text, v.ignored), { name: "Error", message: v.error }, v.name);
    } else {
      assert.equal(canonicalJson(v.text, v.ignored), v.canonical, v.name);
      assert.equal(fingerprintJson(v.text, v.ignored), v.fingerprint, v.name);
    }
  }
  assert.equal(fingerprintJson("{}"), fingerprintBytes("{}"));
});

test("shared vectors: JavaScript strings, lone surrogates refused", () => {
  assert.ok(vectors.strings.length >= 12);
  const call = { fingerprintJson, canonicalJson, fingerprintBytes };
  for (const v of vectors.strings) {
    const text = String.fromCharCode(...v.units.split(" ").map((u) => parseInt(u, 16)));
    if (v.error) assert.throws(() => call[v.function](text), { name: "Error", message: v.error }, v.name);
    else assert.equal(call[v.function](text), v.fingerprint, v.name);
  }
});

test("a string that is not well-formed UTF-16 is refused wherever a string is taken", () => {
  const lone = (field, at, unit) => `${field}: not well-formed UTF-16: code unit ${at} is a lone surrogate (\\u${unit})`;
  // Converted to UTF-8, all three would be one string: only the last is well-formed.
  assert.throws(() => fingerprintJson('["a\ud800b"]'), { message: lone("text", 3, "d800") });
  assert.throws(() => fingerprintJson('["a\udfffb"]'), { message: lone("text", 3, "dfff") });
  assert.equal(fingerprintJson('["a\ufffdb"]'), fingerprintBytes('["a\ufffdb"]'));
  assert.throws(() => canonicalJson('{"\udc00":1}'), { message: lone("text", 2, "dc00") });
  assert.throws(() => fingerprintJson("{}", ["/\ud800"]), { message: lone("ignoredPaths[0]", 1, "d800") });
  // Escaped in the JSON text, the core refuses it.
  assert.throws(() => fingerprintJson('["\\ud800"]'), {
    message: "json: escape \\ud800 at byte 2 is a lone surrogate, which I-JSON forbids",
  });
  assert.throws(() => fingerprintBytes("x\udfff"), { message: lone("bytes", 1, "dfff") });
  assert.throws(() => fingerprintFields({ "\ud800": "1" }), { message: lone("fields[0][0]", 0, "d800") });

  const client = new IdemClient({ seed: 9 });
  assert.throws(() => client.begin("order", '{"sku":"\ud83d"}', 1), { message: lone("payload", 8, "d83d") });
  assert.throws(() => client.begin("order\udbff", "x", 1), { message: lone("operation", 5, "dbff") });
  assert.equal(client.size, 0, "nothing was queued");
  const { key } = client.begin("order", '{"sku":"\ud83d\ude00"}', 1);
  assert.equal(utf8(client.due(1)[0].payload), '{"sku":"\u{1f600}"}');
  assert.throws(() => client.onResponse(key, { status: 201, body: "\udfff" }, 2), { message: lone("reply.body", 0, "dfff") });

  const receiver = new MemoryReceiver();
  const id = { tenant: "shop\udc00", operation: "o", key: "k" };
  assert.throws(() => receiver.begin(id, fingerprintBytes("x"), 1), { message: lone("id.tenant", 4, "dc00") });
});

test("JSON text over the size limit is refused, by its length before it is copied", () => {
  const limit = 16 * 1024 * 1024;
  assert.throws(() => fingerprintJson("1".repeat(limit + 1)), {
    message: `json: at least ${limit + 1} bytes (${limit + 1} UTF-16 code units), more than the limit of ${limit} bytes`,
  });
  assert.throws(() => canonicalJson(`"${"\u00e9".repeat(limit / 2)}"`), {
    message: `json: ${limit + 2} bytes, more than the limit of ${limit} bytes`,
  });
  const largest = `"${"a".repeat(limit - 2)}"`;
  assert.equal(canonicalJson(largest).length, limit);
});

test("a client keeps one key per intent across retries and a reload", () => {
  const client = new IdemClient({ serverRetentionMs: 100_000, safetyMarginMs: 10_000, baseBackoffMs: 100, maxBackoffMs: 1_600, seed: 7n });
  const { key, fingerprint } = client.begin("order", '{"sku":"A-1"}', 1_000);
  assert.match(key, /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  assert.equal(fingerprint, fingerprintBytes('{"sku":"A-1"}'));
  const other = client.begin("order", '{"sku":"A-1"}', 50_000);
  assert.notEqual(other.key, key, "every begin is a new intent with a new key");

  const sent = client.due(1_000);
  assert.equal(sent.length, 1, "the later intent is not due yet");
  const [first] = sent;
  assert.equal(first.key, key);
  assert.equal(first.attempt, 1);
  assert.ok(first.payload instanceof Uint8Array);
  assert.equal(utf8(first.payload), '{"sku":"A-1"}');
  assert.equal(client.get(key).state, "in_flight");

  const effect = client.onTransportError(key, 1_010);
  assert.equal(effect.effect, "requeued");
  const reloaded = IdemClient.restore(client.snapshot());
  const again = reloaded.due(effect.at).find((a) => a.key === key);
  assert.equal(again.attempt, 2);
  assert.deepEqual(reloaded.onResponse(key, { status: 409, retryAt: 3_000 }, effect.at), { effect: "requeued", at: 3_000 });
  assert.equal(reloaded.nextWakeup(), 3_000);
  reloaded.due(3_000);
  assert.deepEqual(reloaded.onResponse(key, { status: 201, body: "order 17" }, 3_001), { effect: "finished", state: "completed" });

  const view = reloaded.get(key);
  assert.equal(view.state, "completed");
  assert.equal(view.status, 201);
  assert.equal(utf8(view.body), "order 17");
  assert.equal(view.attempts, 3);
  assert.equal(view.deadline, 91_000);
  assert.deepEqual(reloaded.onResponse(key, { status: 500 }, 3_002), { effect: "ignored" });
  assert.deepEqual(reloaded.list().map((i) => i.key).sort(), [key, other.key].sort());
  assert.equal(reloaded.forget(key).key, key);
  assert.equal(reloaded.get(key), undefined);
  assert.equal(reloaded.size, 1);
});

test("replies map to states as the IETF draft says", () => {
  const client = new IdemClient({ seed: 1 });
  const cases = [[200, "completed"], [204, "completed"], [422, "conflict"], [400, "failed"], [404, "failed"], [303, "failed"]];
  for (const [status, state] of cases) {
    const { key } = client.begin("op", "x", 1);
    client.due(1);
    assert.equal(client.onResponse(key, { status }, 2).state, state, `status ${status}`);
  }
  for (const status of [409, 408, 425, 429, 500, 503, 0]) {
    const { key } = client.begin("op", "x", 1);
    client.due(1);
    assert.equal(client.onResponse(key, { status }, 2).effect, "requeued", `status ${status}`);
  }
});

test("an intent expires at its deadline instead of being sent again", () => {
  const client = new IdemClient({ serverRetentionMs: 10_000, safetyMarginMs: 1_000, seed: 3 });
  const { key } = client.begin("op", "x", 0);
  client.due(0);
  client.onTransportError(key, 1);
  assert.deepEqual(client.due(9_000), []);
  assert.equal(client.get(key).state, "expired");
  assert.equal(client.nextWakeup(), undefined);
});

test("an expired intent is forgotten only once resolved, with a reason", () => {
  const client = new IdemClient({ serverRetentionMs: 10_000, safetyMarginMs: 1_000, seed: 3 });
  const { key } = client.begin("op", "x", 0);
  client.due(0);
  assert.equal(client.onTransportError(key, 9_000).state, "expired");
  assert.throws(() => client.forget(key), {
    message: `key ${key}: intent has no definitive answer (expired, or unknown at the receiver), its effect may or may not have happened; resolve it first (as completed, failed or not executed, with a reason)`,
  });
  assert.throws(() => client.resolve(key, "done", "x", 9_001), /^Error: resolvedAs: "done", expected "completed"/);
  assert.throws(() => client.resolve(key, "completed", "", 9_001), { message: "reason: 0 bytes, empty, say why (who confirmed it, where)" });
  assert.throws(() => client.resolve(key, "completed", 5, 9_001), { message: "reason: 5, expected a string" });
  assert.equal(client.get(key).resolution, undefined);
  const resolved = client.resolve(key, "completed", "receipt 17 in the shop's records", 9_001);
  assert.deepEqual(resolved.resolution, { resolvedAs: "completed", reason: "receipt 17 in the shop's records", resolvedAt: 9_001 });
  assert.equal(resolved.state, "expired");
  assert.deepEqual(IdemClient.restore(client.snapshot()).get(key).resolution, resolved.resolution);
  assert.equal(client.forget(key).resolution.resolvedAs, "completed");
  assert.equal(client.size, 0);
});

test("errors are Error objects with the Rust message", () => {
  assert.throws(() => new IdemClient({ safetyMarginMs: 0 }), {
    name: "Error",
    message: "safety_margin_ms: 0, must be at least 1 ms (it covers clock skew and time in flight)",
  });
  assert.throws(() => new IdemClient({ retention: 1 }), /options: unknown member "retention"/);
  const client = new IdemClient({ seed: 5 });
  assert.throws(() => client.begin("", "x", 1), { message: "operation: empty, needs 1 to 255 bytes" });
  assert.throws(() => client.begin("op", 42, 1), { message: "payload: 42, expected a Uint8Array or a string" });
  assert.throws(() => client.begin("op", "x", Number.NaN), /^Error: nowMs: NaN, must be a number/);
  assert.throws(() => client.begin("op", "x", 1, new Uint8Array(3)), { message: "random: 3 bytes, expected 16" });
  assert.throws(() => client.onResponse("nope", { status: 200 }, 1), { message: "key nope: no intent with this key" });
  assert.throws(() => IdemClient.restore(new Uint8Array([9])), {
    message: "encoded value: format version 9 is newer than this build reads (at most 3)",
  });
  const { key } = client.begin("op", "x", 1, new Uint8Array(16).fill(1));
  assert.throws(() => client.begin("op", "y", 1, new Uint8Array(16).fill(1)), {
    message: `key ${key}: already names an intent, every begin needs 16 fresh random bytes`,
  });
});

test("the in-memory receiver executes once and replays", () => {
  const receiver = new MemoryReceiver({ leaseMs: 1_000 });
  const id = { tenant: "shop", operation: "order", key: "k-1" };
  const fp = fingerprintBytes("A-1");
  const claimed = receiver.begin(id, fp, 10);
  assert.deepEqual(claimed, { decision: "claimed", generation: 1, leaseUntil: 1_010 });
  assert.deepEqual(receiver.begin(id, fp, 20), { decision: "in_progress", generation: 1, leaseUntil: 1_010 });
  assert.deepEqual(receiver.begin(id, fingerprintBytes("B-2"), 20), { decision: "conflict", state: "pending", storedFingerprint: fp });
  receiver.complete(id, claimed.generation, "succeeded", { code: 201, body: "order 17" }, 30);
  const replay = receiver.begin(id, fp, 40);
  assert.equal(replay.decision, "replay");
  assert.equal(replay.state, "succeeded");
  assert.equal(replay.code, 201);
  assert.equal(utf8(replay.body), "order 17");
  assert.throws(() => receiver.release(id, 1), /generation 1 is stale: the record is succeeded/);

  const id2 = { ...id, key: "k-2" };
  const second = receiver.begin(id2, fp, 100);
  receiver.markUnknown(id2, second.generation, 101);
  assert.equal(receiver.get(id2).state, "unknown");
  assert.deepEqual(receiver.begin(id2, fp, 102), { decision: "unknown", generation: second.generation });
  assert.throws(() => receiver.resolve(id2, "succeeded", undefined, 103), { message: "outcome: missing, needed to settle a record" });
  receiver.resolve(id2, "failed", { code: 402, body: "declined" }, 103);
  assert.equal(receiver.get(id2).state, "failed");

  const copy = MemoryReceiver.restore(receiver.snapshot());
  assert.equal(copy.generation, 2);
  assert.deepEqual(copy.list().map((r) => [r.key, r.state]), [["k-1", "succeeded"], ["k-2", "failed"]]);
  assert.equal(copy.sweep(10_000_000_000, 10), 2);
  assert.deepEqual(copy.list(), []);
  assert.throws(() => receiver.begin({ tenant: "t", operation: "o", key: "é" }, fp, 1), {
    message: "key: byte 0xc3 at offset 0 is not printable ASCII (0x20-0x7E)",
  });
});
