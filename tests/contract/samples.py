"""One sample envelope per protocol message (and per worker-report event kind).

The golden JSON files next to this module were written from these samples with
``python -m tests.contract.samples`` and are checked in; the contract tests validate the files from
both sides (the coordinator's decoder for agent frames, the agent's decoder for coordinator frames)
and check that today's models still produce exactly the same JSON.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from controlplane.core.protocol import (
    Ack,
    AgentEnvelope,
    CheckpointSaved,
    CoordinatorEnvelope,
    DeviceInfo,
    DrainCommand,
    FaultSpec,
    HangVerdict,
    Heartbeat,
    Hello,
    InjectFaultCommand,
    IterationStats,
    ModelSpec,
    ParallelConfig,
    ProtocolError,
    RankAssignment,
    RankMapping,
    ReconfigureCommand,
    Rendezvous,
    RetryCommand,
    SnapshotGrant,
    StartWorkersCommand,
    StateSource,
    StopWorkersCommand,
    StragglerVerdict,
    TransitionReport,
    WorkerEvent,
    WorkerException,
    WorkerExited,
    WorkerLaunch,
    WorkerReport,
    WorkerStarted,
    WorkerStatus,
)
from controlplane.core.recipe import BlendEntry, DataSection

GOLDEN_DIR = Path(__file__).parent / "golden"
T0 = datetime(2025, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)
T1 = datetime(2025, 1, 2, 3, 4, 6, 12000, tzinfo=UTC)
SECRET = "5e" * 32


def _agent(message: object, seq: int = 7) -> AgentEnvelope:
    return AgentEnvelope(node="node-a", session="s-8d1f", seq=seq, sent_at=T0, message=message)  # type: ignore[arg-type]


def _coord(message: object, seq: int = 3) -> CoordinatorEnvelope:
    return CoordinatorEnvelope(node="coordinator", session="s-8d1f", seq=seq, sent_at=T0, message=message)  # type: ignore[arg-type]


def _report(event: WorkerEvent, detector: str | None) -> AgentEnvelope:
    return _agent(
        WorkerReport(
            report_id="6f0c2a7e-1b8e-4c55-9d0a-7d7f2b1d9e01",
            task_id="gpt-small",
            epoch=2,
            rank=1,
            device=1,
            detector=detector,  # type: ignore[arg-type]
            occurred_at=T0,
            detected_at=T1,
            event=event,
        )
    )


LAUNCH = WorkerLaunch(
    model=ModelSpec(layers=2, hidden=64, heads=4, seq_len=32, vocab=128, micro_batch=2, global_batch=8),
    parallel=ParallelConfig(tp=2, pp=1, dp=2),
    world_size=4,
    ranks=[RankAssignment(rank=0, device=0), RankAssignment(rank=1, device=1)],
    rendezvous=Rendezvous(master_addr="10.0.0.5", master_port=29517, timeout_s=30.0),
    iterations=1000,
    seed=1234,
    checkpoint_dir="/var/lib/unicron/ckpt/gpt-small",
    checkpoint_interval=50,
    checkpoint_keep=2,
    collective_timeout_s=30.0,
    state_sources=[StateSource(rank=0, kind="peer_replica", source_node="node-b", source_rank=2)],
)
STATUS = WorkerStatus(
    task_id="gpt-small", epoch=2, rank=0, device=0, pid=4242, state="healthy", iteration=117
)

SAMPLES: dict[str, AgentEnvelope | CoordinatorEnvelope] = {
    # agent -> coordinator
    "hello": _agent(
        Hello(
            agent_version="0.1.0",
            hostname="node-a.cluster",
            worker_kind="megatron",
            devices=[
                DeviceInfo(index=0, kind="cuda", name="NVIDIA H100 80GB HBM3", memory_bytes=85_520_809_984),
                DeviceInfo(index=1, kind="cpu", name="cpu-slot-1", memory_bytes=0),
            ],
            workers=[STATUS],
            task_epochs={"gpt-small": 2},
        ),
        seq=0,
    ),
    "heartbeat": _agent(Heartbeat(uptime_s=12.5, workers=[STATUS], pending_reports=0, warming=True)),
    "worker_report.started": _report(WorkerStarted(pid=4242), None),
    "worker_report.exited": _report(
        WorkerExited(exit_code=None, signal=9, signal_name="SIGKILL", expected=False), "process_supervision"
    ),
    "worker_report.exception": _report(
        WorkerException(
            exc_type="RuntimeError",
            message="[gloo/transport/tcp/pair.cc:537] Read error: Connection reset by peer",
            traceback=(
                'Traceback (most recent call last):\n  File "train.py", line 10, in step\nRuntimeError: ...\n'
            ),
            iteration=117,
            in_collective=True,
            waiting=True,
        ),
        "exception_propagation",
    ),
    "worker_report.iteration_stats": _report(
        IterationStats(
            first_iteration=110,
            last_iteration=117,
            iterations=8,
            median_s=0.012,
            max_s=0.015,
            compute_median_s=0.009,
            micro_batches=32,
            tokens=2048,
            model_flops=1.5e9,
            loss=4.85,
            validation_loss=4.97,
            learning_rate=3e-4,
            grad_norm=1.25,
        ),
        None,
    ),
    "worker_report.checkpoint_saved": _report(
        CheckpointSaved(
            iteration=200,
            path="/shared/ckpt/gpt-small/iter_0000200",
            size_bytes=1_572_864,
            validation_loss=4.97,
        ),
        None,
    ),
    "worker_report.hang": _report(
        HangVerdict(
            iteration=118,
            elapsed_s=5.02,
            threshold_s=5.0,
            median_iteration_s=0.012,
            phase="train",
            stack=(
                "Thread 0x7f (most recent call first):\n"
                '  File "torch/distributed/distributed_c10d.py", line 2806 in all_reduce\n'
            ),
            in_collective=True,
        ),
        "statistical_monitoring",
    ),
    "worker_report.straggler": _report(
        StragglerVerdict(iteration=140, compute_s=0.031, peer_median_s=0.010, ratio=3.1, stack=""),
        "statistical_monitoring",
    ),
    "worker_report.transition": _report(
        TransitionReport(
            from_epoch=2,
            iteration=117,
            in_place=True,
            source="local_device",
            bytes_moved=0,
            phases_s={"teardown": 0.004, "rendezvous": 0.21, "migrate": 0.0, "recompute": 0.031},
            reused_micro_batches=6,
            recomputed_micro_batches=2,
        ),
        None,
    ),
    "ack": _agent(Ack(command_id="cmd-41", outcome="done", detail="2 workers started")),
    "protocol_error.agent": _agent(
        ProtocolError(
            code="unknown_type", detail="unknown coordinator message type 'frobnicate'", in_reply_to_seq=3
        )
    ),
    # coordinator -> agent
    "start_workers": _coord(
        StartWorkersCommand(
            command_id="cmd-41",
            task_id="gpt-small",
            epoch=2,
            launch=LAUNCH.model_copy(
                update={
                    "data": DataSection(
                        tokenizer="/shared/data/pydoc/tokenizer.json",
                        blend=[BlendEntry(path_prefix="/shared/data/pydoc/pydoc", weight=1.0)],
                        split="98,2,0",
                    )
                }
            ),
            snapshot_secret=SECRET,
        )
    ),
    "stop_workers": _coord(
        StopWorkersCommand(command_id="cmd-42", task_id="gpt-small", epoch=2, ranks=[1], grace_s=2.0)
    ),
    "reconfigure": _coord(
        ReconfigureCommand(
            command_id="cmd-43",
            task_id="gpt-small",
            epoch=3,
            launch=LAUNCH,
            resume_iteration=117,
            previous_epoch=2,
            previous_parallel=ParallelConfig(tp=1, pp=1, dp=4),
            survivors=[RankMapping(old_rank=0, new_rank=0), RankMapping(old_rank=2, new_rank=1)],
            snapshot_secret=SECRET,
        )
    ),
    "retry": _coord(
        RetryCommand(
            command_id="cmd-44",
            task_id="gpt-small",
            epoch=3,
            iteration=117,
            rendezvous=Rendezvous(master_addr="10.0.0.5", master_port=29518, timeout_s=30.0),
        )
    ),
    "inject_fault": _coord(
        InjectFaultCommand(
            command_id="cmd-45",
            task_id="gpt-small",
            epoch=3,
            fault=FaultSpec(kind="straggler", rank=1, at_iteration=200, slowdown=3.0, message="drill"),
        )
    ),
    "drain": _coord(DrainCommand(command_id="cmd-46", grace_s=10.0)),
    "snapshot_grant": _coord(SnapshotGrant(task_id="gpt-small", secret=SECRET)),
    "protocol_error.coordinator": _coord(
        ProtocolError(code="version_mismatch", detail="protocol_version 9 is not supported; supported: [1]")
    ),
}


def golden_path(name: str) -> Path:
    return GOLDEN_DIR / f"{name}.json"


def write_golden() -> None:
    GOLDEN_DIR.mkdir(exist_ok=True)
    for name, env in SAMPLES.items():
        text = json.dumps(json.loads(env.model_dump_json()), indent=2, sort_keys=True) + "\n"
        golden_path(name).write_text(text)


if __name__ == "__main__":
    write_golden()
