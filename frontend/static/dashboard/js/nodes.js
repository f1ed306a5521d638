// Nodes: state (with why a node or device is isolated or quarantined, and its probation), heartbeat, devices;
// drain, clear quarantine, return to service and fault-injection drills (operator, confirmed).
// The table is one page of GET nodes/ (filtered by state and name on the server, the filter and page kept
// in the URL) with its devices from one GET devices/?nodes=...; the device grid and the drill targets come
// from GET device-map/ (the whole fleet, any size).
import { $, api, apiList, badge, canOperate, clear, confirmAction, debounce, el, empty, errorBox, fmtAgo, toast } from "./core.js";
import { EP } from "./endpoints.js";
import { onLive } from "./live.js";
import { DOM_LIMIT, loadDeviceMap, renderGrid } from "./grid.js";

const DRAINABLE = new Set(["joining", "healthy", "suspect"]);
// The agent's drill kinds (controlplane.core.protocol.FaultKind), with what each one exercises.
const FAULTS = [
  ["crash", "Crash: SIGKILL a worker (process supervision, sev2)"],
  ["exception", "Exception in the training step (exception propagation, sev2)"],
  ["hang", "Hang in a collective (statistical monitoring, stack captured)"],
  ["straggler", "Straggler: slow a rank down (statistical monitoring)"],
  ["network_error", "Connection reset (exception propagation, sev3, retry in place)"],
  ["node_loss", "Node loss: the agent dies with all its workers (heartbeats, sev1)"],
];

const LIMIT = 50;
const STATES = new Set(["joining", "healthy", "suspect", "draining", "isolated", "lost", "quarantined"]);

let view = readView();  // {state, name, page}: what the table shows, mirrored in the URL
let listing = null;     // {count, offset, nodes, devicesByNode}: the page shown
let fleet = null;       // loadDeviceMap(): every node and device, with the task and rank holding it
let fleetLoad = null;   // the map request under way
let listingSeq = 0;

function readView() {
  const q = new URLSearchParams(location.search);
  const state = q.get("state") || "";
  const page = Number.parseInt(q.get("page") || "1", 10);
  return { state: STATES.has(state) ? state : "", name: (q.get("name") || "").trim(), page: page > 0 ? page : 1 };
}

/** Mirror the view in the URL: a reload or a shared link shows the same page. */
function writeView(push) {
  const q = new URLSearchParams();
  if (view.state) q.set("state", view.state);
  if (view.name) q.set("name", view.name);
  if (view.page > 1) q.set("page", String(view.page));
  const s = q.toString();
  const url = `${location.pathname}${s ? `?${s}` : ""}`;
  if (url !== `${location.pathname}${location.search}`) history[push ? "pushState" : "replaceState"](null, "", url);
}

function syncControls() {
  $("#node-state").value = view.state;
  if ($("#node-name").value.trim() !== view.name) $("#node-name").value = view.name;
}

function listParams() {
  // ordered by name explicitly: the device-count annotation groups rows, and a grouped query has no default order
  const p = { limit: LIMIT, offset: (view.page - 1) * LIMIT, ordering: "name", name: view.name };
  if (view.state === "quarantined") p.quarantined = "true";
  else if (view.state) p.state = view.state;
  return p;
}

const grouped = (n) => String(n).replace(/\B(?=(\d{3})+(?!\d))/g, ",");

/** The page of nodes the view names, then its devices in one request. Older answers are dropped. */
async function refreshListing() {
  const seq = ++listingSeq;
  try {
    const params = listParams();
    const data = await api(EP.nodes, { params });
    if (seq !== listingSeq) return;
    if (!data.results.length && data.count > 0 && view.page > 1) {  // past the end (the list shrank)
      view.page = Math.ceil(data.count / LIMIT);
      writeView(false);
      await refreshListing();
      return;
    }
    const ids = data.results.map((n) => n.id);
    const devices = ids.length ? await apiList(EP.devices, { nodes: ids.join(","), limit: 1000 }, Infinity) : [];
    if (seq !== listingSeq) return;
    const devicesByNode = new Map(ids.map((i) => [i, []]));
    for (const d of devices) devicesByNode.get(d.node)?.push(d);
    for (const list of devicesByNode.values()) list.sort((a, b) => a.index - b.index);
    listing = { count: data.count, offset: params.offset, nodes: data.results, devicesByNode };
    renderPager();
    renderTable();
  } catch (e) {
    if (seq === listingSeq) clear($("#node-list"), errorBox(e));
  }
}

