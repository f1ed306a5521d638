"""The demo's workload and fault schedule, driven through the public REST API like a user would.

- :func:`submit_demo_tasks` submits three small GPT tasks with different weights (operator token),
  sized to the demo's workers by :func:`demo_tasks`: by default as training recipes on the shipped
  corpus (:func:`prepare_demo_corpus`, :func:`demo_recipe`: the CPython documentation, tokenized with a
  BPE tokenizer trained on it), so their training and validation loss fall on the dashboard; with
  ``data=None`` as bare model shapes on synthetic tokens.
- :class:`FaultSchedule` injects one fault per interval, cycling through every failure class
  (crash, exception, hang, network error, straggler, node loss), each on a node that runs a task.
- :class:`EventLog` prints what the control plane did: failure events (detector, severity, action,
  detection latency), plans and transitions (state, time, lost work, migration sources).

Everything here talks HTTP to the running server; nothing reaches into the database.
"""

from __future__ import annotations

import itertools
import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FAULT_CYCLE: tuple[str, ...] = ("crash", "exception", "network_error", "hang", "straggler", "node_loss")
"""Every failure class of docs/ARCHITECTURE.md §7.1-7.2, in the order the demo injects them."""

DEMO_TASKS: tuple[dict[str, Any], ...] = (
    {"name": "gpt-alpha", "weight": 3.0, "min_workers": 2, "max_workers": 4},
    {"name": "gpt-beta", "weight": 2.0, "min_workers": 2, "max_workers": 4},
    {"name": "gpt-gamma", "weight": 1.0, "min_workers": 1, "max_workers": 2},
)
"""The tasks on the full demo (8 workers): their minimums take 5, their maximums want 10."""
HALF_SIZE_DEMO_TASKS: tuple[dict[str, Any], ...] = (
    {"name": "gpt-alpha", "weight": 3.0, "min_workers": 1, "max_workers": 2},
    {"name": "gpt-beta", "weight": 2.0, "min_workers": 1, "max_workers": 2},
    {"name": "gpt-gamma", "weight": 1.0, "min_workers": 1, "max_workers": 2},
)
"""The same tasks with half the workers (a small host runs 4): minimums 3, maximums 6."""
TINY_GPT: dict[str, Any] = {
    "num_layers": 2,
    "hidden_size": 64,
    "num_attention_heads": 4,
    "seq_length": 32,
    "vocab_size": 128,
    "global_batch_size": 16,
    "micro_batch_size": 2,
}


DEMO_VOCAB = 2048
"""The demo corpus's trained BPE vocabulary."""


@dataclass(frozen=True)
class DemoData:
    """The prepared corpus the demo's recipes read. Every demo node runs on this machine, so a local
    path is a path every node of a task can read (on a cluster: a shared file system)."""

    prefix: str
    """Megatron indexed dataset path prefix (``.bin`` / ``.idx``)."""
    tokenizer: str
    vocab: int
    checkpoints: str
    """The directory under which each task's checkpoints go."""


def prepare_demo_corpus(root: Path, say: Callable[[str], None]) -> DemoData:
    """The demo corpus under ``root``: written and tokenized on first use (about ten seconds), reused
    after that (a prepared dataset is only replaced by a complete new one)."""
    from agents.data.corpus import write_corpus
    from agents.data.prepare import prepare

    prefix = root / "pydoc" / "pydoc"
    tokenizer = prefix.parent / "tokenizer.json"
    if not (tokenizer.is_file() and prefix.with_suffix(".idx").is_file()):
        say(f"preparing the demo corpus (CPython documentation) in {prefix.parent} ...")
        t0 = time.monotonic()
        corpus = write_corpus(root / "pydoc-corpus")
        phases: set[str] = set()

        def progress(phase: str, _n: int) -> None:
            if phase not in phases:
                phases.add(phase)
                say(f"  {phase} ...")

        summary = prepare(
            [corpus.path], prefix, train_vocab_size=DEMO_VOCAB, append_eod=True, progress=progress
        )
        say(
            f"demo corpus ready in {time.monotonic() - t0:.1f} s: {summary.documents} documents, "
            f"{summary.tokens:,} tokens, a {summary.vocab_size:,}-token BPE vocabulary"
        )
    return DemoData(str(prefix), str(tokenizer), DEMO_VOCAB, str(root / "checkpoints"))


