"""Schema-driven fuzzing of the REST API: for every operation of the OpenAPI schema, requests generated
from it (schemathesis' coverage phase: boundary and invalid values of every parameter and field, then
random ones) get no 5xx (not_a_server_error). Each role fuzzes the operations it is the least role for
(viewer: the reads; operator: the actions; admin: node registration), so that every request passes
authorization and reaches the validation and the service behind it; what the other roles get from
each operation is the authorization matrix's business.

The application is called in-process through WSGI, in the test's database transaction, and the number
of generated examples is bounded so that the whole fuzz stays within about a minute on a quiet host.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from django.core import signals
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.renderers import OpenApiJsonRenderer
from hypothesis import HealthCheck, Phase, settings
from schemathesis.checks import not_a_server_error
from schemathesis.config import SchemathesisConfig

from controlplane.apps.accounts.roles import Role
from controlplane.apps.accounts.services import do_rotate_api_token
from tests.controlplane.conftest import make_user
from tests.controlplane.factories import NodeFactory, TaskFactory

RANDOM_EXAMPLES = 3
"""Random examples per operation after the coverage phase's deterministic ones."""
ADMIN_ONLY = {("POST", "/api/v1/nodes/")}
CONFIG = {
    "seed": 20261123,
    # the coverage phase's requests with methods the operation does not have are 405s by construction
    "phases": {"coverage": {"unexpected-methods": []}},
}


def _schema() -> Any:
    raw = SchemaGenerator().get_schema(request=None, public=True)
    loaded = json.loads(OpenApiJsonRenderer().render(raw))
    schema = schemathesis.openapi.from_dict(loaded, config=SchemathesisConfig.from_dict(CONFIG))
    schema.app = get_wsgi_application()
    return schema


def _least_role(method: str, path: str) -> Role:
    if (method, path) in ADMIN_ONLY:
        return Role.ADMIN
    if method == "GET":
        return Role.OPERATOR if path.startswith("/api/v1/audit/") else Role.VIEWER
    return Role.OPERATOR


SCHEMA = _schema()


@pytest.fixture
def in_test_transaction() -> Iterator[None]:
    """Requests run in the test's transaction: Django must not close the connection around each one
    (its test client does the same)."""
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    try:
        yield
    finally:
        signals.request_started.connect(close_old_connections)
        signals.request_finished.connect(close_old_connections)


@pytest.fixture
def seeded(db: None) -> None:
    """A node with devices and a running task, so that some generated ids name rows."""
    NodeFactory(devices=2)
    TaskFactory(state="running")


@pytest.fixture
def headers() -> dict[Role, dict[str, str]]:
    return {}


def _fuzz(role: Role) -> Any:
    schema = SCHEMA.include(lambda ctx: _least_role(ctx.operation.method.upper(), ctx.operation.path) == role)

    @schema.parametrize()
    @settings(
        max_examples=RANDOM_EXAMPLES,
        deadline=None,
        derandomize=True,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
        database=None,
    )
    def fuzz(case: Any, seeded: None, in_test_transaction: None, headers: dict[Role, dict[str, str]]) -> None:
        if role not in headers:  # one user per test, made in its transaction
            headers[role] = {"Authorization": f"Token {do_rotate_api_token(None, make_user(role))[1]}"}
        response = case.call(headers=headers[role])
        case.validate_response(response, checks=[not_a_server_error], headers=headers[role])

    return fuzz


test_no_viewer_request_gets_a_server_error = _fuzz(Role.VIEWER)
test_no_operator_request_gets_a_server_error = _fuzz(Role.OPERATOR)
test_no_admin_request_gets_a_server_error = _fuzz(Role.ADMIN)
