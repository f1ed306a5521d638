// Nodes: state, heartbeat, devices; drain, clear quarantine and fault-injection drills (operator, confirmed).
import { $, api, badge, canOperate, clear, confirmAction, debounce, el, empty, errorBox, fmtAgo, toast } from "./core.js";
import { EP } from "./endpoints.js";
import { onLive } from "./live.js";
import { loadCluster, nodeHealth, renderGrid } from "./grid.js";

const DRAINABLE = new Set(["joining", "healthy", "suspect"]);
const FAULTS = [
  ["worker_crash", "Kill a worker process (sev2)"],
  ["cuda_error", "Raise a CUDA error in a worker (sev2)"],
  ["hang", "Hang a collective (statistical monitor)"],
  ["network_flap", "Connection reset (sev3)"],
  ["node_loss", "Stop the node agent (sev1)"],
];

let cluster = null;

async function refresh() {
  try {
    cluster = await loadCluster();
    render();
    renderGrid($("#node-grid"), $("#grid-legend"), cluster);
  } catch (e) { clear($("#node-list"), errorBox(e)); }
}

function render() {
  const box = $("#node-list");
  if (!cluster.nodes.length) { clear(box, empty("No nodes have registered yet.")); return; }
  const op = canOperate();
  clear(box, el("table", { class: "table" },
    el("thead", {}, el("tr", {}, ["Node", "State", "Devices", "Busy", "Errors", "Last heartbeat", "Agent", ""].map((h) => el("th", {}, h)))),
    el("tbody", {}, cluster.nodes.map((n) => {
      const devs = cluster.devicesByNode.get(n.id) || [];
      const busy = devs.filter((d) => cluster.allocByDevice.has(d.id)).length;
      const errors = devs.reduce((s, d) => s + (d.error_count || 0), 0);
      return el("tr", { "data-testid": "node-row", "data-node": n.name },
        el("td", {}, el("strong", {}, n.name), el("div", { class: "muted" }, n.address || "")),
        el("td", {}, badge(n.state), n.quarantined ? [" ", badge("quarantined")] : null),
        el("td", {}, `${devs.length} × ${devs[0]?.kind || "—"}`),
        el("td", {}, `${busy} / ${devs.length}`),
        el("td", {}, String(errors)),
        el("td", { title: n.last_heartbeat_at || "" }, n.last_heartbeat_at ? fmtAgo(n.last_heartbeat_at) : "never"),
        el("td", {}, n.agent_version || "—"),
        el("td", {}, op ? el("div", { class: "row-actions" },
          DRAINABLE.has(n.state) ? el("button", { class: "btn btn-sm", type: "button", onclick: () => drain(n), "data-testid": "drain-node" }, "Drain") : null,
          n.quarantined ? el("button", { class: "btn btn-sm", type: "button", onclick: () => clearQuarantine(n), "data-testid": "clear-quarantine" }, "Clear quarantine") : null,
          faultControl(n)) : null));
    }))));
}

function faultControl(n) {
  const sel = el("select", { "aria-label": `Fault to inject on ${n.name}`, class: "btn-sm" }, FAULTS.map(([v, l]) => el("option", { value: v }, l)));
  return el("span", { class: "row-actions" }, sel,
    el("button", { class: "btn btn-sm btn-danger", type: "button", onclick: () => inject(n, sel.value, sel.selectedOptions[0].textContent), "data-testid": "inject-fault" }, "Inject fault"));
}

async function act(confirm, path, body, done) {
  const { ok } = await confirmAction(confirm);
  if (!ok) return;
  try {
    await api(path, { method: "POST", body });
    toast(done, { kind: "ok" });
    refresh();
  } catch (e) { toast(e.status === 404 || e.status === 405 ? `Not available: ${e.message} (${path})` : e.message, { kind: "error" }); }
}

const drain = (n) => act({ title: `Drain ${n.name}?`, body: "No new work is placed on it; its agent is told to drain and the planner moves its tasks.", confirmText: "Drain", danger: true }, EP.nodeDrain(n.id), undefined, `${n.name} is draining.`);
const clearQuarantine = (n) => act({ title: `Clear quarantine on ${n.name}?`, body: "The node goes back to joining and may be used by plans again.", confirmText: "Clear quarantine" }, EP.nodeClearQuarantine(n.id), undefined, `Quarantine cleared on ${n.name}.`);
const inject = (n, fault, label) => act({ title: `Fault-injection drill on ${n.name}`, body: `${label}. This disturbs real training on this node.`, confirmText: "Inject fault", danger: true }, EP.nodeInjectFault(n.id), { fault }, `Fault ${fault} sent to ${n.name}.`);

onLive(["node.", "device.", "task.", "live.reconnected"], debounce(refresh, 150));
refresh();
export { nodeHealth };
