// Types of idem-wasm/browser: persistence and a fetch sender around IdemClient.
import type { Attempt, BeginResult, IdemClient, IdemClientOptions, IntentView } from "idem-wasm";

/** Where the client's snapshot lives between page loads. */
export interface SnapshotStorage {
  /** The last snapshot saved, or undefined when there is none. */
  load(): Promise<Uint8Array | undefined>;
  /** Replaces the snapshot; resolves once it is durable. */
  save(bytes: Uint8Array): Promise<unknown>;
}

/** IndexedDB: database `database` (default "idem"), store "snapshots", entry `key` (default "client"). */
export function indexedDbStorage(options?: { database?: string; key?: string }): SnapshotStorage;

/** In memory only: for tests. */
export function memoryStorage(): SnapshotStorage;

/** A Retry-After header (seconds or HTTP date) as ms since the epoch; undefined when absent. */
export function retryAfter(header: string | null | undefined, nowMs: number): number | undefined;

export interface SenderOptions {
  /** Where to send an attempt. */
  url: string | URL | ((attempt: Attempt) => string | URL);
  /** HTTP method. Default "POST". */
  method?: string;
  /** Extra request headers (Content-Type, Authorization); Idempotency-Key is set by the sender. */
  headers?: HeadersInit | ((attempt: Attempt) => HeadersInit);
  /** Where the client is persisted. Default: indexedDbStorage(). */
  storage?: SnapshotStorage;
  /** Options of a new client, when storage holds none. */
  client?: IdemClientOptions;
  /** The fetch to use. Default: globalThis.fetch. */
  fetch?: typeof fetch;
  /** A request still unanswered after this long counts as a transport error. Default 30 000 ms. */
  timeoutMs?: number;
  /** The clock, in ms since the epoch. Default: Date.now. */
  now?: () => number;
  /** Called with an intent each time its state, attempts or next attempt time changes. */
  onChange?: (intent: IntentView) => void;
  /** Called with errors of the background loop (a failed save). Default: console.error. */
  onError?: (error: unknown) => void;
  /** The .wasm to load in browsers, when not next to the package's JS (web build only). */
  wasm?: string | URL | Response | BufferSource | WebAssembly.Module;
  /** Start sending at once. Default true. */
  start?: boolean;
}

export class IdemSender {
  /** Restores the client from storage (or makes a new one) and starts sending. */
  static open(options: SenderOptions): Promise<IdemSender>;
  constructor(client: IdemClient, storage: SnapshotStorage, options: SenderOptions);
  /** The client inside. Change it only through the sender, or persistence falls behind. */
  readonly client: IdemClient;
  /** Starts a new intent and sends it; resolves once it is persisted, before the first send. */
  submit(operation: string, payload: Uint8Array | string): Promise<BeginResult>;
  get(key: string): IntentView | undefined;
  list(): IntentView[];
  /** Resolves once the intent is completed, failed, conflict or expired. */
  settled(key: string): Promise<IntentView>;
  /** Removes a finished intent. */
  forget(key: string): Promise<IntentView>;
  start(): void;
  stop(): void;
  /** Sends what is due now; resolves when those sends are answered and persisted. */
  flush(): Promise<void>;
}
