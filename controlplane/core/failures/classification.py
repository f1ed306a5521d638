"""Failure classification (docs/ARCHITECTURE.md §7.2): evidence → severity → action, table-driven and pure.

API:
- :class:`Evidence` — what a detector saw (detector kind, exit code / signal, exception type and
  message, node / device / task, time, and whether it happened during a recovery action).
- :data:`RULES` — the ordered table of :class:`Rule` rows; the first matching row wins.
- :func:`classify_evidence` — the table alone; :func:`classify` — the table plus the escalation
  policy over the failure history (:class:`EscalationPolicy`, :class:`FailureRecord`).
- :class:`Blame` — whether evidence is a *cause* (this rank failed) or a *consequence* (a collective
  broke because a peer failed); only causes build a node's or device's failure history.
- :func:`should_quarantine` — the node quarantine rule.
- :func:`reclassify` — re-run the whole pipeline over stored evidence in time order.

Unknown evidence lands on :data:`DEFAULT_RULE`: sev2 / restart the processes — the safe middle: it
never ignores a failure and never isolates hardware on no evidence; repetition escalates it.
"""

from __future__ import annotations

import re
import signal as _signal
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, TypeVar


class Severity(StrEnum):
    SEV1 = "sev1"
    """Hardware / node: isolate and re-plan."""
    SEV2 = "sev2"
    """Process level: restart the task's processes in place."""
    SEV3 = "sev3"
    """Transient: retry the step in place."""


class Action(StrEnum):
    RETRY_IN_PLACE = "retry_in_place"
    RESTART_PROCESSES = "restart_processes"
    ISOLATE_AND_REPLAN = "isolate_and_replan"
    FAIL_TASK = "fail_task"
    """The task cannot run anywhere (its recipe is unusable): it fails, nothing is restarted."""


ACTION_FOR: dict[Severity, Action] = {
    Severity.SEV3: Action.RETRY_IN_PLACE,
    Severity.SEV2: Action.RESTART_PROCESSES,
    Severity.SEV1: Action.ISOLATE_AND_REPLAN,
}


class DetectorKind(StrEnum):
    """The four in-band detectors of §5.1 (the statistical one has two verdicts)."""

    HEARTBEAT = "heartbeat"
    PROCESS_EXIT = "process_exit"
    EXCEPTION = "exception"
    HANG = "hang"
    STRAGGLER = "straggler"


class Blame(StrEnum):
    """Whether evidence blames the place that reported it."""

    CAUSE = "cause"
    """This rank's own process died, hung, raised in its own code or straggled, or its hardware failed."""
    CONSEQUENCE = "consequence"
    """A collective broke because a peer failed (a connection reset or closed by the peer, a collective
    timeout, a gloo transport EOF), or rank 0 found the epoch's rendezvous port taken by another process:
    acted on for the task, never evidence against this node or device."""


class Category(StrEnum):
    NODE = "node"
    HARDWARE = "hardware"
    NETWORK = "network"
    PROCESS = "process"
    RESOURCE = "resource"
    USER = "user"
    PERFORMANCE = "performance"
    UNKNOWN = "unknown"


NOT_HARDWARE = frozenset({Category.USER, Category.RESOURCE})
"""Categories whose repetition says nothing about the node (a bug or an OOM follows the task, not the
device), so they are never escalated to isolation."""


