// Test fixture: idem-wasm/browser as version 0.1 shipped it (the whole client as one
// snapshot, store "snapshots", entry "client"), unchanged below this comment. The upgrade
// test writes a database with it and opens that database with the current helper.
//
// idem-wasm/browser: keeps an IdemClient across reloads and sends its intents with fetch.
//
// - Persistence: the client's snapshot is written after every change (IndexedDB in
//   browsers, or any { load, save } storage), and restored on open. A new intent is saved
//   before its first send, so its key survives a reload even if the reply is lost.
// - Sending: due intents are POSTed with their key in the `Idempotency-Key` header, the
//   reply is handed to the client (2xx completes, 409 waits for the lease or Retry-After,
//   422 is a conflict, 408/425/429/5xx and network errors back off), and a timer wakes the
//   loop at the client's next wake-up. While the browser says it is offline nothing is
//   sent; the `online` event resumes at once.
// - Going offline: the `offline` event aborts the requests in flight, whose replies can
//   no longer be trusted to arrive (browsers do not always fail them by themselves); they
//   count as transport errors and are sent again, same key, once the browser is online.
//
// Every retry reuses the intent's key and bytes; after a reload, intents that were in
// flight are sent again under the same key, and the server's dedup makes that safe.

import init, { IdemClient } from "idem-wasm";

const STORE = "snapshots";
const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * A storage for the client's snapshot in IndexedDB: database `database`, object store
 * "snapshots", entry `key`. Writes use strict durability: done means on disk.
 */
export function indexedDbStorage({ database = "idem", key = "client" } = {}) {
  let opened;
  const open = () =>
    (opened ??= new Promise((resolve, reject) => {
      const request = indexedDB.open(database, 1);
      request.onupgradeneeded = () => request.result.createObjectStore(STORE);
      request.onsuccess = () => resolve(request.result);
      request.onerror = () => reject(request.error);
      request.onblocked = () => reject(new Error(`indexedDB ${database}: blocked by another tab`));
    }));
  const run = async (mode, operation) => {
    const db = await open();
    return new Promise((resolve, reject) => {
      const tx = db.transaction(STORE, mode, { durability: "strict" });
      const request = operation(tx.objectStore(STORE));
      tx.oncomplete = () => resolve(request.result);
      tx.onerror = tx.onabort = () => reject(tx.error ?? request.error);
    });
  };
  return {
    async load() {
      const value = await run("readonly", (store) => store.get(key));
      return value === undefined ? undefined : new Uint8Array(value);
    },
    save: (bytes) => run("readwrite", (store) => store.put(bytes, key)),
  };
}

/** A storage in memory: for tests, and for pages that accept losing intents on reload. */
export function memoryStorage() {
  let saved;
  return {
    load: async () => saved?.slice(),
    save: async (bytes) => {
      saved = bytes.slice();
    },
  };
}

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

const TERMINAL = new Set(["completed", "failed", "conflict", "expired"]);

