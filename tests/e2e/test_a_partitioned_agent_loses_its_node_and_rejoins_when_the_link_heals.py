"""A real partition between an agent and the control plane: the agent lives in its own network namespace and
reaches the control plane over a veth link; the partition is that link taken down (packets dropped both ways,
sockets left open: nothing tells either side). The control plane must declare the silent node lost once,
move its task's ranks to the node it can still reach, and keep the task training; when the link comes back
the agent reconnects on its own, the node returns to service, the workers it kept running for the old epoch
are stopped (or taken into a new epoch), and nothing is left half-done."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from controlplane.apps.fleet.models import AgentCommand, Node
from controlplane.apps.fleet.services import do_register_node
from controlplane.apps.incidents.models import FailureEvent
from controlplane.apps.planning.models import Transition
from controlplane.apps.training.models import Allocation, TrainingTask
from tests.e2e import netns
from tests.e2e.loop import REPO, Loop, assert_allocations_consistent
from tests.processes import spawn

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

WHY_NOT = netns.available()


@pytest.fixture
def namespace() -> Iterator[netns.Namespace]:
    if WHY_NOT is not None:
        pytest.skip(WHY_NOT)
    with netns.namespaces(1) as made:
        yield made[0]


def start_agent_in(loop: Loop, ns: netns.Namespace, forward_port: int, name: str, devices: int) -> None:
    """An agent inside ``ns`` whose coordinator URL is the host end of its link."""
    _node, token = do_register_node(None, name, address=ns.ns_addr)
    run = loop.run_dir / name
    run.mkdir(parents=True, exist_ok=True)
    url = f"ws://{ns.host_addr}:{forward_port}/ws/agent/"
    argv = [sys.executable, "-m", "agents", "--coordinator", url, "--token", token, "--devices", str(devices)]
    argv += [
        "--worker",
        "sim",
        "--node",
        name,
        "--run-dir",
        str(run),
        "--hang-floor",
        "2.0",
        "--no-snapshots",
    ]
    with open(run / "agent.log", "ab") as log:  # the child keeps its own descriptor
        loop.agents[name] = spawn(
            ns.command(argv),
            cwd=str(REPO),
            env=dict(loop.env, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore", UNICRON_STRAGGLER_RATIO="2.0"),
            stdout=log,
            stderr=log,
            start_new_session=True,
        )


def nodes_of(task: TrainingTask) -> set[str]:
    return set(Allocation.objects.filter(task=task, active=True).values_list("device__node__name", flat=True))


def test_a_partitioned_agent_loses_its_node_and_rejoins_when_the_link_heals(
    loop: Loop, namespace: netns.Namespace
) -> None:
    assert loop.asgi is not None
    forwarder = netns.Forwarder(namespace.host_addr, loop.asgi.port)
    try:
        near = loop.add_node(2).name
        far = "far-" + namespace.name
        start_agent_in(loop, namespace, forwarder.port, far, 2)
        loop.wait_nodes_healthy(2)
        task = loop.submit("p", min_workers=1, max_workers=4, total_iterations=1_000_000)
        loop.wait(
            "the task running on both nodes",
            lambda: (task.refresh_from_db(), task.state == "running")[1] and nodes_of(task) == {near, far},
            timeout=90,
        )
        loop.wait("progress", lambda: (task.refresh_from_db(), task.iteration > 3)[1])
        task.refresh_from_db()
        epoch_before = task.epoch

        namespace.partition()
        cut_at = time.monotonic()
        loop.wait(
            "the far node declared lost", lambda: Node.objects.get(name=far).state == "lost", timeout=30
        )
        lost_after_s = time.monotonic() - cut_at
        loop.wait(
            "the task running on the near node alone, at a newer epoch",
            lambda: (task.refresh_from_db(), task.state == "running" and task.epoch > epoch_before)[1]
            and nodes_of(task) == {near}
            and Transition.objects.filter(task=task, epoch=task.epoch, state="completed").exists(),
            timeout=90,
        )
        at = task.iteration
        loop.wait("progress while partitioned", lambda: (task.refresh_from_db(), task.iteration > at + 3)[1])
        assert_allocations_consistent()
        epoch_partitioned = task.epoch

        namespace.heal()
        healed_at = time.monotonic()
        loop.wait(
            "the far node back in service", lambda: Node.objects.get(name=far).state == "healthy", timeout=60
        )
        back_after_s = time.monotonic() - healed_at
        # the far agent kept its old-epoch workers through the partition: told to stop them, unless the
        # task grew back onto it in a newer epoch (then the transition replaced them)
        loop.wait(
            "the far node's old workers stopped or taken into a newer epoch",
            lambda: AgentCommand.objects.filter(
                node__name=far, task=task, type="stop_workers", state="acked"
            ).exists()
            or (
                (task.refresh_from_db(), task.epoch > epoch_partitioned)[1]
                and far in nodes_of(task)
                and Transition.objects.filter(task=task, epoch=task.epoch, state="completed").exists()
            ),
            timeout=60,
        )
        loop.wait(
            "no transition left open",
            lambda: not Transition.objects.filter(state__in=["pending", "running"]).exists(),
            timeout=60,
        )
        task.refresh_from_db()
        at = task.iteration
        loop.wait("progress after the heal", lambda: (task.refresh_from_db(), task.iteration > at + 3)[1])
        # the returned node's capacity may make the task grow once more (a re-plan after the settle
        # window): it converges to running, with no transition left open
        loop.wait(
            "the task running with no transition open",
            lambda: (task.refresh_from_db(), task.state == "running")[1]
            and not Transition.objects.filter(state__in=["pending", "running"]).exists(),
            timeout=90,
        )
        assert_allocations_consistent()
        lost_events = FailureEvent.objects.filter(detector="node_health", node__name=far)
        assert lost_events.count() == 1, loop.diagnose()  # one verdict, no flapping
        assert not FailureEvent.objects.filter(detector="node_health", node__name=near).exists()
        assert not FailureEvent.objects.filter(resolved_at__isnull=True).exists(), loop.diagnose()
        log = Path(loop.run_dir / far / "agent.log").read_text(errors="replace")
        assert "link to coordinator down" in log or "reconnecting" in log, log[-2000:]
        print(
            f"\nFIGURE partition agent<->control plane: lost_after_s={lost_after_s:.2f} "
            f"back_in_service_after_heal_s={back_after_s:.2f} epochs {epoch_before}->{task.epoch}"
        )
    finally:
        forwarder.close()
