// The page: every order is an intent of idem-wasm/browser, kept in IndexedDB and sent to
// /orders (idem proxy, on this origin) under its key, now or once the browser is online.
import { IdemSender } from "idem-wasm/browser";

const button = document.getElementById("order");
const list = document.getElementById("orders");
const network = document.getElementById("network");

// Built, the worker caches the app shell (the page reloads offline) and sends the queued
// orders while no page is open. The dev server has no built worker.
if (import.meta.env.PROD && "serviceWorker" in navigator) {
  await navigator.serviceWorker.register("/sw.js", { type: "module" });
}

function describe(intent) {
  switch (intent.state) {
    case "completed": {
      const { order } = JSON.parse(new TextDecoder().decode(intent.body));
      return `confirmed, order #${order}`;
    }
    case "unknown": {
      // The server does not know whether it ran: a person must look. This is what they need.
      const { key, operation } = intent.reconcile;
      return `unknown at the server: ask support to look at ${operation}, key ${key}`;
    }
    case "queued":
      return navigator.onLine ? "waiting to be sent" : "waiting for the network";
    default:
      return intent.state.replace("_", " ");
  }
}

let sender;
function render() {
  if (sender === undefined) return; // onChange may fire before open resolves
  network.textContent = navigator.onLine ? "online" : "offline: orders are kept and sent later";
  list.replaceChildren(
    ...sender.list().map((intent) => {
      const li = document.createElement("li");
      Object.assign(li.dataset, { key: intent.key, state: intent.state });
      li.textContent = describe(intent);
      return li;
    }),
  );
}

sender = await IdemSender.open({
  url: "/orders",
  headers: { "Content-Type": "application/json" },
  onChange: render,
});
addEventListener("online", render);
addEventListener("offline", render);
button.addEventListener("click", async () => {
  await sender.submit("order", JSON.stringify({ item: "A-1", qty: 2, at: Date.now() }));
  render();
});
render();
button.disabled = false;
