// Shared helpers: the API client (session cookie + CSRF header), a DOM builder that never parses
// HTML from data, formatting, toasts and a confirmation dialog.

export const API = "/api/v1";

export class ApiError extends Error {
  constructor(status, body) {
    super(ApiError.summary(status, body));
    this.status = status;
    this.body = body;
  }
  static summary(status, body) {
    if (body && typeof body === "object") {
      if (typeof body.detail === "string") return body.detail;
      const parts = Object.entries(body).map(([k, v]) => `${k}: ${[].concat(v).join(" ")}`);
      if (parts.length) return parts.join("; ");
    }
    if (status === 403) return "You do not have permission to do that.";
    if (status === 0) return "The control plane cannot be reached.";
    return `Request failed (${status}).`;
  }
  /** Field errors as {field: [messages]} (DRF's 400 shape), or {}. */
  get fieldErrors() {
    if (this.status !== 400 || !this.body || typeof this.body !== "object") return {};
    const out = {};
    for (const [k, v] of Object.entries(this.body)) if (k !== "detail" && k !== "code") out[k] = [].concat(v);
    return out;
  }
}

export function csrfToken() {
  const meta = document.querySelector('meta[name="csrf-token"]');
  return meta ? meta.content : "";
}

/** Call the REST API. Paths are relative to /api/v1/. Returns parsed JSON (or null for 204). */
export async function api(path, { method = "GET", body, params } = {}) {
  let url = path.startsWith("/") ? path : `${API}/${path}`;
  if (params) {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(params)) {
      if (Array.isArray(v)) for (const x of v) q.append(k, x);
      else if (v !== undefined && v !== null && v !== "") q.set(k, v);
    }
    const s = q.toString();
    if (s) url += (url.includes("?") ? "&" : "?") + s;
  }
  const headers = { Accept: "application/json" };
  if (method !== "GET") headers["X-CSRFToken"] = csrfToken();
  if (body !== undefined) headers["Content-Type"] = "application/json";
  let res;
  try {
    res = await fetch(url, {
      method, headers, credentials: "same-origin",
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch (e) {
    throw new ApiError(0, null);
  }
  if (res.status === 401 || (res.status === 403 && res.redirected)) {
    window.location.assign(`/login/?next=${encodeURIComponent(location.pathname)}`);
  }
  if (res.status === 204) return null;
  let data = null;
  const text = await res.text();
  if (text) { try { data = JSON.parse(text); } catch { data = { detail: text.slice(0, 200) }; } }
  if (!res.ok) throw new ApiError(res.status, data);
  return data;
}

/** A list endpoint, following LimitOffset pagination up to `max` rows. */
export async function apiList(path, params = {}, max = 1000) {
  const out = [];
  let next = null;
  let data = await api(path, { params: { limit: Math.min(max, 500), ...params } });
  for (;;) {
    if (Array.isArray(data)) return data;
    out.push(...(data.results || []));
    next = data.next;
    if (!next || out.length >= max) return out;
    const u = new URL(next, location.origin);
    data = await api(u.pathname + u.search);
  }
}

/** el("div", {class: "x", onclick: fn}, child, "text", [children]) */
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on") && typeof v === "function") node.addEventListener(k.slice(2), v);
    else if (k === "class") node.className = v;
    else if (k === "dataset") Object.assign(node.dataset, v);
    else if (k === "style" && typeof v === "object") Object.assign(node.style, v);
    else if (v === true) node.setAttribute(k, "");
    else node.setAttribute(k, String(v));
  }
  append(node, children);
  return node;
}

