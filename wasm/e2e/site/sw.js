// Caches the app shell (page, script, package files) so the page reloads while offline.
// Only GETs of the shell are answered from the cache; orders always go to the network.
const CACHE = "idem-e2e-shell-v1";
const SHELL = ["/", "/app.js", "/pkg/web/idem_wasm.js", "/pkg/web/idem_wasm_bg.wasm", "/pkg/idem-browser.js"];

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
