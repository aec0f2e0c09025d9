// The sender of idem-wasm, shared by idem-wasm/browser (pages) and idem-wasm/worker
// (service workers): storage with one record per intent, one sender at a time per
// storage, and sending with fetch. It takes the wasm bindings as an argument, so each entry
// point loads them its own way (a bare import for pages and bundlers, a relative one for
// service workers, which have no import maps).
//
// - Storage (./idem-storage.js): IndexedDB (or any storage with `load` and `write`) keeps
//   one record per intent and one small record of the ledger's settings and backoff state.
//   A change writes the records it touched, in one transaction.
// - One sender, many tabs: every sender on a storage asks for the same Web Lock; the one
//   holding it leads. Only the leader sends and rewrites existing records. Any tab makes a
//   new intent by adding its record (an add never replaces a record) and tells the others on
//   a BroadcastChannel; the leader takes it in and sends it. The leader tells the others each
//   change it wrote, so every tab shows every intent. When the leader goes away (tab closed,
//   crashed, reloaded) the browser hands the lock to the next tab in line, which reads the
//   records and sends again, under their keys, the intents that were in flight.
// - A service worker takes the same lock to send while no page is open (Background Sync),
//   so a page and the worker never send the same intent at once.

import { indexedDbStorage } from "./idem-storage.js";

export { indexedDbStorage, memoryStorage } from "./idem-storage.js";

const MAX_TIMER_MS = 2 ** 31 - 1;
const TERMINAL = new Set(["completed", "failed", "conflict", "expired", "unknown"]);

/**
 * When a Retry-After header (seconds or an HTTP date) asks for the next attempt, in ms
 * since the epoch; undefined when absent or unreadable.
 */
export function retryAfter(header, nowMs) {
  if (header == null || header === "") return undefined;
  if (/^\d+$/.test(header.trim())) return nowMs + Number(header.trim()) * 1000;
  const date = Date.parse(header);
  return Number.isNaN(date) ? undefined : Math.max(date, nowMs);
}

/**
 * The `Idempotency-Key` header value for `key`: an RFC 8941 String (in double quotes, `\`
 * before `"` and `\`), as draft-ietf-httpapi-idempotency-key-header asks.
 */
export function idempotencyKeyHeader(key) {
  if (!/^[\x20-\x7e]+$/.test(key)) throw new Error(`key ${key}: not printable ASCII, cannot be a structured field String`);
  return `"${key.replace(/[\\"]/g, "\\$&")}"`;
}

