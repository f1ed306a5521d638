"""How ``unicron`` shows things: tables and details (rich), the API's JSON, and the ``watch`` display."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table
from rich.text import Text

from controlplane.cli.client import JSON, Page

TERMINAL_TASK_STATES = frozenset({"completed", "failed", "cancelled"})
STATE_STYLES = {
    # tasks
    "pending": "yellow",
    "running": "green",
    "reconfiguring": "cyan",
    "suspended": "magenta",
    "completed": "bold green",
    "failed": "bold red",
    "cancelled": "dim",
    # nodes
    "joining": "yellow",
    "healthy": "green",
    "suspect": "yellow",
    "isolated": "red",
    "lost": "bold red",
    "draining": "magenta",
    # alerts
    "open": "bold red",
    "acknowledged": "yellow",
    "resolved": "dim",
    # transitions
    "planned": "yellow",
    "in_progress": "cyan",
    "rolled_back": "red",
    # severities
    "sev1": "bold red",
    "sev2": "red",
    "sev3": "yellow",
}


class Output(StrEnum):
    TABLE = "table"
    JSON = "json"


PIPE_WIDTH = 200
"""Width of tables written to a pipe or file (no terminal to fit, and ``COLUMNS`` unset): wide enough
that names are not cut for ``grep``."""


def stdout() -> Console:
    width = None if sys.stdout.isatty() or os.environ.get("COLUMNS") else PIPE_WIDTH
    return Console(highlight=False, soft_wrap=False, width=width)


def stderr() -> Console:
    return Console(stderr=True, highlight=False, soft_wrap=True)


def print_json(value: object) -> None:
    """The API's JSON, unchanged, for scripts (one document; pretty only on a terminal)."""
    indent = 2 if sys.stdout.isatty() else None
    sys.stdout.write(json.dumps(value, indent=indent) + "\n")
    sys.stdout.flush()


def emit(output: Output, value: Any, render: Callable[[Any], None]) -> None:
    """What a command prints: the API's JSON with ``--output json``, else ``render(value)`` for people."""
    if output is Output.JSON:
        print_json(value)
    else:
        render(value)


def styled(value: object) -> Text:
    text = "" if value is None else str(value)
    return Text(text, style=STATE_STYLES.get(text, ""))


def when(value: object) -> str:
    """An ISO 8601 timestamp as ``YYYY-MM-DD HH:MM:SS`` in local time ('' for none)."""
    if not isinstance(value, str) or not value:
        return ""
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return value
    return moment.astimezone().strftime("%Y-%m-%d %H:%M:%S")


def seconds_between(start: object, end: object) -> str:
    """``end - start`` in seconds, two decimals ('' unless both are ISO 8601 timestamps)."""
    if not isinstance(start, str) or not isinstance(end, str):
        return ""
    try:
        began = datetime.fromisoformat(start.replace("Z", "+00:00"))
        ended = datetime.fromisoformat(end.replace("Z", "+00:00"))
    except ValueError:
        return ""
    return f"{(ended - began).total_seconds():.2f}"


def dash(value: object) -> str:
    return "-" if value is None else str(value)


def number(value: object, digits: int = 3) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.{digits}g}" if abs(value) < 1e5 else f"{value:.3e}"
    return str(value)


def workers(task: Mapping[str, Any]) -> str:
    held = len(task.get("allocations") or [])
    return f"{held} ({task.get('min_workers')}..{task.get('max_workers')})"


def progress_words(task: Mapping[str, Any]) -> str:
    iteration, total = task.get("iteration") or 0, task.get("total_iterations") or 0
    if not total:
        return str(iteration)
    return f"{iteration}/{total} ({100.0 * iteration / total:.1f}%)"


def _table(title: str, columns: Sequence[str], rows: Iterable[Sequence[RenderableType]]) -> Table:
    table = Table(title=title, title_justify="left", header_style="bold")
    for column in columns:
        table.add_column(column, no_wrap=column in ("ID", "Name", "State", "When"))
    for row in rows:
        table.add_row(*row)
    return table


def _footer(console: Console, page: Page, noun: str) -> None:
    shown = len(page["results"])
    if page["count"] > shown:
        console.print(f"{shown} of {page['count']} {noun} (use --limit / --offset for more)", style="dim")


# ---------------------------------------------------------------------------- tasks
def tasks_table(page: Page) -> None:
    console = stdout()
    rows: list[list[RenderableType]] = [
        [
            str(t["id"]),
            escape(str(t["name"])),
            styled(t["state"]),
            number(t.get("weight")),
            workers(t),
            progress_words(t),
            str(t.get("epoch", "")),
            escape(str(t.get("owner") or "")),
            escape(str(t.get("pending_reason") or "")),
        ]
        for t in page["results"]
    ]
    columns = ["ID", "Name", "State", "Weight", "Workers", "Iteration", "Epoch", "Owner", "Why pending"]
    console.print(_table(f"Tasks ({page['count']})", columns, rows))
    _footer(console, page, "tasks")


