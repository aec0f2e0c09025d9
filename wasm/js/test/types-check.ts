// Compiled by types.test.mjs with tsc --strict: the shipped .d.ts files describe the API.
import init, {
  IdemClient,
  Machine,
  MemoryReceiver,
  fingerprintBytes,
  fingerprintJson,
  fingerprintFields,
  type Attempt,
  type Decision,
  type IntentState,
  type IntentView,
  type MachineDecision,
  type ResolvedAs,
} from "idem-wasm";
import {
  IdemSender,
  idempotencyKeyHeader,
  indexedDbStorage,
  memoryStorage,
  type LedgerStorage,
  type Reconcile,
  type SenderIntentView,
} from "idem-wasm/browser";
import { backgroundSync, sendQueued, type SendQueuedResult } from "idem-wasm/worker";

export async function check(): Promise<string> {
  await init();
  const client = new IdemClient({ serverRetentionMs: 86_400_000, seed: 1n });
  const { key, fingerprint }: { key: string; fingerprint: string } = client.begin("order", new Uint8Array([1]), Date.now());
  const attempts: Attempt[] = client.due(Date.now());
  for (const a of attempts) client.onResponse(a.key, { status: 201, body: a.payload }, Date.now());
  const view: IntentView | undefined = client.get(key);
  const state: IntentState | undefined = view?.state;
  const wake: number | undefined = client.nextWakeup();
  const bytes: Uint8Array = client.snapshot();
  IdemClient.restore(bytes).list().forEach((i: IntentView) => i.attempts.toFixed());
  const changed: string[] = client.takeChanges();
  const records: Uint8Array[] = changed.flatMap((k) => client.intent(k) ?? []);
  const copy = IdemClient.restoreParts(client.ledgerState(), records);
  const { intent }: { intent: Uint8Array } = copy.prepare("order", "{}", Date.now());
  const added: boolean = copy.put(intent);
  new IdemClient();

  const receiver = new MemoryReceiver({ leaseMs: 1_000, onLeaseExpiry: "takeover" });
  const decision: Decision = receiver.begin({ tenant: "t", operation: "o", key }, fingerprint, 1);
  if (decision.decision === "claimed") {
    receiver.complete({ tenant: "t", operation: "o", key }, decision.generation, "succeeded", { code: 200 }, 2);
  }
  const machine = new Machine({ states: ["created", "paid"], initial: "created", moves: [["created", "paid"]] });
  const move: MachineDecision = machine.transition(null, "paid", undefined, 1);
  if (move.decision === "applied") machine.transition(move.entity, "paid", move.entity.version, 2);
  const storage: LedgerStorage = typeof indexedDB === "undefined" ? memoryStorage() : indexedDbStorage({ database: "x" });
  const sender = await IdemSender.open({
    url: (attempt) => `/orders/${attempt.operation}`,
    storage,
    headers: { "Content-Type": "application/json" },
    onChange: (intent) => intent.state satisfies IntentState,
    onLeader: (leading: boolean) => leading,
    backgroundSync: false,
  });
  const done: SenderIntentView = await sender.settled((await sender.submit("order", "{}")).key);
  const reconcile: Reconcile | undefined = done.state === "unknown" ? done.reconcile : undefined;
  const operation: string | undefined = reconcile?.operation;
  const code: string | undefined = reconcile?.problem?.idempotency;
  const leading: boolean = sender.leading;
  const resolvedAs: ResolvedAs = "not_executed";
  const resolved: IntentView = await sender.resolve(done.key, resolvedAs, "checked with the receiver").catch(() => done);
  const reason: string | undefined = resolved.resolution?.reason;
  const forgotten: IntentView | undefined = done.state === "expired" && !done.resolution ? undefined : await sender.forget(done.key);
  sender.stop();
  sender.close();
  const queued: SendQueuedResult = await sendQueued({ url: "/orders", lockWaitMs: 1_000, budgetMs: 5_000 });
  const tag: string = backgroundSync(
    { addEventListener: (_type, listener) => listener({ tag: "idem:idem", lastChance: false, waitUntil: () => {} }) },
    { url: "/orders" },
  );
  return [
    fingerprintBytes("x"),
    fingerprintJson("{}", ["/a"]),
    fingerprintFields({ a: "1" }),
    state,
    wake,
    done.status,
    leading,
    added,
    queued.remaining,
    tag,
    idempotencyKeyHeader(key),
    reason,
    forgotten?.key,
  ].join();
}
