"""The spare zygote: imports torch and Megatron-Core once, then forks warm spares in milliseconds.

A warm spare (:mod:`agents.training.spare`) started as a fresh process imports torch and Megatron-Core
before it is ready: 3.6 s on a quiet CPU box, 27-37 s on a loaded 2-core one, every time a spare is
used and replaced, on the cores the training shares. The zygote pays that once per agent. The agent
starts it like a spare (``python -m agents.training.zygote``, the worker environment, its own session,
``PR_SET_PDEATHSIG``, the worker nice value) with two pipes:

- it says :class:`~agents.training.zygote_protocol.ZygoteReady` on its stdout when its imports are done;
- for each :class:`~agents.training.zygote_protocol.ForkRequest` line on its stdin it forks a spare and
  answers :class:`~agents.training.zygote_protocol.Forked` (or
  :class:`~agents.training.zygote_protocol.ForkFailed`); EOF on stdin: it leaves.

A spare is forked twice (zygote → intermediate → spare, the intermediate exits at once), so the spare
is re-parented to the agent, which made itself a child subreaper (:func:`agents.prctl.become_subreaper`):
the agent waits for it and reads its exit status like that of any process it started. The spare waits
until it is the agent's child, sets its own ``PR_SET_PDEATHSIG`` (after the re-parenting, or the
intermediate's exit would fire it), starts its own session (the agent signals a worker's process group),
points stdout/stderr at its log and continues as an ordinary spare (:func:`agents.training.spare.serve`)
with ``origin: zygote``.

Forking is safe here because the zygote is single-threaded when it forks: it has imported modules and
done nothing else (no process group, no CUDA context, ``torch.set_num_threads(1)``); each fork checks
both (one thread, ``torch.cuda.is_initialized()`` false) and refuses otherwise, and the agent then starts
fresh spare processes. The CUDA case has not yet run on a GPU node. Python's ``random`` is reseeded in
each child; the worker seeds torch itself from its assignment.
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from typing import TextIO

from agents.prctl import die_with_parent
from agents.training.hook import EXIT_HOOK_LOST
from agents.training.spare import hook_socket_path, preload, rss_kb, serve
from agents.training.zygote_protocol import (
    Forked,
    ForkFailed,
    ZygoteAnswer,
    ZygoteReady,
    decode_request,
    encode,
)

ADOPTION_TIMEOUT_S = 5.0
"""A forked spare that is not the agent's child this long after the fork leaves (exit code 3): the
agent is gone or is not a subreaper."""
EXIT_NOT_ADOPTED = 3


def threads() -> int:
    return len(os.listdir("/proc/self/task"))


def fork_spare(log_path: str, agent_pid: int, hook_path: str, reply_fd: int = -1) -> int:
    """Fork a spare that ends up the agent's child; returns its pid (the zygote's side only).
    ``reply_fd``: the zygote's reply pipe, which the spare closes."""
    if threads() != 1:
        raise RuntimeError(f"the zygote has {threads()} threads; forking it is unsafe")
    import torch

    if torch.cuda.is_initialized():
        raise RuntimeError("the zygote initialised CUDA; a forked child could not use it")
    sys.stdout.flush()
    sys.stderr.flush()
    t0 = time.perf_counter()
    rfd, wfd = os.pipe()
    mid = os.fork()
    if mid == 0:  # the intermediate: fork the spare, tell its pid, leave (the spare is orphaned)
        code = 0
        try:
            os.close(rfd)
            pid = os.fork()
            if pid == 0:
                os.close(wfd)
                _become_spare(log_path, agent_pid, hook_path, t0, reply_fd)  # never returns
            os.write(wfd, str(pid).encode())
        except BaseException:  # the zygote reads no pid and reports the error
            code = 1
        os._exit(code)
    os.close(wfd)
    os.waitpid(mid, 0)
    with os.fdopen(rfd, "rb") as fh:
        raw = fh.read()
    if not raw:
        raise RuntimeError("the intermediate process did not report the spare's pid")
    return int(raw)


def _become_spare(log_path: str, agent_pid: int, hook_path: str, t0: float, reply_fd: int) -> None:
    code = 1
    try:
        fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        if reply_fd >= 0:
            os.close(reply_fd)
        deadline = time.monotonic() + ADOPTION_TIMEOUT_S
        while os.getppid() != agent_pid:
            if time.monotonic() > deadline:
                print(f"[spare] not adopted by the agent {agent_pid} (parent {os.getppid()})", flush=True)
                os._exit(EXIT_NOT_ADOPTED)
            time.sleep(0.002)
        die_with_parent()
        if os.getppid() != agent_pid:  # the agent died between the check and the prctl
            os._exit(EXIT_HOOK_LOST)
        os.setsid()
        serve(hook_path, time.perf_counter() - t0, origin="zygote")
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # a spare's failure goes to its log, the agent sees the exit
        traceback.print_exc()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _reply(out: TextIO, answer: ZygoteAnswer) -> None:
    out.write(encode(answer).decode())
    out.flush()


def main() -> None:
    hook_path = hook_socket_path()
    agent_pid = os.getppid()
    die_with_parent()
    # Replies go to the pipe that was stdout; stray prints of the imports go to the log (stderr).
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    t0 = time.perf_counter()
    preload()
    ready_s = time.perf_counter() - t0
    print(f"[zygote] pid {os.getpid()} ready after {ready_s:.2f} s, rss {rss_kb()} KiB", flush=True)
    _reply(out, ZygoteReady(ready_s=round(ready_s, 3), pid=os.getpid(), rss_kb=rss_kb()))
    for line in sys.stdin:
        try:
            log_path = decode_request(line).log
            pid = fork_spare(log_path, agent_pid, hook_path, out.fileno())
        except Exception as exc:  # the agent falls back to fresh spare processes
            print(f"[zygote] fork failed: {type(exc).__name__}: {exc}", flush=True)
            _reply(out, ForkFailed(error=f"{type(exc).__name__}: {exc}"))
            continue
        print(f"[zygote] forked spare {pid} -> {log_path}", flush=True)
        _reply(out, Forked(pid=pid))


if __name__ == "__main__":
    main()