def task_detail(task: Mapping[str, Any]) -> None:
    console = stdout()
    facts = Table.grid(padding=(0, 2))
    facts.add_column(style="bold")
    facts.add_column()
    spec = (
        f"{task.get('num_layers')} layers, hidden {task.get('hidden_size')}, "
        f"{task.get('num_attention_heads')} heads, seq {task.get('seq_length')}, "
        f"vocab {task.get('vocab_size')}, global batch {task.get('global_batch_size')}, "
        f"micro batch {task.get('micro_batch_size')}"
        + (", activation recomputation" if task.get("activation_recomputation") else "")
    )
    for label, value in (
        ("Task", f"{task['id']} {escape(str(task['name']))}"),
        ("State", styled(task.get("state"))),
        ("Owner", escape(str(task.get("owner") or "—"))),
        ("Weight", number(task.get("weight"))),
        ("Workers", f"{workers(task)}, allocation unit {task.get('allocation_unit')}"),
        ("Iteration", progress_words(task)),
        ("Epoch", str(task.get("epoch"))),
        ("Model", spec),
        ("Pending because", escape(str(task.get("pending_reason") or ""))),
        ("Created", when(task.get("created_at"))),
        ("Updated", when(task.get("updated_at"))),
        ("Finished", when(task.get("finished_at"))),
    ):
        if value:
            facts.add_row(label, value)
    console.print(facts)
    allocations = task.get("allocations") or []
    if allocations:
        rows: list[list[RenderableType]] = [
            [
                str(a.get("rank")),
                escape(str(a.get("node"))),
                str(a.get("device_index")),
                str(a.get("role")),
                f"{a.get('tp_rank')}/{a.get('pp_rank')}/{a.get('dp_rank')}",
                str(a.get("epoch")),
            ]
            for a in allocations
        ]
        console.print(_table("Allocation", ["Rank", "Node", "Device", "Role", "TP/PP/DP", "Epoch"], rows))


def task_line(verb: str, task: Mapping[str, Any]) -> None:
    stdout().print(
        f"{verb} task {task['id']} {escape(str(task['name']))}: ",
        styled(task.get("state")),
        f", weight {number(task.get('weight'))}",
        sep="",
    )


# ---------------------------------------------------------------------------- nodes
def nodes_table(page: Page) -> None:
    console = stdout()
    rows: list[list[RenderableType]] = [
        [
            str(n["id"]),
            escape(str(n["name"])),
            styled(n["state"]),
            "yes" if n.get("quarantined") else "",
            str(n.get("device_count", "")),
            when(n.get("last_heartbeat_at")),
            escape(str(n.get("agent_version") or "")),
            escape(str(n.get("address") or "")),
        ]
        for n in page["results"]
    ]
    columns = ["ID", "Name", "State", "Quarantined", "Devices", "Last heartbeat", "Agent", "Address"]
    console.print(_table(f"Nodes ({page['count']})", columns, rows))
    _footer(console, page, "nodes")


def node_line(verb: str, node: Mapping[str, Any]) -> None:
    quarantine = "quarantined" if node.get("quarantined") else "not quarantined"
    stdout().print(
        f"{verb} node {node['id']} {escape(str(node['name']))}: ",
        styled(node.get("state")),
        f", {quarantine}",
        sep="",
    )


# ---------------------------------------------------------------------------- alerts
def alerts_table(page: Page) -> None:
    console = stdout()
    rows: list[list[RenderableType]] = []
    for a in page["results"]:
        handled = ""
        if a.get("resolved_by") or a.get("resolved_at"):
            handled = f"{a.get('resolved_by') or 'system'}: {a.get('resolve_comment') or ''}"
        elif a.get("acknowledged_by") or a.get("acknowledged_at"):
            handled = f"{a.get('acknowledged_by') or 'system'}: {a.get('acknowledge_comment') or ''}"
        rows.append(
            [
                str(a["id"]),
                styled(a.get("severity")),
                styled(a.get("state")),
                escape(str(a.get("node_name") or "")),
                when(a.get("created_at")),
                escape(str(a.get("message") or "")),
                escape(handled.rstrip(": ")),
            ]
        )
    columns = ["ID", "Severity", "State", "Node", "When", "Message", "Handled by"]
    console.print(_table(f"Alerts ({page['count']})", columns, rows))
    _footer(console, page, "alerts")


def alert_line(verb: str, alert: Mapping[str, Any]) -> None:
    stdout().print(
        f"{verb} alert {alert['id']} ({alert.get('severity')}, {escape(str(alert.get('message') or ''))}): ",
        styled(alert.get("state")),
        sep="",
    )


