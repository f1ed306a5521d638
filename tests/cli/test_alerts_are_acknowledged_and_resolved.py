from __future__ import annotations

from controlplane.apps.incidents.choices import Severity
from controlplane.apps.incidents.models import Alert
from controlplane.apps.incidents.services import do_raise_alert
from tests.cli.harness import Cli
from tests.controlplane.factories import NodeFactory


def test_an_alert_is_listed_acknowledged_with_a_comment_then_resolved(cli: Cli) -> None:
    alert = do_raise_alert(Severity.SEV1, "node gpu-x lost", node=NodeFactory(name="gpu-x"))

    listed = cli.as_user("alerts", "list", "--state", "open")
    acked = cli.as_user("alerts", "ack", str(alert.pk), "-m", "looking")
    open_now = cli.as_user("alerts", "list", "--state", "open")
    no_comment = cli.as_user("alerts", "resolve", str(alert.pk))
    resolved = cli.as_user("alerts", "resolve", str(alert.pk), "-m", "replaced the PSU")
    again = cli.as_user("alerts", "resolve", str(alert.pk), "-m", "twice")

    assert listed.returncode == 0, listed.stderr
    assert "node gpu-x lost" in listed.stdout
    assert "sev1" in listed.stdout
    assert acked.returncode == 0, acked.stderr
    assert f"Acknowledged alert {alert.pk}" in acked.stdout
    assert "node gpu-x lost" not in open_now.stdout
    assert no_comment.returncode == 2  # -m is required: a usage error, nothing sent
    assert resolved.returncode == 0, resolved.stderr
    assert again.returncode == 1
    assert f"Alert {alert.pk} is already resolved." in again.stderr
    stored = Alert.objects.get(pk=alert.pk)
    assert (stored.state, stored.acknowledge_comment, stored.resolve_comment) == (
        "resolved",
        "looking",
        "replaced the PSU",
    )
    assert stored.acknowledged_by is not None
    assert stored.acknowledged_by.username == "ops"