@dataclass(frozen=True, slots=True)
class Evidence:
    detector: str
    exit_code: int | None = None
    signal: int | None = None
    exception_type: str | None = None
    message: str = ""
    node: str | None = None
    device: int | None = None
    task_id: str | None = None
    occurred_at: float = 0.0
    during_recovery: Action | None = None
    """Set when this failure struck while executing ``during_recovery`` for an earlier failure of the
    same task (a failed retry or restart)."""

    @property
    def text(self) -> str:
        return f"{self.exception_type or ''}: {self.message}"

    def to_json(self) -> dict[str, Any]:
        return {
            "detector": str(self.detector),
            "exit_code": self.exit_code,
            "signal": self.signal,
            "exception_type": self.exception_type,
            "message": self.message,
            "node": self.node,
            "device": self.device,
            "task_id": self.task_id,
            "occurred_at": self.occurred_at,
            "during_recovery": None if self.during_recovery is None else str(self.during_recovery),
        }

    @classmethod
    def from_json(cls, data: object) -> Evidence:
        """Parse stored evidence; :class:`ValueError` naming the field when it is malformed."""
        d = _object(data, "evidence")
        during = d.get("during_recovery")
        return cls(
            detector=_field(d, "detector", str, required=True),
            exit_code=_field(d, "exit_code", int),
            signal=_field(d, "signal", int),
            exception_type=_field(d, "exception_type", str),
            message=_field(d, "message", str) or "",
            node=_field(d, "node", str),
            device=_field(d, "device", int),
            task_id=_field(d, "task_id", str),
            occurred_at=float(_field(d, "occurred_at", (int, float)) or 0.0),
            during_recovery=None if during is None else _enum(Action, during, "evidence.during_recovery"),
        )


