// Types of idem-wasm/worker: sending the queued intents from a service worker.
import type { LedgerStorage, SenderOptions } from "./idem-browser.js";

export { indexedDbStorage, memoryStorage, retryAfter, idempotencyKeyHeader } from "./idem-browser.js";
export type { LedgerStorage, SenderOptions, StorageWrite } from "./idem-browser.js";

export interface SendQueuedOptions extends Omit<SenderOptions, "start" | "backgroundSync" | "onLeader"> {
  /** How long to wait for the lock while a page holds it. Default 10 000 ms. */
  lockWaitMs?: number;
  /** Keep sending while the next attempt falls within this many ms. Default 60 000. */
  budgetMs?: number;
}

export interface SendQueuedResult {
  /** Attempts sent. */
  sent: number;
  /** Intents not finished yet (queued or in flight); undefined when a page led throughout. */
  remaining: number | undefined;
  /** False when a page held the lock throughout `lockWaitMs`. */
  lead: boolean;
}

/** Sends the queued intents of a storage while no page leads. */
export function sendQueued(options: SendQueuedOptions): Promise<SendQueuedResult>;

/** Handles the Background Sync event of the storage's tag in `scope` (`self`); returns the tag. */
export function backgroundSync(
  scope: { addEventListener(type: "sync", listener: (event: SyncEventLike) => void): void },
  options: SendQueuedOptions,
): string;

/** What the handler uses of a service worker's SyncEvent. */
export interface SyncEventLike {
  readonly tag: string;
  readonly lastChance: boolean;
  waitUntil(promise: Promise<unknown>): void;
}