/** The whole fleet's map: the device grid, the busy counts and the drill targets. */
function refreshFleet() {
  const load = loadDeviceMap();
  fleetLoad = load;
  return load.then((c) => {
    if (fleetLoad !== load) return;
    fleet = c;
    renderGrid($("#node-grid"), $("#grid-legend"), fleet);
    if (listing && busyKey() !== listing.busyShown) renderTable();  // the busy counts changed
  }, (e) => { if (fleetLoad === load) clear($("#node-grid"), errorBox(e)); });
}

function renderPager() {
  const { count, offset, nodes } = listing;
  $("#node-range").textContent = count ? `${grouped(offset + 1)}–${grouped(offset + nodes.length)} of ${grouped(count)}` : "0 of 0";
  $("#node-range").dataset.count = String(count);
  $("#node-prev").disabled = view.page <= 1;
  $("#node-next").disabled = offset + nodes.length >= count;
}

/** The busy counts of the rows shown, as the fleet map has them (null before it loads). */
const busyOf = (devs) => (fleet ? devs.filter((d) => fleet.allocByDevice.has(d.id)).length : null);
const busyKey = () => listing.nodes.map((n) => busyOf(listing.devicesByNode.get(n.id) || [])).join(",");

function renderTable() {
  const box = $("#node-list");
  listing.busyShown = busyKey();
  if (!listing.nodes.length) {
    clear(box, empty(view.state || view.name ? "No nodes match these filters." : "No nodes have registered yet."));
    return;
  }
  const op = canOperate();
  clear(box, el("table", { class: "table" },
    el("thead", {}, el("tr", {}, ["Node", "State", "Devices", "Busy", "Errors", "Last heartbeat", "Agent", ""].map((h) => el("th", {}, h)))),
    el("tbody", {}, listing.nodes.map((n) => {
      const devs = listing.devicesByNode.get(n.id) || [];
      const busy = busyOf(devs);
      const errors = devs.reduce((s, d) => s + (d.error_count || 0), 0);
      return el("tr", { "data-testid": "node-row", "data-node": n.name },
        el("td", {}, el("strong", {}, n.name), el("div", { class: "muted" }, n.address || "")),
        el("td", {}, badge(n.state), n.quarantined ? [" ", badge("quarantined")] : null,
          onProbation(n) ? [" ", el("span", { class: "badge", title: `until ${n.probation_until}` }, "probation")] : null,
          whyOut(n)),
        el("td", {}, `${devs.length} × ${devs[0]?.kind || "—"}`, isolatedDevices(devs, op)),
        el("td", {}, busy === null ? "—" : `${busy} / ${devs.length}`),
        el("td", {}, String(errors)),
        el("td", { title: n.last_heartbeat_at || "" }, n.last_heartbeat_at ? fmtAgo(n.last_heartbeat_at) : "never"),
        el("td", {}, n.agent_version || "—"),
        el("td", {}, op ? el("div", { class: "row-actions" },
          DRAINABLE.has(n.state) ? el("button", { class: "btn btn-sm", type: "button", onclick: () => drain(n), "data-testid": "drain-node" }, "Drain") : null,
          n.quarantined ? el("button", { class: "btn btn-sm", type: "button", onclick: () => clearQuarantine(n), "data-testid": "clear-quarantine" }, "Clear quarantine") : null,
          n.state === "isolated" && !n.quarantined ? el("button", { class: "btn btn-sm", type: "button", onclick: () => returnNode(n), "data-testid": "return-node-to-service" }, "Return to service") : null,
          faultControl(n)) : null));
    }))));
}

const onProbation = (x) => Boolean(x.probation_until) && new Date(x.probation_until) > new Date();

/** Why a node is out of service: its quarantine reason, else its isolation reason. */
function whyOut(n) {
  const why = n.quarantined ? n.quarantine_reason : n.state === "isolated" ? n.isolation_reason : "";
  return why ? el("div", { class: "muted", "data-testid": "node-out-reason" }, why) : null;
}

