// The nodes × devices grid: one row per node, one cell per device, coloured by the task holding the
// device or by health (node state, quarantine, device state). Up to DOM_LIMIT devices each cell is an
// element; a larger fleet (thousands of nodes) is drawn on a canvas, nodes packed in rows, with a filter
// and zoom, and the device under the pointer named in a tooltip.
import { api, apiList, badge, clear, el, empty, taskColour } from "./core.js";
import { EP } from "./endpoints.js";

export const HEALTH = ["healthy", "suspect", "isolated", "lost", "quarantined", "failed", "draining"];

export function deviceHealth(node, device) {
  if (node.quarantined) return "quarantined";
  if (["suspect", "isolated", "lost"].includes(node.state)) return node.state;
  if (device && device.state && device.state !== "healthy") return device.state;
  if (["draining", "joining"].includes(node.state)) return node.state;
  return "healthy";
}

export function nodeHealth(node) {
  return node.quarantined ? "quarantined" : node.state;
}

const id = (x) => (x && typeof x === "object" ? x.id : x);

/** Load what the grid needs: nodes, devices, active allocations and tasks. */
export async function loadCluster() {
  const [nodes, devices, tasks] = await Promise.all([apiList(EP.nodes), apiList(EP.devices), apiList(EP.tasks)]);
  // active allocations come with each task (TaskSerializer.allocations)
  const allocations = tasks.flatMap((t) => (t.allocations || []).map((a) => ({ ...a, task: t.id })));
  const taskById = new Map(tasks.map((t) => [t.id, t]));
  const allocByDevice = new Map();
  for (const a of allocations) allocByDevice.set(id(a.device), a);
  const devicesByNode = new Map(nodes.map((n) => [n.id, []]));
  for (const d of devices) {
    const list = devicesByNode.get(id(d.node));
    if (list) list.push(d);
  }
  for (const list of devicesByNode.values()) list.sort((a, b) => a.index - b.index);
  return { nodes, devices, allocations, tasks, taskById, allocByDevice, devicesByNode };
}

/**
 * The whole fleet from GET device-map/ (one request, compact rows) in the shape loadCluster returns,
 * plus `taskStates` (every task counted by state).
 */
export async function loadDeviceMap() {
  const m = await api(EP.deviceMap);
  const nodes = m.nodes.map(([id, name, state, quarantined]) => ({ id, name, state, quarantined }));
  const devices = m.devices.map(([id, node, index, kind, state]) => ({ id, node, index, kind, state }));
  const allocations = m.devices.filter((d) => d[5] !== null).map((d) => ({ device: d[0], task: d[5], rank: d[6] }));
  const tasks = m.tasks.map(([id, name, state]) => ({ id, name, state }));
  const taskById = new Map(tasks.map((t) => [t.id, t]));
  const allocByDevice = new Map(allocations.map((a) => [a.device, a]));
  const devicesByNode = new Map(nodes.map((n) => [n.id, []]));
  for (const d of devices) devicesByNode.get(d.node)?.push(d);
  return { nodes, devices, allocations, tasks, taskById, allocByDevice, devicesByNode, taskStates: m.task_states };
}

export const DOM_LIMIT = 1024;