function equalBytes(a, b) {
  if (a === undefined || b === undefined || a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

/** The problem document (RFC 9457) in `body`, or undefined when it holds none. */
function problemIn(body) {
  try {
    const problem = JSON.parse(new TextDecoder().decode(body));
    return problem !== null && typeof problem === "object" && !Array.isArray(problem) ? problem : undefined;
  } catch {
    return undefined;
  }
}

function signature(intent) {
  return `${intent.state}/${intent.attempts}/${intent.nextAttemptAt}`;
}

/** The sender classes, on the wasm bindings `{ init, IdemClient }`. */
export function senderKit({ init, IdemClient }) {
  /** Sends the intents of one stored IdemClient. Make one with `IdemSender.open`. */
  class IdemSender {
    /** The client inside: the ledger in the leading tab, a copy kept in step elsewhere. */
    client;
    #storage;
    #url;
    #method;
    #headers;
    #fetch;
    #timeoutMs;
    #now;
    #onChange;
    #onError;
    #onLeader;
    #sync;
    #locks;
    #channel = null;
    // Leading: holding the lock (or alone, without locks), so sending and rewriting
    // records is ours. `#term` counts leaderships; a reply from an earlier one is dropped.
    #leading = false;
    #term = 0;
    #resign = null;
    #joining = null;
    #heard = null;
    #lastState = undefined;
    // The service worker leads only until a page asks for the lock (`want`).
    #wanted = false;
    #wake = null;
    // Writes: changes wait in these until the next transaction takes them all.
    #adds = [];
    #dirty = new Set();
    #removed = new Set();
    #resolved = new Map();
    #writing = Promise.resolve();
    #batch = null;
    #waiters = new Map();
    #pumping = null;
    #again = false;
    #timer = undefined;
    #started = false;
    #closed = false;
    #inFlight = new Set();
    #kick = () => {
      this.#pump();
    };
    #dropInFlight = () => {
      for (const controller of this.#inFlight) controller.abort(new Error("the browser went offline"));
    };
    // A page about to go away leaves the unsent intents to the service worker.
    #hidden = () => {
      if (this.#sync && globalThis.document?.visibilityState === "hidden" && this.#unsettled()) this.#registerSync();
    };

    /**
     * Reads the client from `options.storage` (IndexedDB by default), or makes a new one
     * with `options.client`, and starts sending unless `options.start` is false.
     */
    static async open(options) {
      if (!options || options.url === undefined) throw new Error("options.url: missing, expected a URL or a function of the attempt");
      await init(options.wasm === undefined ? undefined : { module_or_path: options.wasm });
      const sender = new IdemSender(options, new IdemClient(options.client));
      await sender.#open();
      if (options.start !== false) sender.start();
      return sender;
    }

    /**
     * Sends the queued intents of a storage while no page does: waits up to
     * `options.lockWaitMs` (default 10 s) for the lock, then sends what is due and keeps
     * at it while the next attempt falls within `options.budgetMs` (default 60 s).
     * Resolves with how many intents were sent and how many are not finished yet.
     */
    static async sendQueued(options) {
      const { lockWaitMs = 10_000, budgetMs = 60_000 } = options ?? {};
      const sender = await IdemSender.open({ ...options, start: false, backgroundSync: false });
      try {
        if (!sender.#locks) throw new Error("sendQueued: the Web Locks API is not available here");
        const signal = AbortSignal.timeout(lockWaitMs);
        return await sender.#locks.request(sender.#storage.name, { signal }, async () => {
          await sender.#takeOver();
          const sent = await sender.#drain(budgetMs);
          sender.#resignNow();
          await sender.#settle();
          return { sent, remaining: sender.list().filter((i) => !TERMINAL.has(i.state)).length, lead: true };
        });
      } catch (error) {
        if (error?.name !== "TimeoutError" && error?.name !== "AbortError") throw error;
        return { sent: 0, remaining: undefined, lead: false }; // a page leads and sends
      } finally {
        sender.close();
      }
    }

    /** Use `IdemSender.open`. */
    constructor(options, client) {
      this.client = client;
      this.#storage = options.storage ?? indexedDbStorage();
      this.#url = typeof options.url === "function" ? options.url : () => options.url;
      this.#method = options.method ?? "POST";
      this.#headers = options.headers ?? {};
      this.#fetch = options.fetch ?? globalThis.fetch.bind(globalThis);
      this.#timeoutMs = options.timeoutMs ?? 30_000;
      this.#now = options.now ?? Date.now;
      this.#onChange = options.onChange ?? (() => {});
      this.#onError = options.onError ?? ((error) => console.error("idem:", error));
      this.#onLeader = options.onLeader ?? (() => {});
      this.#sync = options.backgroundSync !== false && this.#storage.name !== undefined;
      const locks = options.locks === undefined ? globalThis.navigator?.locks : options.locks;
      const shared = this.#storage.name !== undefined;
      this.#locks = shared ? (locks ?? null) : null;
      if (shared && this.#locks && typeof BroadcastChannel === "function") {
        // Listen before reading the storage: a record written after the read is announced
        // after this point, so it is heard.
        this.#channel = new BroadcastChannel(this.#storage.name);
        this.#channel.onmessage = (event) => this.#hear(event.data);
      }
    }

    async #open() {
      const loaded = await this.#storage.load();
      if (!this.#locks) {
        // Alone on this storage: this sender is its only writer.
        this.#adopt(loaded);
        return;
      }
      // A copy in step with the records, in-flight intents shown as they are.
      const copy = IdemClient.restoreParts(loaded?.state ?? this.client.ledgerState(), []);
      for (const record of loaded?.intents ?? []) copy.put(record);
      this.client = copy;
    }

    /** True while this sender leads: it alone sends and rewrites records. */
    get leading() {
      return this.#leading;
    }

    /**
     * Starts a new intent for one user action. Resolves with its key once its record is
     * durable, before its first send (by whichever tab leads). Call once per action, never
     * to retry.
     */
    async submit(operation, payload) {
      const { key, fingerprint, intent } = this.client.prepare(operation, payload, this.#now());
      await this.#write({ add: [key, intent] });
      if (this.#sync && !this.#online()) this.#registerSync();
      if (this.#leading && this.#started) this.#pump();
      return { key, fingerprint };
    }

    /** The intent with `key`, or undefined. */
    get(key) {
      return this.#view(this.client.get(key));
    }

    /** Every intent, oldest first. */
    list() {
      return this.client.list().map((intent) => this.#view(intent));
    }

    /**
     * `intent` as the application sees it: an intent unknown at the receiver also carries
     * `reconcile`, what an operator needs to settle its key there: the key, the operation
     * the receiver records (`POST /orders`: the method and the path of the request sent)
     * and the receiver's problem document.
     */
    #view(intent) {
      if (intent?.state !== "unknown") return intent;
      const attempt = { key: intent.key, operation: intent.operation, payload: intent.payload, attempt: intent.attempts };
      const url = new URL(this.#url(attempt), globalThis.location?.href ?? "http://localhost/");
      const reconcile = { key: intent.key, operation: `${this.#method.toUpperCase()} ${url.pathname}` };
      const problem = problemIn(intent.body ?? new Uint8Array());
      return { ...intent, reconcile: problem === undefined ? reconcile : { ...reconcile, problem } };
    }

    /**
     * Resolves with the intent once it is completed, failed, conflict, expired or unknown
     * (the receiver does not know the outcome either: see `reconcile`).
     */
    settled(key) {
      const intent = this.get(key);
      if (intent === undefined) return Promise.reject(new Error(`key ${key}: no intent with this key`));
      if (TERMINAL.has(intent.state)) return Promise.resolve(intent);
      return new Promise((resolve) => {
        const list = this.#waiters.get(key) ?? [];
        list.push(resolve);
        this.#waiters.set(key, list);
      });
    }

    /**
     * Removes a settled intent once the application took its outcome: completed, failed,
     * conflict, or expired or unknown and resolved (`resolve`). An unresolved expired or
     * unknown intent is refused: its effect may or may not have happened.
     */
    async forget(key) {
      const intent = this.client.forget(key);
      await this.#write({ remove: key });
      return this.#view(intent);
    }

    /**
     * Records what happened to an expired or unknown intent, as someone who asked the
     * receiver found ("completed", "failed" or "not_executed"), with their reason. Any tab
     * may: such an intent is not the leader's to change. Resolves with the intent once the
     * record is durable.
     */
    async resolve(key, resolvedAs, reason) {
      const intent = this.client.resolve(key, resolvedAs, reason, this.#now());
      await this.#write({ resolve: [key, this.client.intent(key)] });
      return this.#view(intent);
    }

    /**
     * Joins the senders of this storage: sends while this tab leads, and takes over when
     * the leader goes away. Also resumes on `online`.
     */
    start() {
      if (this.#started || this.#closed) return;
      this.#started = true;
      globalThis.addEventListener?.("online", this.#kick);
      globalThis.addEventListener?.("offline", this.#dropInFlight);
      globalThis.document?.addEventListener?.("visibilitychange", this.#hidden);
      if (!this.#locks) {
        if (!this.#leading) this.#takeOver().catch((error) => this.#onError(error));
        else this.#pump();
        return;
      }
      this.#join();
    }

    /** Asks for the lock; holding it, leads until `stop`. */
    #join() {
      const abort = new AbortController();
      this.#joining = abort;
      this.#channel?.postMessage({ want: true });
      this.#locks
        .request(this.#storage.name, { signal: abort.signal }, async () => {
          if (!this.#started) return;
          await this.#takeOver();
          if (this.#started) await new Promise((resolve) => (this.#resign = resolve));
          else this.#resignNow();
          await this.#settle();
        })
        .catch((error) => {
          if (error?.name === "AbortError") return;
          // The records could not be read: let another tab try, and ask again later.
          this.#onError(error);
          if (this.#started && this.#joining === abort) setTimeout(() => this.#started && this.#join(), 1_000);
        });
    }

    /**
     * Stops sending and leaves the lead to another tab (or the service worker) once the
     * writes under way are done. Requests in flight are dropped: whoever leads next sends
     * them again under their keys. Changes made elsewhere still reach `onChange`.
     */
    stop() {
      if (!this.#started && !this.#leading) return;
      this.#started = false;
      globalThis.removeEventListener?.("online", this.#kick);
      globalThis.removeEventListener?.("offline", this.#dropInFlight);
      globalThis.document?.removeEventListener?.("visibilitychange", this.#hidden);
      this.#joining?.abort();
      this.#joining = null;
      this.#resignNow();
    }

    /** `stop`, and this sender hears no more changes: it is done. */
    close() {
      this.stop();
      this.#closed = true;
      this.#channel?.close();
      this.#channel = null;
    }

    /** Sends what is due now, if this sender leads; resolves when those sends are answered and written. */
    flush() {
      return this.#pump();
    }

    #resignNow() {
      if (!this.#leading) return;
      this.#leading = false;
      this.#term++;
      clearTimeout(this.#timer);
      this.#timer = undefined;
      for (const controller of this.#inFlight) controller.abort(new Error("this sender stopped leading"));
      this.#dirty.clear();
      this.#resign?.();
      this.#resign = null;
      this.#notifyLeader();
    }

    /** Resolves once every write asked for so far is done (or failed). */
    async #settle() {
      for (;;) {
        const pending = this.#batch ?? this.#writing;
        await pending.catch(() => {});
        if (pending === (this.#batch ?? this.#writing)) return;
      }
    }

    /** Becomes the leader: reads every record afresh and sends. */
    async #takeOver() {
      this.#heard = [];
      let loaded;
      try {
        loaded = await this.#storage.load();
      } catch (error) {
        this.#heard = null;
        throw error;
      }
      const before = new Map(this.client.list().map((i) => [i.key, signature(i)]));
      this.#adopt(loaded);
      const heard = this.#heard;
      this.#heard = null;
      for (const message of heard) this.#hear(message);
      this.#notifyLeader();
      const changed = this.client.list().filter((i) => before.get(i.key) !== signature(i));
      this.#notify(changed.map((i) => i.key));
      if (this.#started) this.#pump();
    }

    /** Leads with the client `loaded` holds. */
    #adopt(loaded) {
      const state = loaded?.state ?? this.client.ledgerState();
      const records = loaded?.intents ?? [];
      this.client = IdemClient.restoreParts(state, records);
      this.#leading = true;
      this.#term++;
      this.#lastState = loaded?.state;
      if (this.client.size > records.length) {
        // A version 1 snapshot as state: write each intent as a record of its own, and
        // the state alone, in one transaction.
        for (const intent of this.client.list()) this.#dirty.add(intent.key);
        this.#lastState = undefined;
        this.#write({}).catch((error) => this.#onError(error));
      }
    }

    #notifyLeader() {
      try {
        this.#onLeader(this.#leading);
      } catch (error) {
        this.#onError(error);
      }
    }

    /** A message from another sender on this storage: records it wrote. */
    #hear(message) {
      if (this.#closed) return;
      if (message.want) {
        this.#wanted = true;
        this.#wake?.();
        return;
      }
      if (this.#heard) {
        this.#heard.push(message);
        return;
      }
      const changed = [];
      for (const [key, record] of message.added ?? []) {
        // Leading: only a new intent is taken in; every later change is ours to make.
        if (this.#leading && this.client.get(key) !== undefined) continue;
        if (this.client.put(record)) changed.push(key);
      }
      if (!this.#leading) {
        for (const [key, record] of message.changed ?? []) if (this.client.put(record)) changed.push(key);
      }
      // A resolution, from any tab: the leader takes it in too (it never changes an
      // expired intent itself).
      for (const [key, record] of message.resolved ?? []) if (this.client.put(record)) changed.push(key);
      for (const key of message.deleted ?? []) {
        try {
          this.client.forget(key);
        } catch {
          // Not settled in this copy (a reply or a resolution it has not heard of yet):
          // it keeps the intent until it next reads the records.
        }
      }
      this.#notify(changed);
      if (changed.length > 0 && this.#leading && this.#started) this.#pump();
    }

    /**
     * Writes what changed, in one transaction with whatever else waits: `change.add`, a
     * new intent `[key, record]`; `change.remove`, a key whose record goes. The changes of
     * the client (while leading) join. `change.resolve`, `[key, record]` of an expired
     * intent just resolved, is written by any tab. Resolves once durable.
     */
    #write(change) {
      if (change.add) this.#adds.push(change.add);
      if (change.remove) this.#removed.add(change.remove);
      if (change.resolve) this.#resolved.set(...change.resolve);
      if (this.#leading) for (const key of this.client.takeChanges()) this.#dirty.add(key);
      else this.client.takeChanges(); // not ours to write: the leader's copy changes
      this.#batch ??= this.#writing
        .catch(() => {})
        .then(() => {
          this.#batch = null;
          const write = this.#commit();
          this.#writing = write;
          return write;
        });
      return this.#batch;
    }

    async #commit() {
      const adds = this.#adds;
      this.#adds = [];
      const removed = [...this.#removed];
      this.#removed.clear();
      // Every resolution is announced, so that other copies can forget the intent too;
      // one forgotten in the same write has no record left to rewrite.
      const resolved = [...this.#resolved];
      this.#resolved.clear();
      const put = [];
      const deleted = [...removed];
      let state;
      if (this.#leading) {
        for (const key of this.#dirty) {
          const record = this.client.intent(key);
          if (record === undefined) deleted.push(key);
          else put.push([key, record]);
        }
        this.#dirty.clear();
        const now = this.client.ledgerState();
        if (!equalBytes(now, this.#lastState)) state = now;
      }
      for (const [key, record] of resolved) {
        if (!removed.includes(key) && !put.some(([k]) => k === key)) put.push([key, record]);
      }
      if (adds.length + put.length + deleted.length === 0 && state === undefined) return;
      try {
        await this.#storage.write({ add: adds, put, delete: deleted, state });
      } catch (error) {
        // Written again with the next change.
        if (this.#leading) for (const [key] of put) this.#dirty.add(key);
        for (const key of removed) this.#removed.add(key);
        for (const [key, record] of resolved) if (!this.#resolved.has(key)) this.#resolved.set(key, record);
        throw error;
      }
      if (state !== undefined) this.#lastState = state;
      if (this.#heard) this.#heard.push({ added: adds });
      else for (const [, record] of adds) this.client.put(record);
      this.#channel?.postMessage({ added: adds, changed: put, deleted, resolved });
      this.#notify([...adds.map(([key]) => key), ...put.map(([key]) => key)]);
    }

    #notify(keys) {
      for (const key of new Set(keys)) {
        const intent = this.get(key);
        if (intent === undefined) continue;
        try {
          this.#onChange(intent);
        } catch (error) {
          this.#onError(error);
        }
        if (TERMINAL.has(intent.state)) {
          for (const resolve of this.#waiters.get(key) ?? []) resolve(intent);
          this.#waiters.delete(key);
        }
      }
    }

    #online() {
      return globalThis.navigator?.onLine !== false;
    }

    #unsettled() {
      return this.client.list().some((intent) => !TERMINAL.has(intent.state));
    }

    #registerSync() {
      globalThis.navigator?.serviceWorker
        ?.getRegistration?.()
        .then((registration) => registration?.sync?.register(this.#storage.name))
        .catch(() => {}); // no worker, or no Background Sync here: pages send
    }

    #pump() {
      if (!this.#leading) return Promise.resolve();
      if (this.#pumping) {
        this.#again = true;
        return this.#pumping;
      }
      // `finally` runs as a later microtask, after `#pumping` is assigned, even when the
      // round finishes without awaiting anything.
      const pumping = this.#rounds()
        .catch((error) => this.#onError(error))
        .finally(() => {
          this.#pumping = null;
          this.#schedule();
        });
      this.#pumping = pumping;
      return pumping;
    }

    async #rounds() {
      // One round per call; `again` allows one more when a kick came in meanwhile. Later
      // work waits for the timer, so this never spins.
      let sent = 0;
      for (let round = 0; round < 2; round++) {
        this.#again = false;
        if (!this.#leading || !this.#online()) return sent;
        const term = this.#term;
        const attempts = this.client.due(this.#now());
        // In flight is written before the sends; should the write fail, sending is
        // still safe (a reload sends again under the same key).
        await this.#write({}).catch((error) => this.#onError(error));
        await Promise.all(attempts.map((attempt) => this.#send(attempt, term)));
        sent += attempts.length;
        if (!this.#again) return sent;
      }
      return sent;
    }

    /**
     * Sends until nothing is due within `budgetMs`, or until a page asks for the lock;
     * resolves with the number of sends.
     */
    async #drain(budgetMs) {
      const end = this.#now() + budgetMs;
      let sent = 0;
      for (;;) {
        if (await this.#pageWaits()) return sent;
        sent += await this.#rounds();
        const at = this.client.nextWakeup();
        if (at === undefined || at > end || !this.#online()) return sent;
        await new Promise((resolve) => {
          const timer = setTimeout(resolve, Math.max(0, at - this.#now()));
          this.#wake = () => {
            clearTimeout(timer);
            resolve();
          };
        });
        this.#wake = null;
      }
    }

    async #pageWaits() {
      if (this.#wanted) return true;
      const { pending = [] } = await this.#locks.query();
      return pending.some((request) => request.name === this.#storage.name);
    }

    #schedule() {
      clearTimeout(this.#timer);
      this.#timer = undefined;
      if (!this.#started || !this.#leading || !this.#online()) return; // `online` resumes
      const at = this.client.nextWakeup();
      if (at === undefined) return;
      const delay = Math.min(Math.max(0, at - this.#now()), MAX_TIMER_MS);
      this.#timer = setTimeout(this.#kick, delay);
    }

    async #send(attempt, term) {
      const controller = new AbortController();
      const timer = setTimeout(() => controller.abort(new Error("request timed out")), this.#timeoutMs);
      timer.unref?.(); // Node: an unanswered request does not keep the process alive
      this.#inFlight.add(controller);
      let reply;
      try {
        const headers = new Headers(typeof this.#headers === "function" ? this.#headers(attempt) : this.#headers);
        headers.set("Idempotency-Key", idempotencyKeyHeader(attempt.key));
        const response = await this.#fetch(this.#url(attempt), {
          method: this.#method,
          headers,
          body: attempt.payload,
          signal: controller.signal,
        });
        const body = new Uint8Array(await response.arrayBuffer());
        const at = retryAfter(response.headers.get("Retry-After"), this.#now());
        reply = { status: response.status, body, ...(at === undefined ? {} : { retryAt: at }) };
      } catch {
        // Offline, connection reset, timeout: no reply, so the outcome is unknown. Retry.
      } finally {
        clearTimeout(timer);
        this.#inFlight.delete(controller);
      }
      // A reply to an earlier leadership: whoever leads now sends it again.
      if (term !== this.#term || !this.#leading) return;
      if (reply === undefined) this.client.onTransportError(attempt.key, this.#now());
      else this.client.onResponse(attempt.key, reply, this.#now());
      if (reply === undefined && this.#sync) this.#registerSync();
      await this.#write({});
    }
  }

  return { IdemSender };
}
