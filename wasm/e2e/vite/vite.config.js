// The Vite app of wasm/js/README.md ("A Vite app"): orders go to idem proxy on the page's
// own origin, and the service worker is built as a second entry.
import { defineConfig } from "vite";

// Where idem proxy listens (idem proxy --upstream http://your-api ...).
const IDEM_PROXY = process.env.IDEM_PROXY ?? "http://127.0.0.1:8480";
// The API paths, routed to idem proxy by `vite` (dev) and `vite preview` alike: the page
// calls its own origin, so no CORS.
const api = { "/orders": { target: IDEM_PROXY } };

/** Writes shell.json: every file of the build but the worker, which caches them at install. */
function shellList() {
  return {
    name: "shell-list",
    apply: "build",
    generateBundle(_options, bundle) {
      const files = Object.keys(bundle).filter((name) => name !== "sw.js" && !name.endsWith(".map"));
      const shell = ["/", ...files.map((name) => `/${name}`)];
      this.emitFile({ type: "asset", fileName: "shell.json", source: JSON.stringify(shell) });
    },
  };
}

export default defineConfig({
  server: { proxy: api },
  preview: { proxy: api },
  // The package loads its .wasm next to its JS (new URL(..., import.meta.url)); the dev
  // server's dependency bundling would move the JS away from it.
  optimizeDeps: { exclude: ["idem-wasm"] },
  build: {
    rolldownOptions: {
      // The service worker is an entry of its own: bundled with idem-wasm/worker and the
      // .wasm, and written as /sw.js, at the root, so that it controls every page.
      input: { main: "index.html", sw: "src/sw.js" },
      output: {
        entryFileNames: (chunk) => (chunk.name === "sw" ? "sw.js" : "assets/[name]-[hash].js"),
      },
    },
  },
  plugins: [shellList()],
});