export function renderGrid(container, legend, c) {
  if (!c.nodes.length) {
    clear(container, empty("No nodes have registered yet. Start a node agent to see its devices here."));
    if (legend) clear(legend);
    return;
  }
  if (c.devices.length > DOM_LIMIT) {
    renderFleetCanvas(container, c);
    renderLegend(legend, c, new Map(c.tasks.map((t) => [t.id, t])));
    return;
  }
  const usedTasks = new Map();
  const rows = c.nodes.map((n) => {
    const cells = (c.devicesByNode.get(n.id) || []).map((d) => {
      const a = c.allocByDevice.get(d.id);
      const taskId = a ? id(a.task) : null;
      const task = taskId !== null ? c.taskById.get(taskId) : null;
      if (task) usedTasks.set(task.id, task);
      const health = deviceHealth(n, d);
      const colour = taskColour(taskId);
      const title = [
        `${n.name} / device ${d.index} (${d.kind || "?"})`,
        `health: ${health}`,
        task ? `task: ${task.name} (#${task.id}), rank ${a.rank}` : "idle",
      ].join("\n");
      return el("div", {
        class: `device${task ? "" : " idle"}`,
        title,
        "data-testid": "device-cell",
        "data-device": d.id,
        "data-node": n.name,
        "data-task": taskId ?? "",
        "data-health": health,
        style: task ? { background: colour } : undefined,
      }, String(d.index));
    });
    return el("div", { class: "node-row", "data-node-row": n.name },
      el("div", { class: "node-name", title: n.name }, n.name, " ", badge(nodeHealth(n))),
      el("div", { class: "devices" }, cells.length ? cells : el("span", { class: "muted" }, "no devices")));
  });
  clear(container, rows);
  renderLegend(legend, c, usedTasks);
}

function renderLegend(legend, c, usedTasks) {
  if (legend) {
    clear(legend,
      [...usedTasks.values()].map((t) => el("span", {}, el("span", { class: "sw", style: { background: taskColour(t.id) } }), t.name)),
      el("span", {}, el("span", { class: "sw", style: { background: "#e4e7ec" } }), "idle"),
      el("span", { class: "muted" }, "│ outline/colour by health:"),
      [["healthy", "#1f9d55"], ["suspect", "#d99a06"], ["isolated", "#8b5cf6"], ["lost", "#6b7280"], ["quarantined", "#b4235a"], ["failed", "#d23c3c"]]
        .map(([h, col]) => el("span", {}, el("span", { class: "sw", style: { background: col } }), h)));
  }
}

// ---- the canvas map of a large fleet ----------------------------------------------------------------
const HEALTH_COLOUR = {
  healthy: "#1f9d55", suspect: "#d99a06", isolated: "#8b5cf6", lost: "#6b7280", quarantined: "#b4235a",
  failed: "#d23c3c", degraded: "#d23c3c", draining: "#94a3b8", joining: "#94a3b8",
};
const IDLE = "#e4e7ec";
const ZOOMS = [3, 5, 8, 12, 18];

/** State kept on the container between refreshes: zoom, filter, the layout the pointer reads. */
function fleetState(container) {
  if (!container._fleet) container._fleet = { zoom: 2, filter: "", layout: null, c: null };
  return container._fleet;
}

function matches(n, filter) {
  if (!filter) return true;
  const f = filter.toLowerCase();
  return n.name.toLowerCase().includes(f) || nodeHealth(n) === f;
}

function renderFleetCanvas(container, c) {
  const st = fleetState(container);
  st.c = c;
  if (!container.querySelector("canvas[data-testid=fleet-canvas]")) {
    const filter = el("input", {
      type: "search", placeholder: "Filter: node name or state (lost, suspect, quarantined…)",
      "aria-label": "Filter nodes", "data-testid": "fleet-filter", class: "fleet-filter",
    });
    filter.value = st.filter;
    filter.addEventListener("input", () => { st.filter = filter.value.trim(); drawFleet(container); });
    const zoom = (d) => () => { st.zoom = Math.max(0, Math.min(ZOOMS.length - 1, st.zoom + d)); drawFleet(container); };
    const tools = el("div", { class: "fleet-tools" }, filter,
      el("button", { type: "button", class: "btn btn-sm", onclick: zoom(-1), "aria-label": "Zoom out", "data-testid": "fleet-zoom-out" }, "−"),
      el("button", { type: "button", class: "btn btn-sm", onclick: zoom(1), "aria-label": "Zoom in", "data-testid": "fleet-zoom-in" }, "+"),
      el("span", { class: "muted", "data-testid": "fleet-count" }));
    const canvas = el("canvas", { "data-testid": "fleet-canvas", role: "img", "aria-label": "Nodes × devices map" });
    const tip = el("div", { class: "fleet-tip", hidden: true, "data-testid": "fleet-tip" });
    canvas.addEventListener("mousemove", (e) => showTip(container, canvas, tip, e));
    canvas.addEventListener("mouseleave", () => { tip.hidden = true; });
    clear(container, tools, el("div", { class: "fleet-wrap" }, canvas, tip));
    new MutationObserver(() => drawFleet(container)).observe(container, { attributes: true, attributeFilter: ["data-mode"] });
    new ResizeObserver(() => drawFleet(container)).observe(container);
  }
  drawFleet(container);
}

