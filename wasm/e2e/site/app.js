// The end-to-end test page: one button that places an order through idem-wasm/browser.
// Its state lives in IndexedDB, so a reload shows (and keeps sending) the same intents.
import { IdemSender } from "idem-wasm/browser";

const list = document.getElementById("intents");
const button = document.getElementById("order");
const network = document.getElementById("network");

function describe(intent) {
  if (intent.state !== "completed") return "";
  const outcome = JSON.parse(new TextDecoder().decode(intent.body));
  return `Order #${outcome.order} ${outcome.status}`;
}

let sender; // set once open resolves; onChange may fire before

function render() {
  if (sender === undefined) return;
  network.textContent = navigator.onLine ? "online" : "offline";
  list.replaceChildren(
    ...sender.list().map((intent) => {
      const li = document.createElement("li");
      Object.assign(li.dataset, { key: intent.key, state: intent.state, attempts: intent.attempts });
      li.innerHTML = `<span class="key"></span> <b class="state"></b> after <span class="attempts"></span> attempt(s) <span class="outcome"></span>`;
      li.querySelector(".key").textContent = intent.key;
      li.querySelector(".state").textContent = intent.state;
      li.querySelector(".attempts").textContent = intent.attempts;
      li.querySelector(".outcome").textContent = describe(intent);
      return li;
    }),
  );
}

// The app shell is cached by a service worker, so the page also reloads while offline.
await navigator.serviceWorker?.register("/sw.js");

sender = await IdemSender.open({
  url: "/orders",
  headers: { "Content-Type": "application/json" },
  client: { baseBackoffMs: 200, maxBackoffMs: 2_000 },
  onChange: render,
});
addEventListener("online", render);
addEventListener("offline", render);
button.addEventListener("click", async () => {
  await sender.submit("order", JSON.stringify({ item: "A-1", qty: 2 }));
  render();
});
render();
button.disabled = false;
document.body.dataset.ready = "true";
