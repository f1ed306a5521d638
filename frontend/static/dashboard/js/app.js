// Loaded on every page: opens the live feed, keeps the open-alert count in the nav, and shows a
// notification when a new alert is raised, wherever the user is.
import { api, apiList, toast, $ } from "./core.js";
import { EP } from "./endpoints.js";
import { connectLive, onLive } from "./live.js";

async function refreshAlertCount() {
  const badge = $("#nav-alert-count");
  if (!badge) return;
  try {
    const data = await api(EP.alerts, { params: { state: "open", limit: 1 } });
    const n = Array.isArray(data) ? data.length : data.count;
    badge.textContent = String(n);
    badge.hidden = !n;
  } catch {
    badge.hidden = true;
  }
}

onLive("alert.raised", (p) => {
  const sev = p.severity ? `${p.severity.toUpperCase()} ` : "";
  toast(`${sev}alert: ${p.message || "new alert"}`, {
    kind: "alert", link: `/alerts/#alert-${p.id}`, linkText: "View", timeout: 15000, testid: "alert-toast",
  });
});
onLive(["alert.", "live.reconnected"], refreshAlertCount);

refreshAlertCount();
connectLive();

export { apiList };