function drawFleet(container) {
  const st = fleetState(container);
  const c = st.c;
  const canvas = container.querySelector("canvas[data-testid=fleet-canvas]");
  if (!c || !canvas) return;
  const byHealth = container.dataset.mode === "health";
  const cell = ZOOMS[st.zoom];
  const gap = cell >= 8 ? 1 : 0;
  const shown = c.nodes.filter((n) => matches(n, st.filter));
  const per = Math.max(1, ...shown.map((n) => (c.devicesByNode.get(n.id) || []).length));
  const blockW = per * (cell + gap) + Math.max(2, cell / 2);
  const blockH = cell + Math.max(2, cell / 2);
  const width = Math.max(200, container.clientWidth || 800);
  const perRow = Math.max(1, Math.floor(width / blockW));
  const rows = Math.ceil(shown.length / perRow);
  const dpr = window.devicePixelRatio || 1;
  canvas.style.width = `${width}px`;
  canvas.style.height = `${Math.max(blockH, rows * blockH)}px`;
  canvas.width = Math.round(width * dpr);
  canvas.height = Math.round(Math.max(blockH, rows * blockH) * dpr);
  const g = canvas.getContext("2d");
  g.setTransform(dpr, 0, 0, dpr, 0, 0);
  g.clearRect(0, 0, width, rows * blockH);
  shown.forEach((n, i) => {
    const x0 = (i % perRow) * blockW, y0 = Math.floor(i / perRow) * blockH;
    (c.devicesByNode.get(n.id) || []).forEach((d, j) => {
      const a = c.allocByDevice.get(d.id);
      const health = deviceHealth(n, d);
      g.fillStyle = byHealth ? HEALTH_COLOUR[health] || IDLE : (a ? taskColour(a.task) : IDLE);
      g.fillRect(x0 + j * (cell + gap), y0, cell, cell);
      if (!byHealth && health !== "healthy" && cell >= 5) {  // task colours, health as an outline
        g.strokeStyle = HEALTH_COLOUR[health] || "#000";
        g.lineWidth = 1;
        g.strokeRect(x0 + j * (cell + gap) + 0.5, y0 + 0.5, cell - 1, cell - 1);
      }
    });
  });
  st.layout = { shown, perRow, blockW, blockH, cell, gap };
  const count = container.querySelector("[data-testid=fleet-count]");
  const devices = shown.reduce((s, n) => s + (c.devicesByNode.get(n.id) || []).length, 0);
  if (count) count.textContent = `${shown.length} of ${c.nodes.length} nodes · ${devices} devices`;
}

function showTip(container, canvas, tip, e) {
  const st = fleetState(container);
  const L = st.layout;
  if (!L) return;
  const r = canvas.getBoundingClientRect();
  const x = e.clientX - r.left, y = e.clientY - r.top;
  const col = Math.floor(x / L.blockW), row = Math.floor(y / L.blockH);
  const n = col < L.perRow ? L.shown[row * L.perRow + col] : undefined;
  const j = Math.floor((x - col * L.blockW) / (L.cell + L.gap));
  const d = n ? (st.c.devicesByNode.get(n.id) || [])[j] : undefined;
  if (!n || !d || y - row * L.blockH > L.cell) { tip.hidden = true; return; }
  const a = st.c.allocByDevice.get(d.id);
  const task = a ? st.c.taskById.get(a.task) : null;
  tip.textContent = `${n.name} / device ${d.index} · ${deviceHealth(n, d)} · ${task ? `${task.name} (#${task.id}) rank ${a.rank}` : "idle"}`;
  tip.style.left = `${x + 12}px`;
  tip.style.top = `${y + 12}px`;
  tip.hidden = false;
}
