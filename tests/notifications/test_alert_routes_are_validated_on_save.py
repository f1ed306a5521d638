from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import ValidationError

from controlplane.apps.notifications.models import AlertRoute
from tests.notifications.conftest import SECRET

WEBHOOK: dict[str, Any] = {
    "destination": "webhook",
    "url": "https://pager.example.org/hook",
    "secret": SECRET,
}


@pytest.mark.parametrize(
    ("fields", "field", "words"),
    [
        ({**WEBHOOK, "url": "ftp://pager.example.org/hook"}, "url", "http:// or https://"),
        ({**WEBHOOK, "url": "not a url"}, "url", "http:// or https://"),
        ({**WEBHOOK, "secret": ""}, "secret", "at least 16 characters"),
        ({**WEBHOOK, "secret": "short"}, "secret", "X-Unicron-Signature"),
        ({**WEBHOOK, "severities": ["sev1", "critical"]}, "severities", "Unknown severity critical"),
        ({**WEBHOOK, "min_severity": "sev1", "severities": ["sev2"]}, "severities", "match no alert"),
        ({**WEBHOOK, "min_severity": "sev0"}, "min_severity", "not a valid choice"),
        ({"destination": "apprise", "url": "nosuchservice://token"}, "url", "Apprise does not understand"),
        (
            {"destination": "carrier-pigeon", "url": "https://x.example.org/"},
            "destination",
            "not a valid choice",
        ),
    ],
)
def test_a_bad_route_is_refused_naming_the_field_and_nothing_is_saved(
    db: None, fields: dict[str, Any], field: str, words: str
) -> None:
    with pytest.raises(ValidationError) as refused:
        AlertRoute.objects.create(name="bad", **fields)

    messages = refused.value.message_dict
    assert field in messages, messages
    assert any(words in m for m in messages[field]), messages
    assert not AlertRoute.objects.exists()


def test_good_routes_are_saved_with_their_lists_tidied(db: None) -> None:
    pager = AlertRoute.objects.create(name="pager", min_severity="sev1", **WEBHOOK)
    chat = AlertRoute.objects.create(
        name="chat", destination="apprise", url="json://chat.example.org/hook", severities=[" SEV2", "sev3 "]
    )
    mail = AlertRoute.objects.create(
        name="mail",
        destination="apprise",
        url="mailto://smtp.example.org:25?from=unicron@example.org&to=oncall@example.org",
        kinds=["node_lost", " "],
    )

    assert AlertRoute.objects.count() == 3
    assert chat.severities == ["sev2", "sev3"]
    assert mail.kinds == ["node_lost"]
    assert pager.min_severity == "sev1"


def test_the_admin_shows_the_reason_and_does_not_save(db: None, admin_client: Any) -> None:
    response = admin_client.post(
        "/admin/notifications/alertroute/add/",
        {"name": "pager", "enabled": "on", "destination": "webhook", "url": "ftp://x", "secret": SECRET},
    )

    assert response.status_code == 200
    assert "A webhook URL must be http:// or https://" in response.content.decode()
    assert not AlertRoute.objects.exists()