function append(node, children) {
  for (const c of children) {
    if (c === undefined || c === null || c === false) continue;
    if (Array.isArray(c)) append(node, c);
    else node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

export function clear(node, ...children) { node.replaceChildren(); append(node, children); return node; }

export const $ = (sel, root = document) => root.querySelector(sel);
export const $$ = (sel, root = document) => Array.from(root.querySelectorAll(sel));

export const canOperate = () => document.body.dataset.canOperate === "true";

export function badge(state, prefix = "st") {
  if (state === undefined || state === null || state === "") return el("span", { class: "badge" }, "—");
  return el("span", { class: `badge ${prefix}-${String(state).replace(/[^a-z0-9_-]/gi, "")}` }, String(state).replace(/_/g, " "));
}

export function loading(text = "Loading…") { return el("div", { class: "loading" }, text); }
export function empty(text) { return el("div", { class: "empty" }, text); }
export function errorBox(err) { return el("div", { class: "error-box", role: "alert" }, err && err.message ? err.message : String(err)); }

// ---- formatting ----------------------------------------------------------------------------
export function fmtNum(x, digits = 1) {
  if (x === undefined || x === null || Number.isNaN(Number(x))) return "—";
  const n = Number(x);
  const a = Math.abs(n);
  const units = [[1e18, "E"], [1e15, "P"], [1e12, "T"], [1e9, "G"], [1e6, "M"], [1e3, "k"]];
  for (const [v, u] of units) if (a >= v) return `${(n / v).toFixed(digits)} ${u}`;
  return Number.isInteger(n) ? String(n) : n.toFixed(digits);
}
export function fmtFlops(x) { if (x === undefined || x === null) return "—"; const s = fmtNum(x); return /[a-zA-Z]$/.test(s) ? `${s}FLOP/s` : `${s} FLOP/s`; }
export function fmtPct(x, digits = 1) { return x === undefined || x === null || !Number.isFinite(Number(x)) ? "—" : `${(Number(x) * 100).toFixed(digits)} %`; }
export function fmtSecs(s) {
  if (s === undefined || s === null || !Number.isFinite(Number(s))) return "—";
  s = Number(s);
  if (s < 1) return `${Math.round(s * 1000)} ms`;
  if (s < 120) return `${s.toFixed(s < 10 ? 2 : 1)} s`;
  if (s < 7200) return `${(s / 60).toFixed(1)} min`;
  return `${(s / 3600).toFixed(1)} h`;
}
export function parseTime(t) { if (!t) return null; const d = new Date(t); return Number.isNaN(d.getTime()) ? null : d; }
export function fmtTime(t) {
  const d = t instanceof Date ? t : parseTime(t);
  if (!d) return "—";
  return d.toLocaleString(undefined, { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit", second: "2-digit", hour12: false });
}
export function fmtAgo(t) {
  const d = t instanceof Date ? t : parseTime(t);
  if (!d) return "—";
  const s = (Date.now() - d.getTime()) / 1000;
  if (s < 5) return "just now";
  if (s < 60) return `${Math.round(s)} s ago`;
  if (s < 3600) return `${Math.round(s / 60)} min ago`;
  if (s < 86400) return `${(s / 3600).toFixed(1)} h ago`;
  return `${Math.round(s / 86400)} d ago`;
}
export function secondsBetween(a, b) {
  const x = parseTime(a), y = parseTime(b);
  return x && y ? (y.getTime() - x.getTime()) / 1000 : null;
}

// A stable colour per task id, distinct from the health colours.
const TASK_COLOURS = ["#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#76b7b2", "#edc948", "#ff9da7", "#9c755f", "#86bcb6", "#a0cbe8", "#d4a6c8", "#8cd17d"];
export function taskColour(id) { return id === null || id === undefined ? null : TASK_COLOURS[Math.abs(Number(id)) % TASK_COLOURS.length]; }

// ---- toasts and confirmation -------------------------------------------------------------------
export function toast(message, { kind = "info", link, linkText, timeout = 8000, testid } = {}) {
  const box = document.getElementById("toasts");
  const t = el("div", { class: `toast toast-${kind}`, role: kind === "alert" || kind === "error" ? "alert" : "status", "data-testid": testid || "toast" },
    message, link ? [" ", el("a", { href: link }, linkText || "Open")] : null);
  box.append(t);
  if (timeout) setTimeout(() => t.remove(), timeout);
  return t;
}

/** Ask for confirmation; resolves to {ok, comment}. With `comment: "required"` a comment must be given. */
export function confirmAction({ title, body, confirmText = "Confirm", danger = false, comment = null }) {
  const dlg = document.getElementById("confirm-dialog");
  document.getElementById("confirm-title").textContent = title;
  document.getElementById("confirm-body").textContent = body || "";
  const field = document.getElementById("confirm-comment-field");
  const input = document.getElementById("confirm-comment");
  const error = document.getElementById("confirm-error");
  const ok = document.getElementById("confirm-ok");
  field.hidden = !comment;
  input.value = "";
  error.hidden = true;
  ok.textContent = confirmText;
  ok.className = danger ? "btn btn-primary btn-danger-fill" : "btn btn-primary";
  return new Promise((resolve) => {
    const onOk = (ev) => {
      if (comment === "required" && !input.value.trim()) {
        ev.preventDefault();
        error.textContent = "A comment is required.";
        error.hidden = false;
        input.setAttribute("aria-invalid", "true");
        input.focus();
      }
    };
    ok.addEventListener("click", onOk);
    dlg.addEventListener("close", function onClose() {
      dlg.removeEventListener("close", onClose);
      ok.removeEventListener("click", onOk);
      input.removeAttribute("aria-invalid");
      resolve({ ok: dlg.returnValue === "ok", comment: input.value.trim() });
    });
    dlg.returnValue = "";
    dlg.showModal();
    if (comment) input.focus();
  });
}

/** Run fn at most once per `ms`, trailing. */
export function debounce(fn, ms = 200) {
  let t = null;
  return (...a) => { clearTimeout(t); t = setTimeout(() => fn(...a), ms); };
}

/**
 * Ask for one value in a modal form. `submit(value)` performs the action and may throw an ApiError;
 * its field error is shown under the input and the dialog stays open. Resolves true once submitted.
 */
export function askValue({ title, label, value = "", type = "number", min, step, confirmText = "Save", submit }) {
  const input = el("input", { type, name: "value", value: String(value), min, step, required: true, "data-testid": "ask-value" });
  const err = el("span", { class: "field-error", hidden: true });
  const ok = el("button", { class: "btn btn-primary", type: "submit" }, confirmText);
  const form = el("form", { method: "dialog" },
    el("h2", {}, title),
    el("label", { class: "field" }, label, input, err),
    el("div", { class: "dialog-actions" }, el("button", { class: "btn", type: "button", value: "cancel", onclick: () => dlg.close() }, "Cancel"), ok));
  const dlg = el("dialog", { class: "dialog" }, form);
  document.body.append(dlg);
  return new Promise((resolve) => {
    let done = false;
    form.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      err.hidden = true;
      input.removeAttribute("aria-invalid");
      ok.disabled = true;
      try {
        await submit(input.value);
        done = true;
        dlg.close();
      } catch (e) {
        const fe = e && e.fieldErrors ? Object.values(e.fieldErrors).flat().join(" ") : "";
        err.textContent = fe || (e && e.message) || String(e);
        err.hidden = false;
        input.setAttribute("aria-invalid", "true");
        input.focus();
      } finally { ok.disabled = false; }
    });
    dlg.addEventListener("close", () => { dlg.remove(); resolve(done); });
    dlg.showModal();
    input.select();
  });
}
