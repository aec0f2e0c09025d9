// The shop's service worker (a module worker). It caches the app shell (page, script,
// package files) so the page reloads while offline, and sends the queued orders while no
// page is open, when the browser fires Background Sync. Only GETs of the shell are answered
// from the cache; orders always go to the network.
import { backgroundSync } from "/pkg/idem-worker.js";

const CACHE = "idem-e2e-shell-v2";
const SHELL = [
  "/",
  "/app.js",
  "/pkg/web/idem_wasm.js",
  "/pkg/web/idem_wasm_bg.wasm",
  "/pkg/idem-browser.js",
  "/pkg/idem-sender.js",
  "/pkg/idem-storage.js",
];

// The same url, headers and client settings as the page's sender.
backgroundSync(self, {
  url: "/orders",
  headers: { "Content-Type": "application/json" },
  client: { baseBackoffMs: 200, maxBackoffMs: 2_000 },
});

self.addEventListener("install", (event) => {
  event.waitUntil(
    caches
      .open(CACHE)
      .then((cache) => cache.addAll(SHELL))
      .then(() => self.skipWaiting()),
  );
});

self.addEventListener("activate", (event) => event.waitUntil(self.clients.claim()));

self.addEventListener("fetch", (event) => {
  const url = new URL(event.request.url);
  if (event.request.method !== "GET" || !SHELL.includes(url.pathname)) return;
  event.respondWith(caches.match(event.request).then((hit) => hit ?? fetch(event.request)));
});
