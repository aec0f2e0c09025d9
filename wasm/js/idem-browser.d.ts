// Types of idem-wasm/browser: storage, tabs and a fetch sender around IdemClient.
import type { Attempt, BeginResult, IdemClient, IdemClientOptions, IntentView, ResolvedAs } from "idem-wasm";

/** One transaction of a storage: every part is optional. */
export interface StorageWrite {
  /** New intents' records, by key: refused (the whole write fails) if the key has a record. */
  add?: Array<[string, Uint8Array]>;
  /** Changed intents' records, by key: written over the record. */
  put?: Array<[string, Uint8Array]>;
  /** Keys whose records go (forgotten intents). */
  delete?: string[];
  /** The ledger's settings and backoff state (`IdemClient.ledgerState()`). */
  state?: Uint8Array;
}

/** Where the client lives between page loads: one record per intent and the ledger's state. */
export interface LedgerStorage {
  /**
   * Senders of storages with the same name share them: one leads at a time (a Web Lock of
   * this name) and they talk on a BroadcastChannel of this name. Undefined for storage that
   * one sender has to itself.
   */
  readonly name?: string;
  /** Everything stored; undefined when nothing is. */
  load(): Promise<{ state?: Uint8Array; intents: Uint8Array[] } | undefined>;
  /** Applies `change` atomically; resolves once it is durable. */
  write(change: StorageWrite): Promise<unknown>;
}

/**
 * IndexedDB: database `database` (default "idem"), one record per intent. A database of
 * version 0.1 (a whole snapshot in store "snapshots", entry `key`, default "client") is
 * upgraded on open.
 */
export function indexedDbStorage(options?: { database?: string; key?: string }): LedgerStorage & {
  readonly name: string;
  /** Closes the database connection; the next call opens it again. */
  close(): void;
};

/** In memory only: for tests. */
export function memoryStorage(): LedgerStorage;

/** A Retry-After header (seconds or HTTP date) as ms since the epoch; undefined when absent. */
export function retryAfter(header: string | null | undefined, nowMs: number): number | undefined;

/** `key` as the `Idempotency-Key` header sends it: an RFC 8941 String, `"…"`. */
export function idempotencyKeyHeader(key: string): string;

export interface SenderOptions {
  /** Where to send an attempt. */
  url: string | URL | ((attempt: Attempt) => string | URL);
  /** HTTP method. Default "POST". */
  method?: string;
  /** Extra request headers (Content-Type, Authorization); Idempotency-Key is set by the sender. */
  headers?: HeadersInit | ((attempt: Attempt) => HeadersInit);
  /** Where the client is kept. Default: indexedDbStorage(). */
  storage?: LedgerStorage;
  /** Options of a new client, when storage holds none. */
  client?: IdemClientOptions;
  /** The fetch to use. Default: globalThis.fetch. */
  fetch?: typeof fetch;
  /** A request still unanswered after this long counts as a transport error. Default 30 000 ms. */
  timeoutMs?: number;
  /** The clock, in ms since the epoch. Default: Date.now. */
  now?: () => number;
  /** Called in every tab with an intent each time its state, attempts or next attempt time changes. */
  onChange?: (intent: SenderIntentView) => void;
  /** Called when this sender starts or stops leading (sending for every tab). */
  onLeader?: (leading: boolean) => void;
  /** Called with errors of the background loop (a failed write). Default: console.error. */
  onError?: (error: unknown) => void;
  /** The .wasm to load in browsers, when not next to the package's JS (web build only). */
  wasm?: string | URL | Response | BufferSource | WebAssembly.Module;
  /** Join the senders of this storage and send when leading. Default true. */
  start?: boolean;
  /**
   * Register a Background Sync (tag: the storage's name) for the site's service worker when
   * intents wait to be sent. Default true; nothing happens without a worker or Background Sync.
   */
  backgroundSync?: boolean;
  /** The Web Locks to lead with. Default: navigator.locks; null: this sender is alone on its storage. */
  locks?: LockManager | null;
}

/**
 * What an operator needs to settle, at the receiver, the key of an intent it answered
 * "outcome unknown" (503, problem `unknown`).
 */
export interface Reconcile {
  /** The idempotency key. */
  key: string;
  /**
   * The operation the receiver records: the method and the path of the request sent,
   * `POST /orders`, as `idem proxy` and idem's tower layer name it by default.
   */
  operation: string;
  /** The receiver's problem document (RFC 9457), when its body held one. */
  problem?: { type?: string; title?: string; status?: number; detail?: string; idempotency?: string; [member: string]: unknown };
}

/** An intent as the sender shows it: an `unknown` one also carries `reconcile`. */
export interface SenderIntentView extends IntentView {
  /** Present only in the state `unknown`: what an operator needs to look. */
  reconcile?: Reconcile;
}

export class IdemSender {
  /** Reads the client from storage (or makes a new one) and starts sending. */
  static open(options: SenderOptions): Promise<IdemSender>;
  private constructor();
  /** The client inside. Change it only through the sender, or the storage falls behind. */
  readonly client: IdemClient;
  /** True while this sender leads: it alone sends and rewrites records. */
  readonly leading: boolean;
  /** Starts a new intent; resolves once its record is durable, before the first send. */
  submit(operation: string, payload: Uint8Array | string): Promise<BeginResult>;
  get(key: string): SenderIntentView | undefined;
  list(): SenderIntentView[];
  /**
   * Resolves once the intent is completed, failed, conflict, expired or unknown (the
   * receiver does not know the outcome either: see `reconcile`).
   */
  settled(key: string): Promise<SenderIntentView>;
  /**
   * Removes a settled intent: completed, failed, conflict, or expired or unknown and
   * resolved. One nobody resolved is refused (throws): its effect may or may not have happened.
   */
  forget(key: string): Promise<SenderIntentView>;
  /**
   * Records what happened to an expired or unknown intent, as someone who asked the receiver
   * found, with their reason (1-1024 bytes, one line); resolves with the intent once durable.
   * Any tab may.
   */
  resolve(key: string, resolvedAs: ResolvedAs, reason: string): Promise<SenderIntentView>;
  /** Joins the senders of this storage: sends while leading. */
  start(): void;
  /** Stops sending and leaves the lead to another tab or the service worker. */
  stop(): void;
  /** `stop`, and hears no more changes. */
  close(): void;
  /** Sends what is due now, if leading; resolves when those sends are answered and written. */
  flush(): Promise<void>;
}
