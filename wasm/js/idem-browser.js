// idem-wasm/browser: keeps an IdemClient in IndexedDB and sends its intents with fetch,
// from one tab at a time however many tabs are open (see ./idem-sender.js).
//
// - Persistence: one record per intent, written in the transaction that makes its change
//   durable. A new intent's record is written before its first send, so its key survives a
//   reload even if the reply is lost.
// - Tabs: every tab's sender asks for one Web Lock; the tab holding it leads and alone
//   sends. A tab that submits writes the new intent's record itself (an add never replaces
//   a record) and tells the others on a BroadcastChannel; `onChange` fires in every tab.
//   When the leading tab closes or crashes, the next one takes the lock, reads the records,
//   and sends again, under their keys, the intents that were in flight.
// - Sending: due intents are POSTed with their key in the `Idempotency-Key` header as an
//   RFC 8941 String; the reply goes to the client (2xx completes, 409 waits for the lease or
//   Retry-After, 422 is a conflict, a 503 "outcome unknown" from idem's receivers stops the
//   intent as `unknown` for a person to look, 408/425/429/5xx and network errors back off), and a
//   timer wakes the loop at the client's next wake-up. While the browser says it is offline
//   nothing is sent; the `online` event resumes at once, and the `offline` event aborts the
//   requests in flight (their replies may never come; they are sent again, same key).
// - With the page closed: where the site's service worker handles Background Sync
//   (idem-wasm/worker), pages register a sync, and the worker sends under the same lock.

import init, { IdemClient } from "idem-wasm";
import { senderKit } from "./idem-sender.js";

export { indexedDbStorage, memoryStorage, retryAfter, idempotencyKeyHeader } from "./idem-sender.js";

export const { IdemSender } = senderKit({ init, IdemClient });
