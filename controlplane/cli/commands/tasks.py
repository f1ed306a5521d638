"""``unicron tasks ...``: submit, list, show, watch, reprioritise and cancel training tasks."""

from __future__ import annotations

import json
import sys
import time
from collections import deque
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from rich.live import Live

from controlplane.cli.client import JSON, ApiError, ExitCode, UnicronClient
from controlplane.cli.common import (
    LimitOption,
    OffsetOption,
    OutputOption,
    open_client,
    usage_problem,
)
from controlplane.cli.render import (
    TERMINAL_TASK_STATES,
    Output,
    WatchSample,
    WatchView,
    emit,
    print_json,
    stdout,
    task_detail,
    task_line,
    tasks_table,
)

app = typer.Typer(
    help="Training tasks: submit, list, show, watch, reprioritise, cancel.", no_args_is_help=True
)

TASK_STATES = ("pending", "running", "reconfiguring", "suspended", "completed", "failed", "cancelled")
TaskId = Annotated[int, typer.Argument(min=1, help="The task's id.", show_default=False)]


def load_spec(path: str) -> dict[str, Any]:
    """A task spec from a YAML or JSON file (``-``: standard input); exit 2 if it cannot be read."""
    source = "standard input" if path == "-" else path
    text = read_text(path)
    try:
        spec = json.loads(text) if path.endswith(".json") else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        kind = "JSON" if path.endswith(".json") else "YAML"
        raise usage_problem(f"{source} is not valid {kind}: {exc}") from exc
    if not isinstance(spec, dict):
        raise usage_problem(
            f"{source} must hold one mapping of task fields (name, num_layers, hidden_size, ...), "
            f"not {type(spec).__name__}"
        )
    return spec


def read_text(path: str) -> str:
    """A file's text (``-``: standard input); exit 2 if it cannot be read."""
    try:
        return sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        source = "standard input" if path == "-" else path
        raise usage_problem(f"cannot read {source}: {exc.strerror}") from exc


@app.command("submit")
def submit(
    ctx: typer.Context,
    file: Annotated[
        str | None,
        typer.Option(
            "--file",
            "-f",
            help="The task spec: YAML or JSON (by the .json suffix), '-' for standard input. Fields are "
            "those of POST /api/v1/tasks/: name, and recipe or the shape fields num_layers, hidden_size, "
            "num_attention_heads, seq_length, vocab_size, global_batch_size, micro_batch_size; optional "
            "activation_recomputation, weight, min_workers, max_workers, allocation_unit, total_iterations.",
            show_default=False,
        ),
    ] = None,
    recipe: Annotated[
        str | None,
        typer.Option(
            "--recipe",
            "-r",
            help="A training recipe (docs/DATA.md), YAML or JSON, '-' for standard input; the server "
            "checks it and names every bad field. Instead of --file.",
            show_default=False,
        ),
    ] = None,
    name: Annotated[
        str | None, typer.Option("--name", help="With --recipe: the task's name (default: the file's stem).")
    ] = None,
    weight: Annotated[
        float | None, typer.Option("--weight", help="With --recipe: the priority w(t).")
    ] = None,
    min_workers: Annotated[int | None, typer.Option("--min-workers", min=1, help="With --recipe.")] = None,
    max_workers: Annotated[int | None, typer.Option("--max-workers", min=1, help="With --recipe.")] = None,
    output: OutputOption = Output.TABLE,
) -> None:
    """Submit a training task (operator): a recipe (--recipe) or a task spec (--file). A bad recipe or a
    spec that can never fit the cluster is refused with the API's field errors (exit 1)."""
    if (file is None) == (recipe is None):
        raise usage_problem("give exactly one of --file and --recipe")
    if recipe is not None:
        stem = "recipe" if recipe == "-" else Path(recipe).stem
        scheduling = {"weight": weight, "min_workers": min_workers, "max_workers": max_workers}
        spec: dict[str, Any] = {"name": name or stem, "recipe": read_text(recipe)}
        spec.update({k: v for k, v in scheduling.items() if v is not None})
    else:
        assert file is not None
        spec = load_spec(file)
    with open_client(ctx) as client:
        task = client.submit_task(spec)
    emit(output, task, partial(task_line, "Submitted"))


@app.command("list")
def list_(
    ctx: typer.Context,
    state: Annotated[
        list[str] | None,
        typer.Option(
            "--state", "-s", help=f"Only tasks in this state (repeatable): {', '.join(TASK_STATES)}."
        ),
    ] = None,
    name: Annotated[str | None, typer.Option("--name", help="Only tasks whose name contains this.")] = None,
    owner: Annotated[str | None, typer.Option("--owner", help="Only tasks of this user.")] = None,
    limit: LimitOption = 50,
    offset: OffsetOption = 0,
    output: OutputOption = Output.TABLE,
) -> None:
    """List training tasks."""
    with open_client(ctx) as client:
        page = client.list_tasks(state or (), name, owner, limit, offset)
    emit(output, page, tasks_table)


@app.command("show")
def show(ctx: typer.Context, task_id: TaskId, output: OutputOption = Output.TABLE) -> None:
    """Show one task: state, weight, workers, progress, model and where its ranks run."""
    with open_client(ctx) as client:
        task = client.get_task(task_id)
    emit(output, task, task_detail)


