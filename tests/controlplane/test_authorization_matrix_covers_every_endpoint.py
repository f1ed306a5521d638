"""Every API operation x (anonymous, viewer, operator, admin, node-agent token) gets the expected status.

The operation list comes from the OpenAPI schema (cross-checked against the URLconf), so an endpoint
added without an entry in REQUIRED_ROLE fails here instead of escaping the matrix.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.apps import apps
from rest_framework.test import APIClient

from controlplane.apps.fleet.models import Device, Node
from tests.controlplane.api_endpoints import schema_operations, urlconf_paths
from tests.controlplane.factories import (
    AlertFactory,
    DeviceFactory,
    FailureEventFactory,
    NodeFactory,
    PlanFactory,
    TaskFactory,
    TransitionStepFactory,
)

VIEWER, OPERATOR, ADMIN = "viewer", "operator", "admin"
# (method, path) -> the least role that may call it
REQUIRED_ROLE: dict[tuple[str, str], str] = {
    ("GET", "/api/v1/me/"): VIEWER,
    ("GET", "/api/v1/me/token/"): VIEWER,
    ("POST", "/api/v1/me/token/"): VIEWER,
    ("GET", "/api/v1/audit/"): OPERATOR,
    ("GET", "/api/v1/audit/{id}/"): OPERATOR,
    ("GET", "/api/v1/nodes/"): VIEWER,
    ("POST", "/api/v1/nodes/"): ADMIN,
    ("GET", "/api/v1/nodes/{id}/"): VIEWER,
    ("POST", "/api/v1/nodes/{id}/drain/"): OPERATOR,
    ("POST", "/api/v1/nodes/{id}/clear-quarantine/"): OPERATOR,
    ("POST", "/api/v1/nodes/{id}/return-to-service/"): OPERATOR,
    ("POST", "/api/v1/nodes/{id}/inject-fault/"): OPERATOR,
    ("GET", "/api/v1/devices/"): VIEWER,
    ("GET", "/api/v1/devices/{id}/"): VIEWER,
    ("POST", "/api/v1/devices/{id}/return-to-service/"): OPERATOR,
    ("GET", "/api/v1/device-map/"): VIEWER,
    ("GET", "/api/v1/tasks/"): VIEWER,
    ("POST", "/api/v1/tasks/"): OPERATOR,
    ("GET", "/api/v1/tasks/{id}/"): VIEWER,
    ("POST", "/api/v1/tasks/{id}/change-weight/"): OPERATOR,
    ("POST", "/api/v1/tasks/{id}/cancel/"): OPERATOR,
    ("GET", "/api/v1/tasks/{id}/checkpoints/"): VIEWER,
    ("GET", "/api/v1/failure-events/"): VIEWER,
    ("GET", "/api/v1/failure-events/{id}/"): VIEWER,
    ("GET", "/api/v1/alerts/"): VIEWER,
    ("GET", "/api/v1/alerts/{id}/"): VIEWER,
    ("POST", "/api/v1/alerts/{id}/acknowledge/"): OPERATOR,
    ("POST", "/api/v1/alerts/{id}/resolve/"): OPERATOR,
    ("GET", "/api/v1/plans/"): VIEWER,
    ("GET", "/api/v1/plans/{id}/"): VIEWER,
    ("GET", "/api/v1/transitions/"): VIEWER,
    ("GET", "/api/v1/transitions/{id}/"): VIEWER,
    ("GET", "/api/v1/metrics/cluster/"): VIEWER,
    ("GET", "/api/v1/metrics/tasks/{task_id}/"): VIEWER,
    ("GET", "/api/v1/summary/"): VIEWER,
    # the simulations app (what-if runs) is optional: checked when its routes are mounted
    ("GET", "/api/v1/simulations/"): VIEWER,
    ("POST", "/api/v1/simulations/"): OPERATOR,
    ("GET", "/api/v1/simulations/{id}/"): VIEWER,
}
OPTIONAL_PREFIXES = ("/api/v1/simulations/",)
RANK = {"anonymous": 0, "agent": 0, "agent-token-keyword": 0, "no-role": 0, VIEWER: 1, OPERATOR: 2, ADMIN: 3}

TASK_SPEC: dict[str, Any] = {
    "name": "gpt-matrix",
    "num_layers": 4,
    "hidden_size": 256,
    "num_attention_heads": 8,
    "seq_length": 512,
    "vocab_size": 32000,
    "global_batch_size": 32,
    "micro_batch_size": 4,
    "max_workers": 8,
}


def _simulation_run_id() -> int | None:
    if not apps.is_installed("controlplane.apps.simulations"):
        return None
    run = apps.get_model("simulations", "SimulationRun").objects.create(trace="trace-a", days=1.0)
    return int(run.pk)


def _objects() -> dict[str, Any]:
    """Fresh objects for one call (so an earlier call, e.g. cancel, cannot change the outcome)."""
    node = NodeFactory(state="healthy", quarantined=True)
    step = TransitionStepFactory()
    event = FailureEventFactory(node=node)
    return {
        "node": node,
        "device": DeviceFactory(node=node, index=0),
        "task": TaskFactory(),
        "alert": AlertFactory(source_event=event),
        "event": event,
        "plan": PlanFactory(),
        "transition": step.transition,
        "simulation": _simulation_run_id(),
    }


def _url_and_body(method: str, path: str, audit_id: int) -> tuple[str, dict[str, Any]]:
    objs = _objects()
    resource = path.split("/")[3]
    ids = {
        "nodes": objs["node"].pk,
        "devices": objs["device"].pk,
        "tasks": objs["task"].pk,
        "alerts": objs["alert"].pk,
        "failure-events": objs["event"].pk,
        "plans": objs["plan"].pk,
        "transitions": objs["transition"].pk,
        "audit": audit_id,
        "metrics": objs["task"].pk,
        "me": 0,
        "summary": 0,
        "device-map": 0,
        "simulations": objs["simulation"],
    }
    url = path.replace("{id}", str(ids[resource])).replace("{task_id}", str(objs["task"].pk))
    if path.endswith("/return-to-service/"):  # only isolated hardware returns to service
        Node.objects.filter(pk=objs["node"].pk).update(state="isolated", quarantined=False)
        Device.objects.filter(pk=objs["device"].pk).update(state="isolated")
    body: dict[str, Any] = {}
    if method == "POST":
        body = {
            "/api/v1/tasks/": TASK_SPEC,
            "/api/v1/nodes/": {
                "name": f"new-{objs['node'].pk}",
                "devices": [{"index": 0, "kind": "cpu-slot", "memory_bytes": 4 << 30}],
            },
            "/api/v1/tasks/{id}/change-weight/": {"weight": 3.0},
            "/api/v1/alerts/{id}/resolve/": {"comment": "replaced the GPU"},
            "/api/v1/nodes/{id}/inject-fault/": {"fault": "node_loss"},
            "/api/v1/simulations/": {"trace": "trace-a", "days": 0.01},
        }.get(path, {})
    return url, body


def test_every_endpoint_has_an_expected_role() -> None:
    operations = set(schema_operations())
    assert operations - set(REQUIRED_ROLE) == set(), "add the new endpoints to REQUIRED_ROLE"
    stale = {op for op in set(REQUIRED_ROLE) - operations if not op[1].startswith(OPTIONAL_PREFIXES)}
    assert stale == set(), "remove endpoints that no longer exist from REQUIRED_ROLE"
    assert urlconf_paths() == {path for _, path in operations}, "a route is missing from the schema"


@pytest.mark.parametrize(
    "principal", ["anonymous", "agent", "agent-token-keyword", "no-role", VIEWER, OPERATOR, ADMIN]
)
def test_authorization_matrix(
    principal: str, cluster: list[Node], client_for: Callable[[str], APIClient]
) -> None:
    if principal == "agent-token-keyword":  # a node token presented as a DRF user token
        client = client_for("agent")
        client.credentials(HTTP_AUTHORIZATION="Token unode_test-agent-token")
    else:
        client = client_for(principal)
    audit_id = _seed_audit_entry()
    wrong = []
    for (method, path), success in sorted(schema_operations().items()):
        role = REQUIRED_ROLE[(method, path)]
        url, body = _url_and_body(method, path, audit_id)
        response = client.generic(method, url, data=_json(body), content_type="application/json")
        if principal == "no-role":  # authenticated, but not allowed anything
            expected = {403}
        elif RANK[principal] == 0:
            expected = {401}
        elif RANK[principal] < RANK[role]:
            expected = {403}
        else:
            expected = {success}
        if response.status_code not in expected:
            wrong.append(f"{principal} {method} {url}: {response.status_code} (expected {expected})")
    assert wrong == []


def _seed_audit_entry() -> int:
    from controlplane.apps.accounts.services import do_record_audit

    return do_record_audit(None, "seed", NodeFactory()).pk


def _json(body: dict[str, Any]) -> str:
    import json

    return json.dumps(body)