# ---------------------------------------------------------------------------- transitions
def transitions_table(page: Page) -> None:
    console = stdout()
    rows: list[list[RenderableType]] = []
    for t in page["results"]:
        took = seconds_between(t.get("started_at"), t.get("finished_at"))
        rows.append(
            [
                str(t["id"]),
                when(t.get("created_at")),
                f"{t.get('task')} {escape(str(t.get('task_name') or ''))}",
                str(t.get("kind") or ""),
                styled(t.get("state")),
                f"{dash(t.get('previous_epoch'))}→{dash(t.get('epoch'))}",
                f"{dash(t.get('old_workers'))}→{dash(t.get('new_workers'))}",
                took,
                escape(str(t.get("error") or "")),
            ]
        )
    columns = ["ID", "When", "Task", "Kind", "State", "Epoch", "Workers", "Took (s)", "Error"]
    console.print(_table(f"Transitions ({page['count']})", columns, rows))
    _footer(console, page, "transitions")


# ---------------------------------------------------------------------------- watch
@dataclass(frozen=True)
class WatchSample:
    """What one poll of ``tasks watch`` saw."""

    task: JSON
    iterations_per_s: float | None = None
    tokens_per_s: float | None = None
    trouble: str | None = None
    """Why the last poll failed (the display keeps the previous task and says it is retrying)."""

    @property
    def state(self) -> str:
        return str(self.task.get("state"))

    @property
    def loss(self) -> float | None:
        for key in ("loss", "last_loss"):
            value = self.task.get(key)
            if isinstance(value, int | float):
                return float(value)
        return None

    def words(self) -> str:
        """The sample as one line (the non-terminal form of the display)."""
        t = self.task
        parts = [
            f"task {t.get('id')}",
            str(t.get("state")),
            f"epoch {t.get('epoch')}",
            f"workers {len(t.get('allocations') or [])}",
            f"iteration {progress_words(t)}",
        ]
        if self.loss is not None:
            parts.append(f"loss {self.loss:.4g}")
        if self.iterations_per_s is not None:
            parts.append(f"{self.iterations_per_s:.2f} it/s")
        if self.tokens_per_s is not None:
            parts.append(f"{self.tokens_per_s:,.0f} tokens/s")
        if t.get("state") == "pending" and t.get("pending_reason"):
            parts.append(f"pending: {t.get('pending_reason')}")
        if self.trouble:
            parts.append(f"(retrying: {self.trouble})")
        return " | ".join(parts)

    def key(self) -> tuple[object, ...]:
        """What makes a new line worth printing when the output is not a terminal."""
        t = self.task
        return (
            t.get("state"),
            t.get("epoch"),
            t.get("iteration"),
            len(t.get("allocations") or []),
            self.trouble,
        )


class WatchView:
    """The live display of ``tasks watch``: a header, a progress bar toward the target iterations and
    the current figures. Render it in a ``rich.live.Live``; feed it with :meth:`update`."""

    def __init__(self, task: Mapping[str, Any]) -> None:
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(bar_width=None),
            MofNCompleteColumn(),
            TaskProgressColumn(),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            expand=True,
        )
        total = task.get("total_iterations") or None
        self.bar: TaskID = self.progress.add_task(
            "iterations", total=total, completed=task.get("iteration") or 0
        )
        self.sample = WatchSample(dict(task))

    def update(self, sample: WatchSample) -> None:
        self.sample = sample
        task = sample.task
        self.progress.update(
            self.bar, completed=task.get("iteration") or 0, total=task.get("total_iterations") or None
        )

    def __rich__(self) -> RenderableType:
        s = self.sample
        t = s.task
        header = Text.assemble(
            (f"Task {t.get('id')} ", "bold"),
            (str(t.get("name")), "bold"),
            "  ",
            styled(t.get("state")),
            f"  epoch {t.get('epoch')}  workers {workers(t)}",
        )
        nodes = sorted({str(a.get("node")) for a in t.get("allocations") or []})
        figures = Table.grid(padding=(0, 3))
        cells = [f"iteration {t.get('iteration')}"]
        if s.loss is not None:
            cells.append(f"loss {s.loss:.4g}")
        cells.append(f"{s.iterations_per_s:.2f} it/s" if s.iterations_per_s is not None else "— it/s")
        cells.append(f"{s.tokens_per_s:,.0f} tokens/s" if s.tokens_per_s is not None else "— tokens/s")
        for _ in cells:
            figures.add_column()
        figures.add_row(*cells)
        lines: list[RenderableType] = [header, self.progress, figures]
        if nodes:
            lines.append(Text("on " + ", ".join(nodes), style="dim"))
        if t.get("state") == "pending" and t.get("pending_reason"):
            lines.append(Text(f"pending: {t.get('pending_reason')}", style="yellow"))
        if s.trouble:
            lines.append(Text(f"retrying: {s.trouble}", style="red"))
        lines.append(Text("Ctrl-C stops watching (the task keeps running)", style="dim"))
        return Group(*lines)
