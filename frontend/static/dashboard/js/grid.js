// The nodes × devices grid: one row per node, one cell per device, coloured by the task holding the
// device or by health (node state, quarantine, device state).
import { apiList, badge, clear, el, empty, taskColour } from "./core.js";
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

export function renderGrid(container, legend, c) {
  if (!c.nodes.length) {
    clear(container, empty("No nodes have registered yet. Start a node agent to see its devices here."));
    if (legend) clear(legend);
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
  if (legend) {
    clear(legend,
      [...usedTasks.values()].map((t) => el("span", {}, el("span", { class: "sw", style: { background: taskColour(t.id) } }), t.name)),
      el("span", {}, el("span", { class: "sw", style: { background: "#e4e7ec" } }), "idle"),
      el("span", { class: "muted" }, "│ outline/colour by health:"),
      [["healthy", "#1f9d55"], ["suspect", "#d99a06"], ["isolated", "#8b5cf6"], ["lost", "#6b7280"], ["quarantined", "#b4235a"], ["failed", "#d23c3c"]]
        .map(([h, col]) => el("span", {}, el("span", { class: "sw", style: { background: col } }), h)));
  }
}