/** The node's isolated devices, each with its reason and (operator) a return-to-service button. */
function isolatedDevices(devs, op) {
  const out = devs.filter((d) => d.state === "isolated");
  if (!out.length) return null;
  return out.map((d) => el("div", { class: "muted", "data-testid": "isolated-device", "data-device": String(d.index) },
    `device ${d.index} isolated${d.isolation_reason ? `: ${d.isolation_reason}` : ""} `,
    op ? el("button", { class: "btn btn-sm", type: "button", onclick: () => returnDevice(d), "data-testid": "return-device-to-service" }, "Return to service") : null));
}

function faultControl(n) {
  return el("button", { class: "btn btn-sm btn-danger", type: "button", onclick: () => faultDialog(n), "data-testid": "inject-fault" }, "Fault drill…");
}

/** Ranks of running tasks on node `n` (from the fleet map), grouped by task: [{task, ranks: [{rank, device}]}]. */
function localTargets(n) {
  const byTask = new Map();
  if (!fleet) return [];
  for (const d of fleet.devicesByNode.get(n.id) || []) {
    const a = fleet.allocByDevice.get(d.id);
    if (!a) continue;
    const task = fleet.taskById.get(a.task);
    if (!task || task.state !== "running") continue;
    if (!byTask.has(task.id)) byTask.set(task.id, { task, ranks: [] });
    byTask.get(task.id).ranks.push({ rank: a.rank, device: d.index });
  }
  return [...byTask.values()];
}

/**
 * The drill form: fault kind, target (a running task's rank on this node, or all its ranks here),
 * slowdown for a straggler. Confirming posts it; the API's field errors are shown at the fields and
 * the dialog stays open. Resolves when the dialog closes.
 */
async function faultDialog(n) {
  if (!fleet && fleetLoad) await fleetLoad.catch(() => null);  // the targets come from the fleet map
  const targets = localTargets(n);
  const fault = el("select", { name: "fault", "data-testid": "fault-kind" }, FAULTS.map(([v, l]) => el("option", { value: v }, l)));
  const target = el("select", { name: "target", "data-testid": "fault-target" },
    targets.length ? targets.map(({ task, ranks }) => [
      el("option", { value: `${task.id}:` }, `${task.name} — all ${ranks.length} rank(s) on ${n.name}`),
      ranks.sort((x, y) => x.rank - y.rank).map((r) => el("option", { value: `${task.id}:${r.rank}` }, `${task.name} — rank ${r.rank} (device ${r.device})`)),
    ]) : el("option", { value: "" }, `no running task on ${n.name}`));
  const slowdown = el("input", { name: "slowdown", type: "number", min: "1", max: "100", step: "0.5", value: "3" });
  const errs = Object.fromEntries(["fault", "task", "rank", "slowdown", "form"].map((k) => [k, el("span", { class: "field-error", hidden: true, "data-field-error": k })]));
  const targetField = el("label", { class: "field" }, "Target", target, errs.task, errs.rank);
  const slowField = el("label", { class: "field" }, "Slowdown (× compute time)", slowdown, errs.slowdown);
  const ok = el("button", { class: "btn btn-primary btn-danger-fill", type: "submit", "data-testid": "confirm-inject" }, "Inject fault");
  const form = el("form", { method: "dialog", class: "fault-form" },
    el("h2", {}, `Fault-injection drill on ${n.name}`),
    el("p", { class: "muted" }, "This disturbs real training on this node: the control plane detects the fault, classifies it and heals as it would for a real one."),
    el("label", { class: "field" }, "Fault", fault, errs.fault),
    targetField, slowField, errs.form,
    el("div", { class: "dialog-actions" }, el("button", { class: "btn", type: "button", onclick: () => dlg.close() }, "Cancel"), ok));
  const dlg = el("dialog", { class: "dialog", "data-testid": "fault-dialog" }, form);
  const sync = () => {
    targetField.hidden = fault.value === "node_loss";
    slowField.hidden = fault.value !== "straggler";
    ok.disabled = fault.value !== "node_loss" && !targets.length;
  };
  fault.addEventListener("change", sync);
  sync();
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    for (const e of Object.values(errs)) e.hidden = true;
    const body = { fault: fault.value };
    if (fault.value !== "node_loss") {
      const [task, rank] = target.value.split(":");
      body.task = task ? Number(task) : null;
      if (rank) body.rank = Number(rank);
    }
    if (fault.value === "straggler") body.slowdown = Number(slowdown.value);
    ok.disabled = true;
    try {
      const cmd = await api(EP.nodeInjectFault(n.id), { method: "POST", body });
      dlg.close();
      toast(`Drill ${fault.value} queued for ${n.name} (command ${String(cmd.command_id).slice(0, 8)}); the agent acks it when the fault fires.`, { kind: "ok", testid: "fault-queued" });
    } catch (e) {
      const fe = e.fieldErrors || {};
      const known = Object.keys(fe).filter((k) => errs[k]);
      for (const k of known) { errs[k].textContent = fe[k].join(" "); errs[k].hidden = false; }
      if (!known.length) { errs.form.textContent = e.message; errs.form.hidden = false; }
    } finally { sync(); }
  });
  dlg.addEventListener("close", () => dlg.remove());
  document.body.append(dlg);
  dlg.showModal();
  fault.focus();
}

