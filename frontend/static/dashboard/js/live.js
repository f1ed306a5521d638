// The live feed: one WebSocket to ws/live/ per page, reconnecting with backoff. Handlers subscribe by
// event kind prefix ("alert." matches "alert.raised"); "*" receives everything. After a reconnect the
// "live.reconnected" pseudo-event tells pages to re-fetch what they may have missed.

const handlers = [];
let socket = null;
let attempts = 0;
let everOpen = false;

function setStatus(state, text) {
  const s = document.getElementById("live-status");
  if (!s) return;
  s.dataset.state = state;
  s.textContent = text;
}

function dispatch(event) {
  for (const { prefix, fn } of handlers) {
    if (prefix === "*" || event.kind === prefix || event.kind.startsWith(prefix)) {
      try { fn(event.payload || {}, event.kind); } catch (e) { console.error("live handler", e); }
    }
  }
}

export function onLive(prefixes, fn) {
  for (const prefix of [].concat(prefixes)) handlers.push({ prefix, fn });
}

export function connectLive() {
  if (socket) return;
  const proto = location.protocol === "https:" ? "wss" : "ws";
  socket = new WebSocket(`${proto}://${location.host}/ws/live/`);
  socket.addEventListener("open", () => {
    const reconnected = everOpen;
    everOpen = true;
    attempts = 0;
    setStatus("open", "live");
    document.body.dataset.live = "open";
    if (reconnected) dispatch({ kind: "live.reconnected", payload: {} });
  });
  socket.addEventListener("message", (m) => {
    let event;
    try { event = JSON.parse(m.data); } catch { return; }
    if (event && typeof event.kind === "string") dispatch(event);
  });
  socket.addEventListener("close", (ev) => {
    socket = null;
    document.body.dataset.live = "closed";
    if (ev.code === 4401) { setStatus("closed", "logged out"); return; }
    attempts += 1;
    const delay = Math.min(15000, 500 * 2 ** Math.min(attempts, 5));
    setStatus("closed", `reconnecting in ${Math.round(delay / 1000)} s`);
    setTimeout(connectLive, delay);
  });
}
