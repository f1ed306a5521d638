// How a transition is shown (history page and task detail): time per phase, lost work, state sources.
import { badge, el, fmtSecs, parseTime } from "./core.js";

const PHASE_COLOURS = ["#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#76b7b2", "#edc948", "#9c755f", "#ff9da7"];
const PHASE_ORDER = ["teardown", "rendezvous", "migrate", "recompute", "first_iteration", "commands"];

/** Total seconds: the recorded total, else started → finished. */
export function transitionSeconds(t) {
  if (t.phases_s && Number.isFinite(Number(t.phases_s.total))) return Number(t.phases_s.total);
  return t.started_at && t.finished_at ? (parseTime(t.finished_at) - parseTime(t.started_at)) / 1000 : null;
}

/** [{name, s, state}] from the transition's phases_s (reported by the workers), else its steps' times. */
export function phases(t) {
  const ph = t.phases_s || {};
  const names = Object.keys(ph).filter((k) => k !== "total");
  if (names.length) {
    names.sort((a, b) => (PHASE_ORDER.indexOf(a) + 99) % 99 - (PHASE_ORDER.indexOf(b) + 99) % 99);
    return names.map((name) => ({ name, s: Number(ph[name]) || 0, state: "done" }));
  }
  return (t.steps || []).map((s) => ({
    name: s.name,
    s: s.started_at && s.finished_at ? (parseTime(s.finished_at) - parseTime(s.started_at)) / 1000 : 0,
    state: s.state,
  }));
}

export function phaseBar(t) {
  const list = phases(t);
  const total = list.reduce((a, p) => a + p.s, 0);
  if (!total) return el("div", { class: "muted" }, list.map((p) => `${p.name.replace(/_/g, " ")} (${p.state})`).join(" → ") || "no phases recorded yet");
  return el("div", { "data-testid": "phase-bar" },
    el("div", { class: "phase-bar", title: "time per phase" }, list.map((p, i) => el("span", { title: `${p.name}: ${fmtSecs(p.s)}`, style: { width: `${(100 * p.s) / total}%`, background: PHASE_COLOURS[i % PHASE_COLOURS.length] } }))),
    el("div", { class: "grid-legend" }, list.map((p, i) => el("span", { "data-phase": p.name }, el("span", { class: "sw", style: { background: PHASE_COLOURS[i % PHASE_COLOURS.length] } }), `${p.name.replace(/_/g, " ")} ${fmtSecs(p.s)}`, p.state !== "done" ? [" ", badge(p.state)] : null))));
}

const SOURCE_LABELS = { none: "fresh start (no state)" };

function sourceKind(v) {
  const k = typeof v === "string" ? v : v && typeof v === "object" ? v.source || v.kind || "unknown" : "unknown";
  return SOURCE_LABELS[k] || k;
}

/** "dp peer ×4 (from node-b), local snapshot ×2" */
export function sourcesText(ms) {
  const counts = new Map();
  for (const v of Object.values(ms || {})) {
    const k = sourceKind(v);
    const e = counts.get(k) || { n: 0, nodes: new Set() };
    e.n += 1;
    if (v && typeof v === "object" && v.source_node) e.nodes.add(v.source_node);
    counts.set(k, e);
  }
  return [...counts.entries()].map(([k, e]) => `${k.replace(/_/g, " ")} ×${e.n}${e.nodes.size ? ` (from ${[...e.nodes].sort().join(", ")})` : ""}`).join(", ") || "—";
}

export function lostWorkText(t) {
  if (!t.lost_microbatches && !t.lost_work_s) return t.state === "completed" ? "none" : "—";
  return `${t.lost_microbatches} micro-batches · ${fmtSecs(t.lost_work_s)} recompute`;
}
