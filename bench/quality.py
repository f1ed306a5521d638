"""Self-healing costs no model quality: one recipe on the shipped corpus, trained failure-free and
again under a fault schedule, same seed, per-iteration loss compared (docs/EVALUATION.md).

    .venv/bin/python bench/quality.py                      # 300 iterations, about 10 minutes
    .venv/bin/python bench/quality.py --iterations 120     # quick run

Both runs are the whole system on a fresh database (PostgreSQL + Redis from ``DATABASE_URL`` /
``REDIS_URL``, daphne, a Celery worker with beat, ``--nodes`` agents x ``--devices`` CPU devices
running real Megatron-Core workers): the recipe (the example ``agents/data/recipes/tiny-gpt.yaml``
with its paths in the run directory and ``--iterations`` iterations) is submitted once, and the run
ends when the task is completed. The corpus is the demo's (``prepare_demo_corpus``: the CPython
documentation with a trained 2,048-token BPE tokenizer), prepared once under ``--data-dir``.

The faulty run injects, each when the task reaches its iteration (one every ``--gap`` iterations
after ``--first``), through the fault-drill path: a rank crash (SIGKILL), an exception in the
training step, a hang, a node loss (its agent and workers die: the task shrinks), the node's repair
``--repair-after`` seconds later (the task grows back), and a straggler on the highest rank.

Every worker records the loss of each micro-batch as it is computed (``UNICRON_LOSS_DIR``,
:mod:`agents.training.bench_knobs`); an iteration's training loss is the mean over its global
batch's micro-batches of the *latest* record of each (a recomputed micro-batch replaces the lost
one). The two runs are compared per micro-batch, bitwise, up to the first iteration computed in a different
layout than the failure-free run (another TP/PP/DP, or a micro-batch on another data-parallel rank:
restarts, retries and same-size moves keep the reduction order; a shrink or grow changes it — with
pipeline stages the gradient norm's sum over stages too), and as relative differences of the
iteration losses everywhere; the final validation losses are compared too.

Writes ``bench/results/quality.json``, ``bench/results/quality.md`` and
``docs/screenshots/quality-loss.png``. The database (``--database-url``, default
``$BENCH_DATABASE_URL`` or ``benchquality`` on the local PostgreSQL; the name must start with
``bench``) is dropped and re-created for each run and the Redis database flushed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from agents.training.bench_knobs import ENV_LOSS_DIR  # noqa: E402
from bench.recovery import WholeSystem, inject_ours, say, wait  # noqa: E402
from controlplane.config.demo_scenario import DemoData, prepare_demo_corpus  # noqa: E402

DEFAULT_DB = "postgresql://postgres@127.0.0.1:5432/benchquality"
DEFAULT_REDIS = "redis://127.0.0.1:6379/9"
RECIPE = REPO / "agents" / "data" / "recipes" / "tiny-gpt.yaml"
TASK = "quality"
FAULTS = ("crash", "exception", "hang", "node_loss", "straggler")
RESULTS = REPO / "bench" / "results"
PLOT = REPO / "docs" / "screenshots" / "quality-loss.png"


@dataclass
class Injected:
    kind: str
    at_iteration: int
    wall_s: float
    target: str


@dataclass
class Run:
    name: str
    records: dict[int, list[tuple[float, int, float, tuple[int, ...]]]] = field(default_factory=dict)
    """iteration -> every (time, micro-batch, loss, (tp, pp, dp, micro-batch size, data-parallel
    rank)) recorded for it, in every epoch that computed it."""
    validation: dict[int, float] = field(default_factory=dict)
    faults: list[Injected] = field(default_factory=list)
    wall_s: float = 0.0
    epochs: int = 0
    transitions: list[dict[str, Any]] = field(default_factory=list)

    def micro(self, it: int) -> dict[tuple[int, int], tuple[float, tuple[int, ...]]]:
        """The micro-batches that made iteration ``it``'s update: (micro-batch size, index) -> (loss,
        layout) of the latest record of each, among the records of the micro-batch size of the
        iteration's latest record (an epoch that recomputed the iteration with another micro-batch
        size replaces all of it; one with the same size replaces what it recomputed, the rest was
        kept)."""
        rows = self.records.get(it, [])
        if not rows:
            return {}
        size = max(rows)[3][3]
        out: dict[tuple[int, int], tuple[float, float, tuple[int, ...]]] = {}
        for t, mb, loss, where in rows:
            if where[3] == size and ((size, mb) not in out or out[(size, mb)][0] <= t):
                out[(size, mb)] = (t, loss, where)
        return {k: (loss, where) for k, (_, loss, where) in out.items()}

    def iteration_losses(self) -> dict[int, float]:
        """Per-token mean over the global batch (every micro-batch has the same number of tokens)."""
        out = {}
        for it in sorted(self.records):
            rows = self.micro(it)
            out[it] = sum(loss for _, (loss, _) in sorted(rows.items())) / len(rows)
        return out

    def layout_of(self, it: int) -> dict[tuple[int, int], tuple[int, ...]]:
        return {k: where for k, (_, where) in self.micro(it).items()}

    def redone(self) -> dict[int, int]:
        """Per epoch after the first: iterations recomputed (the newest iteration an earlier epoch had
        recorded, minus the epoch's first iteration, plus one)."""
        first: dict[int, int] = {}
        last: dict[int, int] = {}
        for it, rows in self.records.items():
            for _t, _mb, _loss, where in rows:
                e = where[-1]
                first[e] = min(first.get(e, it), it)
                last[e] = max(last.get(e, it), it)
        out = {}
        for e in sorted(first):
            before = [last[x] for x in last if x < e]
            if before:
                out[e] = max(max(before) - first[e] + 1, 0)
        return out


def read_losses(loss_dir: Path, run: Run) -> None:
    for path in sorted(loss_dir.glob("loss-p*.jsonl")):
        for line in path.read_text().splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut by a SIGKILL
            if "validation" in rec:
                run.validation[int(rec["it"])] = float(rec["validation"])
                continue
            where = (*(int(x) for x in rec["layout"]), int(rec["dp_rank"]), int(rec["epoch"]))
            run.records.setdefault(int(rec["it"]), []).append(
                (float(rec["t"]), int(rec["mb"]), float(rec["loss"]), where)
            )


def position(loss_dir: Path) -> int:
    """The highest iteration any micro-batch loss was recorded for (-1: none yet)."""
    top = -1
    for path in loss_dir.glob("loss-p*.jsonl"):
        with open(path, "rb") as f:
            f.seek(max(0, path.stat().st_size - 4096))
            for line in f.read().splitlines()[1:] or []:
                try:
                    top = max(top, int(json.loads(line).get("it", -1)))
                except (ValueError, json.JSONDecodeError):
                    continue
    return top


def recipe_for(args: argparse.Namespace, data: DemoData, ckpt: Path) -> dict[str, Any]:
    from controlplane.core.recipe import load_recipe

    recipe: dict[str, Any] = load_recipe(RECIPE.read_text(), "yaml").model_dump(mode="json")
    recipe["model"]["vocab_size"] = data.vocab
    recipe["data"]["tokenizer"] = data.tokenizer
    recipe["data"]["blend"] = [{"path_prefix": data.prefix, "weight": 1.0}]
    recipe["checkpoint"]["directory"] = str(ckpt)
    recipe["checkpoint"]["interval"] = max(args.iterations // 3, 1)
    recipe["eval"]["interval"] = args.eval_interval
    recipe["train_iterations"] = args.iterations
    recipe["seed"] = args.seed
    return recipe


def run_once(args: argparse.Namespace, name: str, work: Path, data: DemoData, faulty: bool) -> Run:
    run_dir = work / name
    loss_dir = run_dir / "losses"
    loss_dir.mkdir(parents=True)
    from django.apps import apps

    if apps.ready:  # the previous run's connection: the database is dropped under it
        from django.db import connections

        connections.close_all()
    WholeSystem.recreate_database(os.environ["DATABASE_URL"], os.environ["REDIS_URL"])
    sys_args = argparse.Namespace(
        checkpoint_every=0, pin="task", devices=args.devices, snapshots=True, agents=args.nodes
    )
    system = WholeSystem(sys_args, run_dir)
    system.system.settings[ENV_LOSS_DIR] = str(loss_dir)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", interactive=False, verbosity=0)
    from django.db import close_old_connections

    from controlplane.apps.fleet.models import Node
    from controlplane.apps.planning.models import Transition
    from controlplane.apps.training.services import TaskSubmission, do_submit_task
    from controlplane.core.recipe import recipe_from_mapping

    run = Run(name)
    try:
        system.start_services()
        nodes = [f"node-{i + 1}" for i in range(args.nodes)]
        for n in nodes:
            system.add_node(n)
        wait("healthy nodes", lambda: Node.objects.filter(state="healthy").count() >= len(nodes), 90)
        recipe = recipe_from_mapping(recipe_for(args, data, run_dir / "checkpoints"))
        workers = args.nodes * args.devices
        task = do_submit_task(
            None, TaskSubmission.from_recipe(TASK, recipe, min_workers=1, max_workers=workers)
        )
        say(f"{name}: task {task.pk} submitted ({args.iterations} iterations, up to {workers} workers)")
        t0 = time.time()
        plan = list(args.faults) if faulty else []
        target_it = args.first
        repair_due: float | None = None
        lost_node = ""
        last_say = 0.0
        while True:
            close_old_connections()
            task.refresh_from_db()
            if task.state in ("completed", "failed", "cancelled"):
                break
            now = time.time()
            if now - t0 > args.timeout:
                raise TimeoutError(f"{name}: the task did not complete in {args.timeout:.0f} s")
            pos = position(loss_dir)
            if now - last_say > 15:
                say(f"{name}: iteration {pos}, task {task.state} epoch {task.epoch}")
                last_say = now
            if plan and pos >= target_it and task.state == "running" and repair_due is None:
                kind = plan.pop(0)
                target = highest_rank(task.pk)
                if target is not None:
                    rank, node = target
                    inject_ours(kind, TASK, rank, node)
                    run.faults.append(Injected(kind, pos, now - t0, f"rank {rank} on {node}"))
                    say(f"{name}: {kind} -> rank {rank} on {node} at iteration {pos}")
                    if kind == "node_loss":
                        lost_node = node
                target_it = pos + args.gap
            if lost_node and repair_due is None and system.agent_exited(lost_node):
                repair_due = now + args.repair_after
                say(f"{name}: {lost_node} gone; repair in {args.repair_after:.0f} s")
            if repair_due is not None and now >= repair_due:
                system.start_agent(lost_node)
                run.faults.append(Injected("repair", pos, now - t0, lost_node))
                say(f"{name}: {lost_node} repaired (agent restarted): the task may grow")
                repair_due, lost_node = None, ""
                target_it = pos + args.gap
            system.supervise()
            time.sleep(0.3)
        run.wall_s = time.time() - t0
        run.epochs = task.epoch
        run.transitions = [
            {
                "epoch": tr.epoch,
                "kind": tr.kind,
                "state": tr.state,
                "workers": [tr.old_workers, tr.new_workers],
            }
            for tr in Transition.objects.filter(task=task).order_by("id")
        ]
        say(f"{name}: task {task.state} after {run.wall_s:.0f} s at epoch {task.epoch}")
        if task.state != "completed":
            raise SystemExit(f"{name}: the task ended {task.state}")
    finally:
        system.close()
    read_losses(loss_dir, run)
    return run


def highest_rank(task_pk: int) -> tuple[int, str] | None:
    from controlplane.apps.training.models import Allocation

    top = (
        Allocation.objects.filter(task_id=task_pk, active=True)
        .select_related("device__node")
        .order_by("-rank")
        .first()
    )
    return (top.rank, top.device.node.name) if top is not None else None


def compare(clean: Run, faulty: Run) -> dict[str, Any]:
    a, b = clean.iteration_losses(), faulty.iteration_losses()
    common = sorted(set(a) & set(b))
    missing = sorted(set(a) ^ set(b))

    def placed(run: Run, it: int) -> dict[tuple[int, int], tuple[int, ...]]:
        return {k: w[:5] for k, w in run.layout_of(it).items()}  # without the epoch

    first_reorder = next((it for it in common if placed(faulty, it) != placed(clean, it)), None)
    first_difference = next((it for it in common if a[it] != b[it]), None)
    until = first_reorder if first_reorder is not None else (common[-1] + 1 if common else 0)
    mismatched = [
        (it, key)
        for it in common
        if it < until
        for key, (loss, _) in clean.micro(it).items()
        if faulty.micro(it).get(key, (None,))[0] != loss
    ]
    rel = {it: abs(b[it] - a[it]) / abs(a[it]) for it in common}
    worst = max(rel, key=lambda it: rel[it]) if rel else None
    last_val = max(set(clean.validation) & set(faulty.validation), default=None)
    val_rel = (
        abs(faulty.validation[last_val] - clean.validation[last_val]) / abs(clean.validation[last_val])
        if last_val is not None
        else None
    )
    return {
        "iterations_compared": len(common),
        "iterations_missing": missing,
        "first_reorder_iteration": first_reorder,
        "bitwise_until_first_reorder": not mismatched and bool(common),
        "first_differing_iteration": first_difference,
        "micro_batches_differing_before_reorder": len(mismatched),
        "max_relative_loss_difference": rel[worst] if worst is not None else None,
        "max_relative_loss_difference_iteration": worst,
        "max_relative_loss_difference_after_reorder": max(
            (r for it, r in rel.items() if first_reorder is not None and it >= first_reorder), default=0.0
        ),
        "final_validation_iteration": last_val,
        "final_validation_loss_failure_free": clean.validation.get(last_val)
        if last_val is not None
        else None,
        "final_validation_loss_faulty": faulty.validation.get(last_val) if last_val is not None else None,
        "final_validation_loss_relative_difference": val_rel,
        "series": {
            "iteration": common,
            "failure_free": [a[it] for it in common],
            "faulty": [b[it] for it in common],
            "faulty_layout_tp_pp_dp_micro": [
                sorted({w[:4] for w in faulty.layout_of(it).values()}) for it in common
            ],
        },
        "iterations_redone_per_epoch": faulty.redone(),
        "first_training_loss": a[common[0]] if common else None,
        "last_training_loss": a[common[-1]] if common else None,
    }


def plot(clean: Run, faulty: Run, verdict: dict[str, Any], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    a, b = clean.iteration_losses(), faulty.iteration_losses()
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 6), sharex=True, height_ratios=[3, 1])
    top.plot(list(a), list(a.values()), label="failure-free", color="#1f77b4", linewidth=1.6)
    top.plot(list(b), list(b.values()), label="under faults", color="#d62728", linewidth=0.9, linestyle="--")
    for kind, xs in (("failure-free", clean.validation), ("under faults", faulty.validation)):
        top.scatter(
            list(xs),
            list(xs.values()),
            s=22,
            marker="o" if kind == "failure-free" else "x",
            label=f"validation ({kind})",
            color="#1f77b4" if kind == "failure-free" else "#d62728",
        )
    for f in faulty.faults:
        top.axvline(f.at_iteration, color="#888", linewidth=0.7, linestyle=":")
        top.annotate(
            f.kind,
            (f.at_iteration, top.get_ylim()[1]),
            rotation=90,
            fontsize=7,
            va="top",
            ha="right",
            color="#555",
        )
    top.set_ylabel("training loss (nats/token)")
    top.legend(fontsize=8)
    kinds = ", ".join(f.kind.replace("_", " ") for f in faulty.faults) or "no faults"
    top.set_title(f"Same recipe and seed: failure-free vs {kinds}")
    common = sorted(set(a) & set(b))
    bottom.semilogy(
        common, [max(abs(b[i] - a[i]) / abs(a[i]), 1e-12) for i in common], color="#555", linewidth=0.8
    )
    if verdict["first_reorder_iteration"] is not None:
        bottom.axvline(verdict["first_reorder_iteration"], color="#d62728", linewidth=0.8)
    bottom.set_ylabel("relative diff\n(1e-12 = equal)")
    bottom.set_xlabel("iteration")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)