@app.command("weight")
def weight(
    ctx: typer.Context,
    task_id: TaskId,
    value: Annotated[float, typer.Argument(help="The new weight w(t) >= 0.", show_default=False)],
    output: OutputOption = Output.TABLE,
) -> None:
    """Reprioritise a task: set its weight w(t) in the cluster's WAF (operator)."""
    with open_client(ctx) as client:
        task = client.change_weight(task_id, value)
    emit(output, task, partial(task_line, "Reweighted"))


@app.command("cancel")
def cancel(ctx: typer.Context, task_id: TaskId, output: OutputOption = Output.TABLE) -> None:
    """Cancel a task and release its devices (operator)."""
    with open_client(ctx) as client:
        task = client.cancel_task(task_id)
    emit(output, task, partial(task_line, "Cancelled"))


class Watcher:
    """Polls one task and measures its progress: iterations per second over the last ``window_s``
    (reset when the iteration counter goes back, after a rollback) and the latest tokens/s sample."""

    def __init__(self, client: UnicronClient, task_id: int, window_s: float = 10.0) -> None:
        self.client = client
        self.task_id = task_id
        self.window_s = window_s
        self.seen: deque[tuple[float, int]] = deque()

    def iterations_per_s(self, iteration: int) -> float | None:
        now = time.monotonic()
        if self.seen and iteration < self.seen[-1][1]:
            self.seen.clear()
        self.seen.append((now, iteration))
        while len(self.seen) > 2 and now - self.seen[0][0] > self.window_s:
            self.seen.popleft()
        (t0, i0), (t1, i1) = self.seen[0], self.seen[-1]
        return (i1 - i0) / (t1 - t0) if t1 - t0 >= 0.5 else None

    def tokens_per_s(self, task: JSON) -> float | None:
        if task.get("state") not in ("running", "reconfiguring"):
            return None
        since = (datetime.now(UTC) - timedelta(seconds=15)).isoformat()
        try:
            series = self.client.task_series(self.task_id, "tokens_per_s", since=since, max_points=1)
        except ApiError:
            return None  # a figure, not the point of the watch: its absence shows as a dash
        points = series.get("points") or []
        value = points[-1].get("value") if points else None
        return float(value) if isinstance(value, int | float) else None

    def sample(self) -> WatchSample:
        task = self.client.get_task(self.task_id)
        return WatchSample(
            task, self.iterations_per_s(int(task.get("iteration") or 0)), self.tokens_per_s(task)
        )


@app.command("watch")
def watch(
    ctx: typer.Context,
    task_id: TaskId,
    interval: Annotated[float, typer.Option("--interval", min=0.2, help="Seconds between polls.")] = 1.0,
    give_up_after: Annotated[
        float,
        typer.Option(
            "--give-up-after",
            min=0.0,
            help="Seconds the server may stay unreachable (or failing) before watch exits 4.",
        ),
    ] = 60.0,
    output: OutputOption = Output.TABLE,
) -> None:
    """Follow a task live until it ends: iteration (with a progress bar toward its target iterations),
    loss when reported, throughput, state, epoch and workers, polled every --interval seconds.

    On a terminal the display updates in place; otherwise one line is printed per change (with
    --output json, the task's JSON, one object per line). Exit 0 when the task completes, 5 when it
    fails or is cancelled, 130 on Ctrl-C (the task keeps running)."""
    with open_client(ctx) as client:
        watcher = Watcher(client, task_id)
        first = watcher.sample()  # not found / refused / unreachable: exit at once
        try:
            last = _follow(watcher, first, interval, give_up_after, output)
        except KeyboardInterrupt:
            stdout().print(f"Stopped watching task {task_id}; it keeps running.", style="dim")
            raise typer.Exit(130) from None
    state = last.state
    if output is not Output.JSON:
        style = "bold green" if state == "completed" else "bold red"
        stdout().print(
            f"Task {task_id} {state} at iteration {last.task.get('iteration')} "
            f"(epoch {last.task.get('epoch')}).",
            style=style,
        )
    raise typer.Exit(ExitCode.OK if state == "completed" else ExitCode.TASK_FAILED)


def _follow(
    watcher: Watcher, first: WatchSample, interval: float, give_up_after: float, output: Output
) -> WatchSample:
    """Poll until the task is in a terminal state; returns the last sample."""
    console = stdout()
    live_display = output is Output.TABLE and console.is_terminal
    view = WatchView(first.task)
    printed: tuple[object, ...] | None = None

    def show(sample: WatchSample) -> None:
        nonlocal printed
        if live_display:
            view.update(sample)
            return
        if sample.key() == printed:
            return
        printed = sample.key()
        if output is Output.JSON:
            print_json(sample.task)
        else:
            stamp = datetime.now().strftime("%H:%M:%S")
            console.print(f"{stamp} {sample.words()}", markup=False, soft_wrap=True)

    def loop(sample: WatchSample) -> WatchSample:
        failing_since: float | None = None
        while True:
            show(sample)
            if sample.state in TERMINAL_TASK_STATES:
                return sample
            time.sleep(interval)
            try:
                sample = watcher.sample()
                failing_since = None
            except ApiError as exc:
                if not exc.transient:
                    raise
                now = time.monotonic()
                failing_since = failing_since or now
                if now - failing_since > give_up_after:
                    raise
                sample = WatchSample(sample.task, None, None, exc.message)

    if not live_display:
        return loop(first)
    view.update(first)
    with Live(view, console=console, refresh_per_second=4, transient=False):
        return loop(first)
