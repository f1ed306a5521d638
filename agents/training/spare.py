"""A warm spare worker: a process that has already paid for ``import torch`` / ``megatron.core``.

A fresh worker process spends 3-5 s importing torch and Megatron-Core before it can join a
transition (≈3.7 s for ``import megatron.core`` on the CPU box, notes/stack-facts.md). The
supervisor (:mod:`agents.supervisor`) therefore keeps a few spare processes per agent, started as
``python -m agents.training.spare`` with the agent's worker environment (``OMP_NUM_THREADS=1``, its
own session, ``PR_SET_PDEATHSIG``). A spare

1. imports everything the worker imports lazily (:func:`preload`) — and does nothing else: no
   process group, no model, no CPU compatibility layer (that is entered by the worker after its
   assignment, on its training thread);
2. connects to the agent's hook socket (``UNICRON_HOOK_SOCKET``) and announces itself
   (:class:`~agents.training.hook_protocol.SpareReady`: pid, import seconds, RSS);
3. blocks in one ``recv`` until the agent hands it an assignment: one
   :class:`~agents.training.hook_protocol.AssignOrder` whose ``env`` holds exactly the per-rank
   variables a freshly launched worker gets (``UNICRON_WORKER`` — the
   :class:`~agents.training.assignment.WorkerAssignment` JSON —, ``UNICRON_STACK_FILE``,
   ``UNICRON_RANK``, ``UNICRON_ELASTIC_WAIT_S`` and
   the agent's worker environment such as the snapshot directory);
4. takes that environment, points its stdout/stderr at the rank's log file, and from then on *is* the
   worker: :func:`agents.training.worker.run_assignment` on the same hook connection (the worker's
   ``hello`` with this pid binds it to its rank in the agent, which registered the pid before
   sending the assignment).

If the agent goes away the socket read returns EOF and the spare leaves (and ``PDEATHSIG`` kills it
anyway). Idle cost: one blocked thread and the resident memory of the imported modules (the spare
reports its RSS when it is ready; the agent logs it and lists it in ``spares.json``).
"""

from __future__ import annotations

import os
import socket
import sys
import time
from typing import Literal

from agents.training.hook import ENV_SOCKET, EXIT_HOOK_LOST
from agents.training.hook_protocol import AssignOrder, HookProtocolError, SpareReady, decode_order, encode
from controlplane.core.env import env_str

PRELOAD = (
    "torch",
    "torch.distributed",
    "torch.overrides",
    "psutil",
    "megatron.core",
    "megatron.core.parallel_state",
    "megatron.core.tensor_parallel",
    "megatron.core.transformer",
    "megatron.core.models.gpt",
    "megatron.core.models.gpt.gpt_layer_specs",
    "megatron.core.distributed",
    "megatron.core.optimizer",
    "megatron.core.pipeline_parallel",
    "megatron.core.dist_checkpointing",
    "agents.training.worker",
    "agents.training.trainer",
    "agents.training.provider",
    "agents.training.dataset",
    "megatron.core.datasets.gpt_dataset",
    "megatron.core.datasets.blended_megatron_dataset_builder",
    "agents.training.elastic",
    "agents.training.faults",
    "agents.training.data",
    "agents.training.snapshot",
    "agents.training.cpu_compat",
)
"""Modules a worker imports (most of them lazily, inside functions). Importing ``cpu_compat``
installs nothing: only its ``install``/``cpu_mode`` change torch, and the worker calls them."""


def preload() -> None:
    """Import what a worker needs, then take it out of the garbage collector's sight
    (:func:`agents.training.worker.freeze_imports`; forked spares inherit that)."""
    import importlib

    import torch

    torch.set_num_threads(1)
    for name in PRELOAD:
        importlib.import_module(name)
    from agents.training.worker import freeze_imports

    freeze_imports()


def rss_kb(pid: int | None = None) -> int:
    """Resident set size of a process in KiB (``VmRSS`` of ``/proc/PID/status``; 0 if unknown)."""
    try:
        with open(f"/proc/{pid or os.getpid()}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def wait_assignment(sock: socket.socket) -> tuple[AssignOrder, bytes]:
    """Block until the agent's assignment line arrives; returns it and any bytes after it."""
    buf = b""
    while b"\n" not in buf:
        try:
            chunk = sock.recv(65536)
        except OSError:
            os._exit(EXIT_HOOK_LOST)
        if not chunk:
            os._exit(EXIT_HOOK_LOST)  # the agent is gone (or stopped its spares)
        buf += chunk
    line, rest = buf.split(b"\n", 1)
    order = decode_order(line)
    if order.order != "assign":
        raise HookProtocolError(f"a spare expects an assign order, got a {order.order!r} order")
    return order, rest


def become_worker(assign: AssignOrder) -> None:
    """Take the rank's environment and log file, exactly as a freshly launched worker has them."""
    os.environ.update(assign.env)
    log_path = assign.log
    if log_path:
        sys.stdout.flush()
        sys.stderr.flush()
        fd = os.open(str(log_path), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)


def hook_socket_path() -> str:
    """The agent's hook socket, from the environment (a spare or zygote not started by an agent leaves)."""
    path = env_str(ENV_SOCKET)
    if not path:
        print(f"{ENV_SOCKET} is not set: spares are started by the agent", file=sys.stderr)
        os._exit(2)
    return path


def main() -> None:
    path = hook_socket_path()
    t0 = time.perf_counter()
    preload()
    serve(path, time.perf_counter() - t0)


def serve(path: str, ready_s: float, origin: Literal["exec", "zygote"] = "exec") -> None:
    """Announce this ready spare on the hook socket, wait for the assignment, then be the worker.
    ``origin``: ``exec`` (a process that imported everything itself) or ``zygote`` (forked from
    :mod:`agents.training.zygote`)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(path)
    hello = SpareReady(pid=os.getpid(), ready_s=round(ready_s, 3), rss_kb=rss_kb(), origin=origin)
    sock.sendall(encode(hello))
    print(
        f"[spare] pid {os.getpid()} ({origin}) ready after {ready_s:.3f} s, rss {hello.rss_kb} KiB",
        flush=True,
    )
    assign, rest = wait_assignment(sock)
    assigned_at = time.time()
    print(f"[spare] pid {os.getpid()} assigned, log {assign.log}", flush=True)
    become_worker(assign)
    from agents.training.worker import ENV_WORKER, run_assignment

    run_assignment(env_str(ENV_WORKER, "") or "", sock=sock, buffered=rest, assigned_at=assigned_at)


if __name__ == "__main__":
    main()