def demo_recipe(name: str, data: DemoData) -> dict[str, Any]:
    """The recipe of demo task ``name``: :data:`TINY_GPT`'s shape on the demo corpus, AdamW with warm-up
    and cosine decay, validation every 50 iterations, a checkpoint every 200 (the newest 2 kept)."""
    return {
        "version": 1,
        "model": {
            "num_layers": TINY_GPT["num_layers"],
            "hidden_size": TINY_GPT["hidden_size"],
            "num_attention_heads": TINY_GPT["num_attention_heads"],
            "seq_length": TINY_GPT["seq_length"],
            "vocab_size": data.vocab,
        },
        "data": {
            "tokenizer": data.tokenizer,
            "blend": [{"path_prefix": data.prefix, "weight": 1.0}],
            "split": "98,2,0",
        },
        "optimizer": {"name": "adamw", "beta1": 0.9, "beta2": 0.95, "weight_decay": 0.01, "clip_grad": 1.0},
        "schedule": {"lr": 3e-3, "min_lr": 3e-4, "warmup_iterations": 20, "decay_style": "cosine"},
        # a directory of this submission's own: a restarted demo's new task never finds an old one's
        "checkpoint": {
            "directory": str(Path(data.checkpoints) / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"),
            "interval": 200,
            "keep": 2,
        },
        "eval": {"interval": 50, "iterations": 4},
        "seed": 1234,
        "train_iterations": 20_000,
        "global_batch_size": TINY_GPT["global_batch_size"],
        "micro_batch_size": TINY_GPT["micro_batch_size"],
    }


class ApiError(RuntimeError):
    pass


@dataclass
class Api:
    base: str
    token: str

    def call(self, method: str, path: str, body: Any = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(
            f"{self.base}/api/v1/{path}",
            data=data,
            method=method,
            headers={"Authorization": f"Token {self.token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            raise ApiError(
                f"{method} {path}: HTTP {exc.code} {exc.read().decode(errors='replace')}"
            ) from None
        return json.loads(raw) if raw else None

    def items(self, path: str) -> list[dict[str, Any]]:
        got = self.call("GET", path)
        return list(got["results"] if isinstance(got, dict) and "results" in got else got)


def demo_tasks(workers: int) -> tuple[dict[str, Any], ...]:
    """The demo tasks for ``workers`` devices: :data:`DEMO_TASKS` when their minimums leave some workers
    over (the planner then chooses who grows, and a node loss makes it choose again), otherwise
    :data:`HALF_SIZE_DEMO_TASKS` (on 4 workers the full-size minimums, 5, could never all run)."""
    if sum(int(t["min_workers"]) for t in DEMO_TASKS) < workers:
        return DEMO_TASKS
    return HALF_SIZE_DEMO_TASKS


def submit_demo_tasks(api: Api, workers: int, data: DemoData | None = None) -> list[dict[str, Any]]:
    """Submit the demo tasks for ``workers`` devices (:func:`demo_tasks`) unless tasks with those names
    are already active (a restarted demo): as recipes on ``data`` (:func:`demo_recipe`), or as bare
    shapes on synthetic tokens when ``data`` is None."""
    active = {
        t["name"]
        for t in api.items("tasks/?limit=200")
        if t["state"] not in ("completed", "failed", "cancelled")
    }
    made = []
    for spec in demo_tasks(workers):
        if spec["name"] in active:
            continue
        shape = {"recipe": demo_recipe(spec["name"], data)} if data is not None else TINY_GPT
        body = {**shape, **spec}
        made.append(api.call("POST", "tasks/", body))
    return made


@dataclass
class FaultSchedule:
    """One fault every ``every_s`` seconds, cycling through :data:`FAULT_CYCLE`."""

    api: Api
    every_s: float
    first_after_s: float = 45.0
    kinds: itertools.cycle[str] = field(default_factory=lambda: itertools.cycle(FAULT_CYCLE))
    next_at: float = 0.0

    def __post_init__(self) -> None:
        self.next_at = time.monotonic() + self.first_after_s

    def tick(self) -> str | None:
        """Inject the next fault if it is due; returns a line to print (or None)."""
        if time.monotonic() < self.next_at:
            return None
        self.next_at = time.monotonic() + self.every_s
        kind = next(self.kinds)
        target = self._target()
        if target is None:
            return f"fault drill {kind}: skipped (no running task with devices yet)"
        node_id, node_name, task, rank = target
        body: dict[str, Any] = {"fault": kind}
        if kind != "node_loss":
            body.update(task=task["id"], rank=rank)
        try:
            self.api.call("POST", f"nodes/{node_id}/inject-fault/", body)
        except ApiError as exc:
            return f"fault drill {kind} on {node_name}: refused ({exc})"
        where = f"{node_name}" if kind == "node_loss" else f"{node_name}, task {task['name']} rank {rank}"
        return f"fault drill: {kind} -> {where}"

    def _target(self) -> tuple[int, str, dict[str, Any], int] | None:
        tasks = [
            t for t in self.api.items("tasks/?limit=200") if t["state"] == "running" and t["allocations"]
        ]
        if not tasks:
            return None
        task = max(tasks, key=lambda t: (len(t["allocations"]), -t["id"]))
        alloc = task["allocations"][-1]  # the highest rank: rank 0 also hosts the rendezvous
        nodes = {n["name"]: n["id"] for n in self.api.items("nodes/?limit=500")}
        return nodes[alloc["node"]], alloc["node"], task, int(alloc["rank"])


@dataclass
class EventLog:
    """Prints new failure events and transitions as the control plane records them."""

    api: Api
    seen_events: set[int] = field(default_factory=set)
    transition_states: dict[int, str] = field(default_factory=dict)

    def poll(self) -> list[str]:
        lines: list[str] = []
        for ev in reversed(self.api.items("failure-events/?limit=20")):
            if ev["id"] in self.seen_events:
                continue
            self.seen_events.add(ev["id"])
            lines.append(
                f"failure #{ev['id']}: {ev['severity']} {ev['kind']} on {ev.get('node_name') or '-'}"
                f" by {ev['detector']} -> {ev['action']}"
            )
        for tr in reversed(self.api.items("transitions/?limit=20")):
            state = tr["state"]
            if self.transition_states.get(tr["id"]) == state:
                continue
            self.transition_states[tr["id"]] = state
            extra = ""
            if state in ("completed", "failed", "rolled_back"):
                sources = sorted({str(s) for s in (tr.get("migration_sources") or {}).values()})
                extra = (
                    f", {tr.get('old_workers')}->{tr.get('new_workers')} workers"
                    f", lost {tr.get('lost_microbatches', 0)} micro-batches"
                    f", sources {', '.join(sources) or '-'}"
                )
            lines.append(
                f"transition #{tr['id']} of task {tr['task']} -> epoch {tr['epoch']}: {state}{extra}"
            )
        return lines
