"""UNICRON_CPU_BIND=task: a CPU worker's threads run on the core of its task, rebound when a transition
hands the process another task; a bad value is refused by name (worker and agent)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from agents.settings import ENV_CPU_BIND, cpu_bind_mode
from agents.training.cpu_bind import bind_task, core_for_task

REPO = Path(__file__).resolve().parents[2]

PROBE = """
import json, os, threading
from agents.training.cpu_bind import bind_task
stop = threading.Event()
early = threading.Thread(target=stop.wait)  # a thread that exists before the binding (like gloo's)
early.start()
def masks():
    return sorted({tuple(sorted(os.sched_getaffinity(int(t)))) for t in os.listdir("/proc/self/task")})
out = {"allowed": sorted(os.sched_getaffinity(0))}
out["core1"] = bind_task("1")
out["masks1"] = masks()
late = threading.Thread(target=stop.wait)  # started after: inherits the binding
late.start()
out["masks1_late"] = masks()
out["core2"] = bind_task("2")  # a warm spare reused for task 2: chosen among the original cores
out["masks2"] = masks()
stop.set()
print(json.dumps(out))
"""


def test_a_task_keeps_its_core_whatever_its_ranks() -> None:
    assert [core_for_task(t, (2, 5)) for t in ("1", "2", "3", "4")] == [5, 2, 5, 2]
    assert core_for_task("7", (3,)) == 3
    name = "gpt-alpha"  # a non-numeric id (the torchrun baseline's) by its CRC-32
    assert core_for_task(name, (0, 1, 2)) == (0, 1, 2)[zlib.crc32(name.encode()) % 3]
    with pytest.raises(ValueError, match="no cores"):
        core_for_task("1", ())


def test_unset_or_none_leaves_affinity_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    before = os.sched_getaffinity(0)
    monkeypatch.delenv(ENV_CPU_BIND, raising=False)
    assert cpu_bind_mode() == "none"
    assert bind_task("1") is None
    monkeypatch.setenv(ENV_CPU_BIND, "None ")
    assert bind_task("0") is None
    assert os.sched_getaffinity(0) == before


def test_a_bad_value_is_refused_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_CPU_BIND, "rank")
    with pytest.raises(ValueError, match=r"UNICRON_CPU_BIND='rank' is not one of none, task"):
        bind_task("1")
    from agents.cli import main

    with pytest.raises(SystemExit, match=r"UNICRON_CPU_BIND='rank'"):
        main(["--coordinator", "ws://127.0.0.1:9/ws/agent/", "--token", "t", "--devices", "1"])


def test_every_thread_follows_the_task_and_another_task_rebinds() -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO), **{ENV_CPU_BIND: "task"})
    done = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=60, check=True
    )
    out = json.loads(done.stdout)
    allowed = out["allowed"]
    assert out["core1"] == allowed[1 % len(allowed)]
    assert out["masks1"] == [[out["core1"]]]  # the thread started before the binding too
    assert out["masks1_late"] == [[out["core1"]]]
    assert out["core2"] == allowed[2 % len(allowed)]
    assert out["masks2"] == [[out["core2"]]]


NICE_PROBE = """
import os
from agents.supervisor import _prepare_child
before = os.nice(0)
_prepare_child()  # what the agent runs in every worker and spare before exec
print(before, os.nice(0))
"""


def test_workers_start_at_the_configured_nice_value() -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO), UNICRON_WORKER_NICE="7")
    done = subprocess.run(
        [sys.executable, "-c", NICE_PROBE], env=env, capture_output=True, text=True, timeout=60, check=True
    )
    before, after = (int(x) for x in done.stdout.split())
    assert after == min(19, before + 7)


@pytest.mark.parametrize(
    ("raw", "message"), [("-5", "between 0 and 19"), ("20", "between 0 and 19"), ("x", "integer")]
)
def test_a_bad_nice_value_is_refused_by_name(monkeypatch: pytest.MonkeyPatch, raw: str, message: str) -> None:
    from agents.cli import main
    from agents.settings import worker_nice

    monkeypatch.setenv("UNICRON_WORKER_NICE", raw)
    with pytest.raises(ValueError, match=message):
        worker_nice()
    with pytest.raises(SystemExit, match="UNICRON_WORKER_NICE"):
        main(["--coordinator", "ws://127.0.0.1:9/ws/agent/", "--token", "t", "--devices", "1"])