/** Sends the intents of one persisted IdemClient. Make one with `IdemSender.open`. */
export class IdemSender {
  #storage;
  #url;
  #method;
  #headers;
  #fetch;
  #timeoutMs;
  #now;
  #onChange;
  #onError;
  #seen = new Map();
  #waiters = new Map();
  #saving = Promise.resolve();
  #pumping = null;
  #again = false;
  #timer = undefined;
  #started = false;
  #inFlight = new Set();
  #kick = () => {
    this.#pump();
  };
  #dropInFlight = () => {
    for (const controller of this.#inFlight) controller.abort(new Error("the browser went offline"));
  };

  /**
   * Restores the client from `options.storage` (IndexedDB by default) or makes a new one
   * with `options.client`, and starts sending unless `options.start` is false.
   */
  static async open(options) {
    if (!options || options.url === undefined) throw new Error("options.url: missing, expected a URL or a function of the attempt");
    await init(options.wasm === undefined ? undefined : { module_or_path: options.wasm });
    const storage = options.storage ?? indexedDbStorage();
    const saved = await storage.load();
    const client = saved === undefined ? new IdemClient(options.client) : IdemClient.restore(saved);
    const sender = new IdemSender(client, storage, options);
    if (options.start !== false) sender.start();
    return sender;
  }

  /** Prefer `IdemSender.open`, which restores the client from storage. */
  constructor(client, storage, options = {}) {
    this.client = client;
    this.#storage = storage;
    this.#url = typeof options.url === "function" ? options.url : () => options.url;
    this.#method = options.method ?? "POST";
    this.#headers = options.headers ?? {};
    this.#fetch = options.fetch ?? globalThis.fetch.bind(globalThis);
    this.#timeoutMs = options.timeoutMs ?? 30_000;
    this.#now = options.now ?? Date.now;
    this.#onChange = options.onChange ?? (() => {});
    this.#onError = options.onError ?? ((error) => console.error("idem:", error));
    for (const intent of client.list()) this.#seen.set(intent.key, signature(intent));
  }

  /**
   * Starts a new intent for one user action and sends it. Resolves with its key once the
   * intent is persisted (before the first send). Call once per action, never to retry.
   */
  async submit(operation, payload) {
    const begun = this.client.begin(operation, payload, this.#now());
    await this.#save();
    this.#changed();
    if (this.#started) this.#pump();
    return begun;
  }

  /** The intent with `key`, or undefined. */
  get(key) {
    return this.client.get(key);
  }

  /** Every intent, oldest first. */
  list() {
    return this.client.list();
  }

  /** Resolves with the intent once it is completed, failed, conflict or expired. */
  settled(key) {
    const intent = this.client.get(key);
    if (intent === undefined) return Promise.reject(new Error(`key ${key}: no intent with this key`));
    if (TERMINAL.has(intent.state)) return Promise.resolve(intent);
    return new Promise((resolve) => {
      const list = this.#waiters.get(key) ?? [];
      list.push(resolve);
      this.#waiters.set(key, list);
    });
  }

  /** Removes a finished intent once the application took its outcome. */
  async forget(key) {
    const intent = this.client.forget(key);
    this.#seen.delete(key);
    await this.#save();
    return intent;
  }

  /** Sends what is due now and keeps sending at each wake-up and on `online`. */
  start() {
    if (this.#started) return;
    this.#started = true;
    globalThis.addEventListener?.("online", this.#kick);
    globalThis.addEventListener?.("offline", this.#dropInFlight);
    this.#pump();
  }

  /** Stops the timer and the `online` listener; replies already in flight still count. */
  stop() {
    this.#started = false;
    globalThis.removeEventListener?.("online", this.#kick);
    globalThis.removeEventListener?.("offline", this.#dropInFlight);
    clearTimeout(this.#timer);
    this.#timer = undefined;
  }

  /** Sends what is due now; resolves when those sends are answered and persisted. */
  flush() {
    return this.#pump();
  }

  #online() {
    return globalThis.navigator?.onLine !== false;
  }

  #pump() {
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
    for (let round = 0; round < 2; round++) {
      this.#again = false;
      if (!this.#online()) return;
      const attempts = this.client.due(this.#now());
      await this.#save();
      this.#changed();
      await Promise.all(attempts.map((attempt) => this.#send(attempt)));
      if (!this.#again) return;
    }
  }

  #schedule() {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    if (!this.#started || !this.#online()) return; // `online` resumes
    const at = this.client.nextWakeup();
    if (at === undefined) return;
    const delay = Math.min(Math.max(0, at - this.#now()), MAX_TIMER_MS);
    this.#timer = setTimeout(this.#kick, delay);
  }

  async #send(attempt) {
    const controller = new AbortController();
    const timer = setTimeout(() => controller.abort(new Error("request timed out")), this.#timeoutMs);
    timer.unref?.(); // Node: an unanswered request does not keep the process alive
    this.#inFlight.add(controller);
    let reply;
    try {
      const headers = new Headers(typeof this.#headers === "function" ? this.#headers(attempt) : this.#headers);
      headers.set("Idempotency-Key", attempt.key);
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
    if (reply === undefined) this.client.onTransportError(attempt.key, this.#now());
    else this.client.onResponse(attempt.key, reply, this.#now());
    await this.#save();
    this.#changed();
  }

  #save() {
    const bytes = this.client.snapshot();
    // In order, and a failed write does not block the ones after it.
    const saving = this.#saving.catch(() => {}).then(() => this.#storage.save(bytes));
    this.#saving = saving;
    return saving;
  }

  #changed() {
    for (const intent of this.client.list()) {
      const now = signature(intent);
      if (this.#seen.get(intent.key) === now) continue;
      this.#seen.set(intent.key, now);
      try {
        this.#onChange(intent);
      } catch (error) {
        this.#onError(error);
      }
      if (TERMINAL.has(intent.state)) {
        for (const resolve of this.#waiters.get(intent.key) ?? []) resolve(intent);
        this.#waiters.delete(intent.key);
      }
    }
  }
}

function signature(intent) {
  return `${intent.state}/${intent.attempts}/${intent.nextAttemptAt}`;
}
