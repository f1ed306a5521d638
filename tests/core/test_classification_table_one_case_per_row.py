import signal

import pytest

from controlplane.core.failures import (
    HANG_IN_COLLECTIVE_MESSAGE,
    RULES,
    Action,
    Blame,
    DetectorKind,
    Evidence,
    Severity,
    classify,
    classify_evidence,
)

EX = DetectorKind.EXCEPTION
CASES: dict[str, tuple[Evidence, Severity, Action]] = {
    "recipe-unusable": (
        Evidence(
            EX,
            exception_type="agents.training.provider.ProviderError",
            message="model.provider: cannot import 'mypkg.models' "
            "(ModuleNotFoundError: No module named 'mypkg')",
        ),
        Severity.SEV2,
        Action.FAIL_TASK,
    ),
    "node-heartbeat-lost": (
        Evidence(DetectorKind.HEARTBEAT, node="n1"),
        Severity.SEV1,
        Action.ISOLATE_AND_REPLAN,
    ),
    "gpu-xid-hardware": (
        Evidence(EX, message="NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus."),
        Severity.SEV1,
        Action.ISOLATE_AND_REPLAN,
    ),
    "gpu-ecc": (
        Evidence(
            EX, exception_type="RuntimeError", message="CUDA error: uncorrectable ECC error encountered"
        ),
        Severity.SEV1,
        Action.ISOLATE_AND_REPLAN,
    ),
    "gpu-nvlink": (
        Evidence(EX, message="NVLink: fatal error detected on link 3"),
        Severity.SEV1,
        Action.ISOLATE_AND_REPLAN,
    ),
    "gpu-lost": (
        Evidence(EX, exception_type="RuntimeError", message="CUDA error: no CUDA-capable device is detected"),
        Severity.SEV1,
        Action.ISOLATE_AND_REPLAN,
    ),
    "straggler": (Evidence(DetectorKind.STRAGGLER, node="n2"), Severity.SEV1, Action.ISOLATE_AND_REPLAN),
    "collective-timeout": (
        Evidence(
            EX,
            exception_type="RuntimeError",
            message="[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=41, "
            "OpType=ALLREDUCE) ran for 600000 milliseconds before timing out.",
        ),
        Severity.SEV3,
        Action.RETRY_IN_PLACE,
    ),
    "rendezvous-port-in-use": (
        Evidence(
            EX,
            exception_type="torch.distributed.DistNetworkError",
            message="The server socket has failed to listen on any local network address. port: 20417, "
            "useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use",
        ),
        Severity.SEV3,
        Action.RETRY_IN_PLACE,
    ),
    "connection-error": (
        Evidence(EX, exception_type="ConnectionResetError", message="[Errno 104]"),
        Severity.SEV3,
        Action.RETRY_IN_PLACE,
    ),
    "connection-message": (
        Evidence(EX, exception_type="RuntimeError", message="recv failed: Connection reset by peer"),
        Severity.SEV3,
        Action.RETRY_IN_PLACE,
    ),
    "network-link": (
        Evidence(
            EX, exception_type="RuntimeError", message="NET/IB : Got async event : port error, link down"
        ),
        Severity.SEV3,
        Action.RETRY_IN_PLACE,
    ),
    "gloo-transport": (
        Evidence(
            EX,
            exception_type="RuntimeError",
            message="[/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:598] EOF",
        ),
        Severity.SEV3,
        Action.RETRY_IN_PLACE,
    ),
    "hang-in-collective": (
        Evidence(
            DetectorKind.HANG,
            node="n1",
            message="iteration 15 ran 4.02s > 2.00s " + HANG_IN_COLLECTIVE_MESSAGE,
        ),
        Severity.SEV3,
        Action.RETRY_IN_PLACE,
    ),
    "hang": (Evidence(DetectorKind.HANG, node="n1"), Severity.SEV3, Action.RETRY_IN_PLACE),
    "cuda-oom": (
        Evidence(
            EX,
            exception_type="torch.OutOfMemoryError",
            message="CUDA out of memory. Tried to allocate 2.00 GiB",
        ),
        Severity.SEV2,
        Action.RESTART_PROCESSES,
    ),
    "cuda-error": (
        Evidence(
            EX, exception_type="RuntimeError", message="CUDA error: an illegal memory access was encountered"
        ),
        Severity.SEV2,
        Action.RESTART_PROCESSES,
    ),
    "nccl-error": (
        Evidence(
            EX,
            exception_type="torch.distributed.DistBackendError",
            message="NCCL error in: ProcessGroupNCCL.cpp:1970, "
            "internal error - please report this issue to the NCCL developers",
        ),
        Severity.SEV2,
        Action.RESTART_PROCESSES,
    ),
    "killed": (Evidence(DetectorKind.PROCESS_EXIT, exit_code=-9), Severity.SEV2, Action.RESTART_PROCESSES),
    "crash-signal": (
        Evidence(DetectorKind.PROCESS_EXIT, exit_code=128 + signal.SIGSEGV),
        Severity.SEV2,
        Action.RESTART_PROCESSES,
    ),
    "user-exception": (
        Evidence(EX, exception_type="KeyError", message="'input_ids'"),
        Severity.SEV2,
        Action.RESTART_PROCESSES,
    ),
    "worker-exited": (
        Evidence(DetectorKind.PROCESS_EXIT, exit_code=1),
        Severity.SEV2,
        Action.RESTART_PROCESSES,
    ),
    "worker-exited-early": (
        Evidence(DetectorKind.PROCESS_EXIT, exit_code=0),
        Severity.SEV2,
        Action.RESTART_PROCESSES,
    ),
}


CONSEQUENCES = frozenset(
    {
        "collective-timeout",
        "connection-error",
        "connection-message",
        "gloo-transport",
        "hang-in-collective",
        "rendezvous-port-in-use",
        "recipe-unusable",
    }
)
"""Rows whose evidence is a peer's failure seen through a collective (a rank's wait in one past the hang
threshold included), the epoch's rendezvous port taken
by another process, or a recipe no node can run: everything else blames the rank (or the node) that
reported it."""


def test_every_row_of_the_table_has_exactly_one_case() -> None:
    assert set(CASES) == {r.name for r in RULES}


@pytest.mark.parametrize("rule_name", sorted(CASES))
def test_each_row_says_whether_its_evidence_is_a_cause_or_a_consequence(rule_name: str) -> None:
    ev, _, _ = CASES[rule_name]
    expected = Blame.CONSEQUENCE if rule_name in CONSEQUENCES else Blame.CAUSE
    assert classify_evidence(ev).blame is expected


@pytest.mark.parametrize("rule_name", sorted(CASES))
def test_each_row_classifies_its_evidence(rule_name: str) -> None:
    ev, severity, action = CASES[rule_name]
    c = classify_evidence(ev)
    assert (c.rule, c.severity, c.action) == (rule_name, severity, action)
    assert c.reason
    assert classify(ev) == c  # no history: no escalation


def test_unknown_evidence_lands_on_the_safe_default_with_a_reason() -> None:
    c = classify_evidence(Evidence("exception", exception_type="SomethingNew", message="never seen before"))
    assert c.rule == "default"
    assert c.severity is Severity.SEV2
    assert c.action is Action.RESTART_PROCESSES
    assert "no rule matched" in c.reason
    assert classify_evidence(Evidence("a-detector-we-do-not-know")).rule == "default"


def test_application_xids_are_not_mistaken_for_hardware() -> None:
    c = classify_evidence(Evidence("exception", message="NVRM: Xid (PCI:0000:3b:00): 13, Graphics Exception"))
    assert c.severity is not Severity.SEV1
