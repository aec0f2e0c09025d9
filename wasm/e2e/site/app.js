// The end-to-end test page: a shop whose orders go through idem-wasm/browser. Its state
// lives in IndexedDB, so a reload shows (and keeps sending) the same intents, and every
// open tab shows every order; one tab at a time sends them. The tests drive it through
// `window.shop`.
import { IdemSender } from "idem-wasm/browser";

const list = document.getElementById("intents");
const button = document.getElementById("order");
const network = document.getElementById("network");
const role = document.getElementById("role");

function describe(intent) {
  if (intent.state !== "completed") return "";
  const outcome = JSON.parse(new TextDecoder().decode(intent.body));
  return `Order #${outcome.order} ${outcome.status}`;
}

let sender; // set once open resolves; onChange may fire before
let drawing = false;

function render() {
  if (sender === undefined) return;
  network.textContent = navigator.onLine ? "online" : "offline";
  role.textContent = sender.leading ? "this tab sends" : "another tab sends";
  document.body.dataset.leader = String(sender.leading);
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

/** Draws once for a burst of changes. */
function changed() {
  if (drawing) return;
  drawing = true;
  setTimeout(() => {
    drawing = false;
    render();
  }, 0);
}

// The app shell is cached by a service worker, so the page also reloads while offline;
// the worker also sends queued orders while no page is open (Background Sync).
await navigator.serviceWorker?.register("/sw.js", { type: "module" });

// What this tab heard: each intent's latest state by key, and when it began to lead.
const seen = new Map();
let ledAt;
sender = await IdemSender.open({
  url: "/orders",
  headers: { "Content-Type": "application/json" },
  client: { baseBackoffMs: 200, maxBackoffMs: 2_000 },
  onChange: (intent) => {
    seen.set(intent.key, intent.state);
    changed();
  },
  onLeader: (leading) => {
    ledAt = leading ? Date.now() : undefined;
    changed();
  },
});
addEventListener("online", render);
addEventListener("offline", render);
let placed = 0;
const order = () => sender.submit("order", JSON.stringify({ item: "A-1", qty: 2, n: placed++, at: Date.now() }));
button.addEventListener("click", async () => {
  await order();
  render();
});
window.shop = { sender, order, seen, ledAt: () => ledAt };
render();
button.disabled = false;
document.body.dataset.ready = "true";
