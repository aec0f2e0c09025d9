// idem-wasm/worker: sends the queued intents from a service worker, while no page of the
// site is open, when the browser fires Background Sync (see ./idem-sender.js).
//
//   // sw.js, registered with { type: "module" }
//   import { backgroundSync } from "idem-wasm/worker";
//   backgroundSync(self, { url: "/orders", headers: { "Content-Type": "application/json" } });
//
// Pages register the sync (tag `idem:<database>`) when they submit, when a send fails, and
// when they are hidden with intents unsent. The worker takes the lock the pages use, so a
// page and the worker never send one intent at the same time; it reads the records, sends
// what is due under the intents' keys (never past their deadline), and writes each change.
// This module imports the package's web build by a relative path: service workers have no
// import maps.

import init, { IdemClient } from "./web/idem_wasm.js";
import { indexedDbStorage, senderKit } from "./idem-sender.js";

export { indexedDbStorage, memoryStorage, retryAfter, idempotencyKeyHeader } from "./idem-sender.js";

const { IdemSender } = senderKit({ init, IdemClient });

/**
 * Sends the queued intents of a storage (IndexedDB database "idem" by default) while no
 * page leads. Resolves with `{ sent, remaining, lead }`: `lead` is false when a page held
 * the lock throughout `lockWaitMs` (it sends them).
 */
export function sendQueued(options) {
  return IdemSender.sendQueued(options);
}

/**
 * Handles Background Sync in the service worker `scope` (`self`): on the sync event of
 * this storage's tag, sends the queued intents. While some remain unfinished (the server
 * unreachable, a retry not due yet, a page holding the lock), the event fails so that the
 * browser fires it again later, unless it says this was the last chance.
 */
export function backgroundSync(scope, options) {
  const storage = options?.storage ?? indexedDbStorage();
  const tag = storage.name;
  scope.addEventListener("sync", (event) => {
    if (event.tag !== tag) return;
    event.waitUntil(
      sendQueued({ ...options, storage }).then((result) => {
        if (result.remaining !== 0 && !event.lastChance) {
          throw new Error(`idem: ${result.remaining ?? "some"} intent(s) not finished; the browser will sync again`);
        }
        return result;
      }),
    );
  });
  return tag;
}
