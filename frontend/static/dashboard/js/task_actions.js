// Operator actions on a task, shared by the list and the detail page (the API enforces the role).
import { api, askValue, confirmAction, toast } from "./core.js";
import { EP } from "./endpoints.js";

export async function changeWeight(t, after) {
  const done = await askValue({
    title: `Change the weight of ${t.name}`,
    label: `Weight w(t) ≥ 0 (currently ${t.weight}); the planner re-plans all tasks.`,
    value: t.weight, min: 0, step: 0.1,
    submit: async (v) => {
      if (v.trim() === "" || !Number.isFinite(Number(v)) || Number(v) < 0) throw new Error("Weight must be a number ≥ 0.");
      await api(EP.taskWeight(t.id), { method: "POST", body: { weight: Number(v) } });
    },
  });
  if (done) { toast(`Weight of ${t.name} changed.`, { kind: "ok" }); after(); }
}

export async function cancelTask(t, after) {
  const { ok } = await confirmAction({ title: `Cancel ${t.name}?`, body: "Its workers are stopped and its devices released. This cannot be undone.", confirmText: "Cancel task", danger: true });
  if (!ok) return;
  try {
    await api(EP.taskCancel(t.id), { method: "POST", body: {} });
    toast(`${t.name} cancelled.`, { kind: "ok" });
    after();
  } catch (e) { toast(e.message, { kind: "error" }); }
}