def _object(data: object, what: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise ValueError(f"{what}: expected an object, got {type(data).__name__}")
    return data


def _field(d: dict[str, Any], name: str, kind: type | tuple[type, ...], required: bool = False) -> Any:
    value = d.get(name)
    if value is None:
        if required:
            raise ValueError(f"{name}: missing")
        return None
    if isinstance(value, bool) or not isinstance(value, kind):
        raise ValueError(f"{name}: expected {kind}, got {value!r}")
    return value


_E = TypeVar("_E", bound=StrEnum)


def _enum(kind: type[_E], value: object, name: str) -> _E:
    try:
        if isinstance(value, str):
            return kind(value)
    except ValueError:
        pass
    raise ValueError(f"{name}: {value!r} is not one of {[str(m) for m in kind]}")


@dataclass(frozen=True, slots=True)
class Rule:
    """One row: every given condition must hold (AND); ``None`` means "any"."""

    name: str
    severity: Severity
    category: Category
    reason: str
    detectors: frozenset[str] | None = None
    pattern: str | None = None
    """Regex searched (case-insensitive) in ``"<exception type>: <message>"``."""
    exception_types: frozenset[str] | None = None
    """Exception class names (the last dotted component is compared)."""
    exit_codes: frozenset[int] | None = None
    signals: frozenset[int] | None = None
    blame: Blame = Blame.CAUSE
    fails_task: bool = False
    """The row's evidence fails the task (:data:`Action.FAIL_TASK`) whatever its severity."""
    _regex: re.Pattern[str] | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.pattern is not None:
            object.__setattr__(self, "_regex", re.compile(self.pattern, re.IGNORECASE))

    @property
    def action(self) -> Action:
        return Action.FAIL_TASK if self.fails_task else ACTION_FOR[self.severity]

    def matches(self, ev: Evidence) -> bool:
        if self.detectors is not None and ev.detector not in self.detectors:
            return False
        if self._regex is not None and not self._regex.search(ev.text):
            return False
        if self.exception_types is not None and (
            ev.exception_type is None or ev.exception_type.rsplit(".", 1)[-1] not in self.exception_types
        ):
            return False
        if self.exit_codes is not None and ev.exit_code not in self.exit_codes:
            return False
        return self.signals is None or _signal_of(ev) in self.signals


def _signal_of(ev: Evidence) -> int | None:
    """The terminating signal: explicit, negative Popen return codes, or shell-style 128+N codes."""
    if ev.signal is not None:
        return ev.signal
    if ev.exit_code is not None and ev.exit_code < 0:
        return -ev.exit_code
    if ev.exit_code is not None and 128 < ev.exit_code < 160:
        return ev.exit_code - 128
    return None


_S = DetectorKind
PORT_IN_USE = "rendezvous-port-in-use"
"""The row of a rendezvous port found taken: every retry draws a fresh port, so a repeated collision is
not a failed recovery and never escalates."""
_CRASH_SIGNALS = frozenset({_signal.SIGSEGV, _signal.SIGBUS, _signal.SIGABRT, _signal.SIGILL, _signal.SIGFPE})

HANG = "hang"
"""The row of a rank stuck past the hang threshold in its own work (a cause: its device or code)."""
HANG_IN_COLLECTIVE = "hang-in-collective"
"""The row of a rank hung while waiting for its peers (in the gradient all-reduce after its micro-batches,
or blocked in a collective or a pipeline send/receive): the network (a cut link between healthy nodes) or
a peer failed, so the verdict is a consequence. The agent says so (``HangVerdict.in_collective``), and
the control plane's evidence message then ends with :data:`HANG_IN_COLLECTIVE_MESSAGE`."""
HANG_IN_COLLECTIVE_MESSAGE = "waiting in a collective for its peers"

RECIPE_UNUSABLE = "recipe-unusable"
"""The row of a recipe the worker cannot use: its model provider cannot be imported, is not callable or
builds no Megatron-Core module (``ProviderError``), or its data cannot be read (``DatasetError``). Every
node and every restart would fail the same way: the task fails at once (:func:`fails_the_task`), and
neither the node nor the device is blamed."""
TASK_FAILURES = frozenset({RECIPE_UNUSABLE})
"""The rows whose evidence fails the task instead of recovering it."""

RULES: tuple[Rule, ...] = (
    # --- the task itself: a recipe no node can run ---------------------------------------------------
    Rule(RECIPE_UNUSABLE, Severity.SEV2, Category.USER,
         "the recipe names a model provider or data the worker cannot use: the task fails "
         "(a restart would fail the same way)",
         detectors=frozenset({_S.EXCEPTION}),
         exception_types=frozenset({"ProviderError", "DatasetError"}),
         blame=Blame.CONSEQUENCE, fails_task=True),
    # --- sev1: node and hardware ----------------------------------------------------------------
    Rule("node-heartbeat-lost", Severity.SEV1, Category.NODE,
         "agent heartbeats stopped: node crash, agent death or partition",
         detectors=frozenset({_S.HEARTBEAT})),
    # NVIDIA Xid catalog (docs.nvidia.com/deploy/xid-errors): 48 DBE ECC, 62 micro-controller halt,
    # 63/64 row-remap event/failure, 74 NVLink error, 79 fallen off the bus, 92 high single-bit ECC
    # rate, 94/95 contained/uncontained ECC, 119/120 GSP errors, 140 unrecovered ECC. Kernel log form:
    # "NVRM: Xid (PCI:0000:3b:00): 79, pid=..., GPU has fallen off the bus." Other Xids (13, 31, 43:
    # application faults) fall through to the process-level rows.
    Rule("gpu-xid-hardware", Severity.SEV1, Category.HARDWARE, "GPU Xid that indicates failing hardware",
         pattern=r"\bXid\b(?:\s*\([^)]*\))?\s*:?\s*(48|62|63|64|74|79|92|94|95|119|120|140)\b"),
    Rule("gpu-ecc", Severity.SEV1, Category.HARDWARE, "uncorrectable memory (ECC) error on the device",
         pattern=r"uncorrectable ECC|ECC error|double[- ]bit|cudaErrorECCUncorrectable"),
    Rule("gpu-nvlink", Severity.SEV1, Category.HARDWARE, "NVLink error",
         pattern=r"NVLink.{0,40}(error|fail|down)"),
    Rule("gpu-lost", Severity.SEV1, Category.HARDWARE, "device disappeared or became unavailable",
         pattern=r"fallen off the bus|no CUDA-capable device"
                 r"|CUDA-capable device\(s\) (is|are) busy or unavailable"),
    Rule("straggler", Severity.SEV1, Category.PERFORMANCE,
         "rank persistently slower than its peers: isolate so the planner weighs running without it",
         detectors=frozenset({_S.STRAGGLER})),
    # --- sev3: transient network ------------------------------------------------------------------
    # Rank 0's TCPStore could not listen on the epoch's port (torch: "DistNetworkError: The server socket
    # has failed to listen on any local network address. port: N, ..., name: EADDRINUSE"). Ahead of
    # connection-error, which the same exception type would match.
    Rule(PORT_IN_USE, Severity.SEV3, Category.NETWORK,
         "the epoch's rendezvous port is held by another process on rank 0's node: "
         "retry at a fresh port (not the node's failure)",
         pattern=r"EADDRINUSE|address already in use",
         blame=Blame.CONSEQUENCE),
    Rule("collective-timeout", Severity.SEV3, Category.NETWORK, "one collective timed out",
         pattern=r"collective operation timeout|Watchdog caught collective|NCCL.{0,60}timed? ?out",
         blame=Blame.CONSEQUENCE),
    Rule("connection-error", Severity.SEV3, Category.NETWORK, "transient connection error",
         exception_types=frozenset({"ConnectionResetError", "ConnectionRefusedError",
                                    "ConnectionAbortedError", "BrokenPipeError", "DistNetworkError",
                                    "DistStoreError"}),
         blame=Blame.CONSEQUENCE),
    Rule("connection-message", Severity.SEV3, Category.NETWORK, "transient connection error (from message)",
         pattern=r"connection reset|connection refused|broken pipe|connection closed by|socket timeout"
                 r"|remote process exited or there was a network error",
         blame=Blame.CONSEQUENCE),
    Rule("network-link", Severity.SEV3, Category.NETWORK, "this node's network link failed",
         pattern=r"NET/IB|link (is )?(down|flap)"),
    Rule("gloo-transport", Severity.SEV3, Category.NETWORK, "gloo transport error",
         pattern=r"gloo.{0,80}(connection|timed out|read error|write error|EOF)",
         blame=Blame.CONSEQUENCE),
    Rule(HANG_IN_COLLECTIVE, Severity.SEV3, Category.NETWORK,
         "the rank waited in a collective for its peers past the hang threshold: its peers or the link "
         "to them failed, not this rank (repeat the step)",
         detectors=frozenset({_S.HANG}), pattern=re.escape(HANG_IN_COLLECTIVE_MESSAGE),
         blame=Blame.CONSEQUENCE),
    Rule(HANG, Severity.SEV3, Category.NETWORK,
         "iteration exceeded the hang threshold (stuck collective): "
         "abort the communicator and repeat the step",
         detectors=frozenset({_S.HANG})),
    # --- sev2: process level ----------------------------------------------------------------------
    Rule("cuda-oom", Severity.SEV2, Category.RESOURCE, "device out of memory",
         pattern=r"CUDA out of memory|OutOfMemoryError"),
    Rule("cuda-error", Severity.SEV2, Category.PROCESS, "CUDA runtime error in the process",
         pattern=r"CUDA error|illegal memory access|cudaError|CUBLAS_STATUS|CUDNN_STATUS|device-side assert"),
    Rule("nccl-error", Severity.SEV2, Category.PROCESS, "NCCL error (communicator unusable)",
         pattern=r"NCCL error|ncclInternalError|ncclSystemError|ncclUnhandledCudaError|ncclInvalidUsage"),
    Rule("killed", Severity.SEV2, Category.RESOURCE,
         "worker killed by SIGKILL (the host's OOM killer, an operator, or its agent after a hang verdict)",
         signals=frozenset({_signal.SIGKILL})),
    Rule("crash-signal", Severity.SEV2, Category.PROCESS, "worker crashed on a fatal signal",
         signals=_CRASH_SIGNALS),
    Rule("user-exception", Severity.SEV2, Category.USER, "exception in the training code",
         detectors=frozenset({_S.EXCEPTION}),
         exception_types=frozenset({"ValueError", "KeyError", "TypeError", "AssertionError", "IndexError",
                                    "AttributeError", "NameError", "ZeroDivisionError", "FileNotFoundError",
                                    "NotImplementedError", "ImportError", "ModuleNotFoundError"})),
    Rule("worker-exited", Severity.SEV2, Category.PROCESS, "worker exited with a non-zero code",
         detectors=frozenset({_S.PROCESS_EXIT}), exit_codes=frozenset(range(1, 256))),
    Rule("worker-exited-early", Severity.SEV2, Category.PROCESS, "worker exited 0 before the task completed",
         detectors=frozenset({_S.PROCESS_EXIT}), exit_codes=frozenset({0})),
)  # fmt: skip

DEFAULT_RULE = Rule(
    "default",
    Severity.SEV2,
    Category.UNKNOWN,
    "no rule matched: restart the processes (safe default — never ignores a failure, never isolates "
    "hardware without evidence; repetition escalates it)",
)


@dataclass(frozen=True, slots=True)
class Classification:
    severity: Severity
    action: Action
    category: Category
    rule: str
    reason: str
    escalated_from: Severity | None = None
    blame: Blame = Blame.CAUSE

    def to_json(self) -> dict[str, Any]:
        return {
            "severity": str(self.severity),
            "action": str(self.action),
            "category": str(self.category),
            "rule": self.rule,
            "reason": self.reason,
            "escalated_from": None if self.escalated_from is None else str(self.escalated_from),
            "blame": str(self.blame),
        }

    @classmethod
    def from_json(cls, data: object) -> Classification:
        """Parse a stored classification; :class:`ValueError` naming the field when it is malformed."""
        d = _object(data, "classification")
        escalated = d.get("escalated_from")
        return cls(
            severity=_enum(Severity, d.get("severity"), "classification.severity"),
            action=_enum(Action, d.get("action"), "classification.action"),
            category=_enum(Category, d.get("category"), "classification.category"),
            rule=_field(d, "rule", str, required=True),
            reason=_field(d, "reason", str) or "",
            escalated_from=None
            if escalated is None
            else _enum(Severity, escalated, "classification.escalated_from"),
            blame=_enum(Blame, d.get("blame", blame_of_rule(str(d.get("rule")))), "classification.blame"),
        )


def fails_the_task(c: Classification) -> bool:
    """Whether a classification fails its task outright (:data:`Action.FAIL_TASK`, the rows of
    :data:`TASK_FAILURES`) instead of recovering."""
    return c.action is Action.FAIL_TASK or c.rule.replace("_", "-") in TASK_FAILURES


def blame_of_rule(rule: str) -> Blame:
    """The blame of a table row by its name (``-`` or ``_`` separated); a cause for any other name
    (the default row, the orchestrator's own events)."""
    name = rule.replace("_", "-")
    return next((r.blame for r in RULES if r.name == name), Blame.CAUSE)


@dataclass(frozen=True, slots=True)
class FailureRecord:
    """A past failure as stored: its evidence and how it was classified."""

    evidence: Evidence
    classification: Classification


@dataclass(frozen=True, slots=True)
class EscalationPolicy:
    """§5.2 escalation: a failed retry → sev2; a failed restart or a sev2 recurring on the same device
    within ``recurrence_window_s`` → sev1; ``sev3_repeat_count`` sev3 on one node within the window →
    sev2 (retries are not helping). Quarantine: ``quarantine_sev1_count`` sev1 on one node within
    ``quarantine_window_s`` keeps it out until an operator clears it."""

    recurrence_window_s: float = 3600.0
    sev2_repeat_count: int = 2
    sev3_repeat_count: int = 3
    quarantine_sev1_count: int = 2
    quarantine_window_s: float = 7 * 24 * 3600.0


def classify_evidence(ev: Evidence, rules: Sequence[Rule] = RULES) -> Classification:
    """The table alone: the first matching row, or the safe default."""
    rule = next((r for r in rules if r.matches(ev)), DEFAULT_RULE)
    return Classification(rule.severity, rule.action, rule.category, rule.name, rule.reason, blame=rule.blame)


def _escalate(c: Classification, to: Severity, why: str) -> Classification:
    return replace(
        c, severity=to, action=ACTION_FOR[to], escalated_from=c.severity, reason=f"{c.reason}; {why}"
    )


def classify(
    ev: Evidence,
    history: Iterable[FailureRecord] = (),
    policy: EscalationPolicy | None = None,
    rules: Sequence[Rule] = RULES,
) -> Classification:
    """Table lookup, then escalation over the history (records before ``ev``).

    Only causes escalate by repetition, and only causes are counted: a consequence (a peer's failure
    seen through a collective) is acted on at its table severity, or escalated because the recovery it
    was part of failed, but never up to isolating the place that merely saw it. A rendezvous port found
    taken is retried at a fresh port however often it happens (:data:`PORT_IN_USE`)."""
    policy = policy or EscalationPolicy()
    c = classify_evidence(ev, rules)
    if c.rule == PORT_IN_USE:
        return c
    hardware_possible = c.category not in NOT_HARDWARE
    cause = c.blame is Blame.CAUSE
    restart_failed = ev.during_recovery is Action.RESTART_PROCESSES
    if restart_failed and c.severity is not Severity.SEV1 and hardware_possible:
        if cause:
            return _escalate(c, Severity.SEV1, "the restart failed")
        if c.severity is Severity.SEV3:
            return _escalate(c, Severity.SEV2, "the restart failed (a peer's failure seen here)")
    if ev.during_recovery is Action.RETRY_IN_PLACE and c.severity is Severity.SEV3:
        c = _escalate(c, Severity.SEV2, "the retry in place failed")
    if not cause:
        return c
    recent = [
        r
        for r in history
        if r.evidence.node == ev.node
        and r.classification.blame is Blame.CAUSE
        and 0 <= ev.occurred_at - r.evidence.occurred_at <= policy.recurrence_window_s
    ]
    if c.severity is Severity.SEV2 and hardware_possible and ev.node is not None:
        same_device = [
            r
            for r in recent
            if r.evidence.device == ev.device
            and r.classification.severity is Severity.SEV2
            and r.classification.category not in NOT_HARDWARE
        ]
        if len(same_device) + 1 >= policy.sev2_repeat_count:
            return _escalate(
                c, Severity.SEV1, f"sev2 #{len(same_device) + 1} on {ev.node}/{ev.device} within the window"
            )
    if c.severity is Severity.SEV3 and ev.node is not None:
        sev3 = [
            r
            for r in recent
            if r.classification.severity is Severity.SEV3 and r.classification.escalated_from is None
        ]
        if len(sev3) + 1 >= policy.sev3_repeat_count:
            c = _escalate(c, Severity.SEV2, f"sev3 #{len(sev3) + 1} on {ev.node} within the window")
    return c


def escalate_on_probation(c: Classification) -> Classification:
    """A cause that could be the hardware, on a device or node returned to service on probation,
    isolates it again at once: it was given its chance."""
    if c.blame is not Blame.CAUSE or c.category in NOT_HARDWARE or c.severity is Severity.SEV1:
        return c
    return _escalate(c, Severity.SEV1, "it failed again while on probation after an isolation")


def should_quarantine(
    node: str, history: Iterable[FailureRecord], now: float, policy: EscalationPolicy | None = None
) -> tuple[bool, str]:
    """Whether ``node`` keeps failing enough to be quarantined until an operator clears it.

    Only evidence against the node counts: a cause, and not a liveness verdict (heartbeats that stopped:
    a crashed or frozen agent, a partition). A lost node is re-planned around without being isolated;
    its losses are no more a reason to keep it out for good."""
    policy = policy or EscalationPolicy()
    hits = [
        r
        for r in history
        if r.evidence.node == node
        and r.classification.severity is Severity.SEV1
        and r.classification.blame is Blame.CAUSE
        and r.evidence.detector != DetectorKind.HEARTBEAT
        and 0 <= now - r.evidence.occurred_at <= policy.quarantine_window_s
    ]
    if len(hits) >= policy.quarantine_sev1_count:
        rules = ", ".join(sorted({r.classification.rule for r in hits}))
        return True, f"{len(hits)} sev1 failures on {node} within {policy.quarantine_window_s:.0f}s ({rules})"
    return False, f"{len(hits)} sev1 failures on {node} within the window (< {policy.quarantine_sev1_count})"


def reclassify(
    evidence: Iterable[Evidence], policy: EscalationPolicy | None = None, rules: Sequence[Rule] = RULES
) -> list[FailureRecord]:
    """Re-run classification and escalation over stored evidence, in time order."""
    out: list[FailureRecord] = []
    for ev in sorted(evidence, key=lambda e: e.occurred_at):
        out.append(FailureRecord(ev, classify(ev, out, policy, rules)))
    return out
