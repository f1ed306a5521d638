from __future__ import annotations

import uuid
from datetime import UTC, datetime

from controlplane.apps.incidents.choices import Detector, Severity
from controlplane.apps.incidents.models import FailureEvent
from controlplane.apps.incidents.services import FailureReport, do_record_failure_event
from tests.controlplane.factories import NodeFactory


def test_a_resent_report_is_stored_once(db: None) -> None:
    report = FailureReport(
        detector=Detector.EXCEPTION_PROPAGATION,
        kind="cuda_error",
        severity=Severity.SEV2,
        occurred_at=datetime.now(UTC),
        evidence={"exception": "RuntimeError", "message": "CUDA error: an illegal memory access"},
        report_id=uuid.uuid4(),
        node=NodeFactory(),
    )

    first, created = do_record_failure_event(report)
    again, created_again = do_record_failure_event(report)

    assert (created, created_again) == (True, False)
    assert again.pk == first.pk
    assert FailureEvent.objects.count() == 1