def write_report(args: argparse.Namespace, clean: Run, faulty: Run, verdict: dict[str, Any]) -> None:
    faults = [f.__dict__ for f in faulty.faults]
    out = {
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "host": {"cpus": os.cpu_count(), "python": platform.python_version(), "load": os.getloadavg()},
        "recipe": str(RECIPE.relative_to(REPO)),
        "iterations": args.iterations,
        "nodes": args.nodes,
        "devices_per_node": args.devices,
        "seed": args.seed,
        "faults_injected": len([f for f in faulty.faults if f.kind != "repair"]),
        "faults": faults,
        **verdict,
        "runs": {
            r.name: {"wall_s": round(r.wall_s, 1), "epochs": r.epochs, "transitions": r.transitions}
            for r in (clean, faulty)
        },
        "command": "python bench/quality.py " + " ".join(sys.argv[1:]),
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "quality.json").write_text(json.dumps(out, indent=2) + "\n")

    def fmt(x: Any) -> str:
        return f"{x:.3g}" if isinstance(x, float) else str(x)

    lines = [
        "# Model quality under faults",
        "",
        f"`{out['command']}` — {args.nodes} nodes x {args.devices} CPU devices, the example recipe "
        f"(`{out['recipe']}`) for {args.iterations} iterations, seed {args.seed}, measured "
        f"{out['measured_at']} (load {', '.join(f'{x:.1f}' for x in out['host']['load'])}).",
        "",
        "| fault | at iteration | target |",
        "|---|---:|---|",
        *[f"| {f.kind} | {f.at_iteration} | {f.target} |" for f in faulty.faults],
        "",
        "| figure | value |",
        "|---|---:|",
        *[
            f"| {k} | {fmt(verdict[k])} |"
            for k in (
                "iterations_compared",
                "first_reorder_iteration",
                "bitwise_until_first_reorder",
                "first_differing_iteration",
                "micro_batches_differing_before_reorder",
                "max_relative_loss_difference",
                "max_relative_loss_difference_iteration",
                "final_validation_iteration",
                "final_validation_loss_failure_free",
                "final_validation_loss_faulty",
                "final_validation_loss_relative_difference",
                "first_training_loss",
                "last_training_loss",
            )
        ],
        f"| wall time failure-free / faulty (s) | {clean.wall_s:.0f} / {faulty.wall_s:.0f} |",
        f"| epochs failure-free / faulty | {clean.epochs} / {faulty.epochs} |",
        "",
        f"![loss curves](../../docs/screenshots/{PLOT.name})",
        "",
    ]
    (RESULTS / "quality.md").write_text("\n".join(lines))


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--iterations", type=int, default=300)
    p.add_argument("--nodes", type=int, default=2)
    p.add_argument("--devices", type=int, default=2)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument(
        "--faults",
        type=lambda v: [k for k in v.split(",") if k],
        default=list(FAULTS),
        help=f"comma-separated fault kinds in order (default {','.join(FAULTS)})",
    )
    p.add_argument("--keep", type=Path, help="copy both runs' directories (loss records, logs) here")
    p.add_argument("--first", type=int, default=25, help="iteration of the first fault")
    p.add_argument("--gap", type=int, default=30, help="iterations between faults (after recovery)")
    p.add_argument("--repair-after", type=float, default=10.0)
    p.add_argument("--eval-interval", type=int, default=50)
    p.add_argument("--timeout", type=float, default=1200.0, help="seconds per run")
    p.add_argument("--data-dir", type=Path, default=Path(tempfile.gettempdir()) / "unicron-quality-data")
    p.add_argument("--database-url", default=os.environ.get("BENCH_DATABASE_URL", DEFAULT_DB))
    p.add_argument("--redis-url", default=os.environ.get("BENCH_REDIS_URL", DEFAULT_REDIS))
    args = p.parse_args()
    unknown = [k for k in args.faults if k not in FAULTS]
    if unknown:
        raise SystemExit(f"--faults: unknown kind(s) {', '.join(unknown)} (known: {', '.join(FAULTS)})")
    if not urlparse(args.database_url).path.lstrip("/").startswith("bench"):
        raise SystemExit("--database-url: the database name must start with 'bench' (it is dropped)")
    os.environ["DATABASE_URL"], os.environ["REDIS_URL"] = args.database_url, args.redis_url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.config.settings")
    data = prepare_demo_corpus(args.data_dir, say)
    with tempfile.TemporaryDirectory(prefix="unicron-quality-") as tmp:
        work = Path(tmp)
        clean = run_once(args, "failure-free", work, data, faulty=False)
        faulty = run_once(args, "faulty", work, data, faulty=True)
        if args.keep is not None:
            shutil.copytree(
                work, args.keep, symlinks=True, dirs_exist_ok=True, ignore=shutil.ignore_patterns("*.sock")
            )
    verdict = compare(clean, faulty)
    plot(clean, faulty, verdict, PLOT)
    write_report(args, clean, faulty, verdict)
    say(
        "quality: "
        + json.dumps(
            {
                k: verdict[k]
                for k in (
                    "bitwise_until_first_reorder",
                    "first_reorder_iteration",
                    "max_relative_loss_difference",
                    "final_validation_loss_relative_difference",
                )
            }
        )
    )
    say(f"wrote {RESULTS / 'quality.json'}, {RESULTS / 'quality.md'}, {PLOT}")


if __name__ == "__main__":
    main()
