// The service worker, built by Vite as the entry "sw" (/sw.js): it sends the queued
// orders when the browser fires Background Sync, and caches the app shell so the page
// loads offline. Orders are never answered from the cache.
import { backgroundSync } from "idem-wasm/worker";

// The same url and headers as the page's sender.
backgroundSync(self, { url: "/orders", headers: { "Content-Type": "application/json" } });

const CACHE = "shop-shell";

self.addEventListener("install", (event) => {
  event.waitUntil(
    (async () => {
      const shell = await (await fetch("/shell.json", { cache: "no-store" })).json();
      await (await caches.open(CACHE)).addAll(shell);
      await self.skipWaiting();
    })(),
  );
});

self.addEventListener("activate", (event) => event.waitUntil(self.clients.claim()));

self.addEventListener("fetch", (event) => {
  const { request } = event;
  const url = new URL(request.url);
  if (request.method !== "GET" || url.origin !== self.location.origin || url.pathname.startsWith("/orders")) return;
  event.respondWith(
    (async () => {
      const cache = await caches.open(CACHE);
      // Servers answer with `Vary: Origin` (vite preview does), and a module script is
      // asked for with an Origin header that the install's request had not: ignore it.
      const cached = () => cache.match(request, { ignoreVary: true, ignoreSearch: true });
      // Hashed file names never change: the cached copy is the file.
      if (url.pathname.startsWith("/assets/")) return (await cached()) ?? fetch(request);
      // The page: the network's when online (a new build shows), the cached one offline.
      try {
        const fresh = await fetch(request);
        if (fresh.ok) await cache.put(request, fresh.clone());
        return fresh;
      } catch (error) {
        const page = (await cached()) ?? (await cache.match("/", { ignoreVary: true }));
        if (page) return page;
        throw error;
      }
    })(),
  );
});
