from __future__ import annotations

import json

from controlplane.apps.fleet.models import Node
from tests.cli.harness import Cli
from tests.controlplane.factories import NodeFactory


def test_drain_by_name_and_clear_quarantine_by_id(cli: Cli) -> None:
    healthy = NodeFactory(name="gpu-a", state="healthy")
    isolated = NodeFactory(name="gpu-b", state="isolated", quarantined=True)

    listed = cli.as_user("nodes", "list")
    drained = cli.as_user("nodes", "drain", "gpu-a")
    cleared = cli.as_user("nodes", "clear", str(isolated.pk), "-o", "json")

    assert listed.returncode == 0, listed.stderr
    assert "gpu-a" in listed.stdout
    assert "gpu-b" in listed.stdout
    assert drained.returncode == 0, drained.stderr
    assert f"Draining node {healthy.pk} gpu-a: draining" in drained.stdout
    assert Node.objects.get(pk=healthy.pk).state == "draining"
    assert cleared.returncode == 0, cleared.stderr
    assert json.loads(cleared.stdout)["quarantined"] is False
    assert Node.objects.get(pk=isolated.pk).quarantined is False


def test_a_name_wins_over_an_id_and_an_unknown_name_exits_1(cli: Cli) -> None:
    other = NodeFactory(name="gpu-c", state="healthy")
    named_like_an_id = NodeFactory(name=str(other.pk + 1000), state="healthy")

    drained = cli.as_user("nodes", "drain", named_like_an_id.name)
    unknown = cli.as_user("nodes", "drain", "no-such-node")

    assert drained.returncode == 0, drained.stderr
    assert Node.objects.get(pk=named_like_an_id.pk).state == "draining"
    assert Node.objects.get(pk=other.pk).state == "healthy"
    assert unknown.returncode == 1
    assert "No node is named 'no-such-node'." in unknown.stderr


def test_draining_a_lost_node_exits_1_with_the_api_words(cli: Cli) -> None:
    NodeFactory(name="gpu-lost", state="lost")

    result = cli.as_user("nodes", "drain", "gpu-lost")

    assert result.returncode == 1
    assert "refused (HTTP 409)" in result.stderr
    assert Node.objects.get(name="gpu-lost").state == "lost"