async function act(confirm, path, body, done) {
  const { ok } = await confirmAction(confirm);
  if (!ok) return;
  try {
    await api(path, { method: "POST", body });
    toast(done, { kind: "ok" });
    refreshListing();
    refreshFleet();
  } catch (e) { toast(e.status === 404 || e.status === 405 ? `Not available: ${e.message} (${path})` : e.message, { kind: "error" }); }
}

const drain = (n) => act({ title: `Drain ${n.name}?`, body: "No new work is placed on it; its agent is told to drain and the planner moves its tasks.", confirmText: "Drain", danger: true }, EP.nodeDrain(n.id), undefined, `${n.name} is draining.`);
const clearQuarantine = (n) => act({ title: `Clear quarantine on ${n.name}?`, body: "The node goes back to joining and may be used by plans again.", confirmText: "Clear quarantine" }, EP.nodeClearQuarantine(n.id), undefined, `Quarantine cleared on ${n.name}.`);

const returnNode = (n) => act({ title: `Return ${n.name} to service?`, body: "The node goes back to joining on probation and a re-plan may use it again; a failure it causes on probation isolates it again.", confirmText: "Return to service" }, EP.nodeReturnToService(n.id), undefined, `${n.name} is back in service on probation.`);
const returnDevice = (d) => act({ title: `Return device ${d.index} to service?`, body: "The device is healthy again on probation and a re-plan may use it; a failure it causes on probation isolates it again.", confirmText: "Return to service" }, EP.deviceReturnToService(d.id), undefined, `Device ${d.index} is back in service on probation.`);

// ---- wiring ----------------------------------------------------------------------------------------
function show(changes, push) {
  Object.assign(view, changes);
  writeView(push);
  refreshListing();
}

$("#node-state").addEventListener("change", (e) => show({ state: e.target.value, page: 1 }, true));
const nameChanged = debounce(() => {
  const name = $("#node-name").value.trim();
  if (name !== view.name) show({ name, page: 1 }, false);
}, 250);
$("#node-name").addEventListener("input", nameChanged);
$("#node-prev").addEventListener("click", () => show({ page: Math.max(1, view.page - 1) }, true));
$("#node-next").addEventListener("click", () => show({ page: view.page + 1 }, true));
window.addEventListener("popstate", () => { view = readView(); syncControls(); refreshListing(); });

/** Call `fn` 150 ms after an event, then at most every `period()` ms while events keep coming (a plain
 * debounce would never fire under the steady stream of events a large fleet sends). */
function throttled(fn, period) {
  let timer = null, last = 0;
  return () => {
    if (timer !== null) return;
    const wait = Math.max(150, period() - (Date.now() - last));
    timer = setTimeout(() => { timer = null; last = Date.now(); fn(); }, wait);
  };
}
// Live events re-read the page shown (50 rows and their devices) and the fleet map, never the whole
// fleet's table; at fleet size the map is re-read at most every 2 s.
const listingSoon = throttled(refreshListing, () => 1000);
const fleetSoon = throttled(refreshFleet, () => (fleet && fleet.devices.length > DOM_LIMIT ? 2000 : 150));
onLive(["node.", "device.", "task.", "live.reconnected"], () => { listingSoon(); fleetSoon(); });

syncControls();
writeView(false);
refreshListing();
refreshFleet();
