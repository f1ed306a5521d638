"""The audit trail is append-only: a row cannot be updated or deleted, neither through the model nor a
queryset nor the admin (which has no add, change or delete permission on it)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from controlplane.apps.accounts.models import AuditEntry, AuditEntryImmutable
from controlplane.apps.accounts.services import do_record_audit
from tests.controlplane.factories import NodeFactory


@pytest.fixture
def entry(db: None) -> AuditEntry:
    return do_record_audit(None, "drain", NodeFactory(), {"state": "healthy"}, {"state": "draining"})


def test_saving_a_stored_entry_again_is_refused(entry: AuditEntry) -> None:
    entry.verb = "nothing-happened"

    with pytest.raises(AuditEntryImmutable, match="append-only"):
        entry.save()

    assert AuditEntry.objects.get(pk=entry.pk).verb == "drain"


def test_deleting_an_entry_is_refused(entry: AuditEntry) -> None:
    with pytest.raises(AuditEntryImmutable):
        entry.delete()
    with pytest.raises(AuditEntryImmutable):
        AuditEntry.objects.filter(pk=entry.pk).delete()
    with pytest.raises(AuditEntryImmutable):
        AuditEntry.objects.filter(pk=entry.pk).update(verb="x")

    assert AuditEntry.objects.filter(pk=entry.pk, verb="drain").exists()


def test_the_admin_can_neither_change_nor_delete_an_entry(entry: AuditEntry) -> None:
    client = Client()
    client.force_login(User.objects.create_superuser("root", password="unused-here"))
    base = f"/admin/accounts/auditentry/{entry.pk}"

    page = client.get(f"{base}/change/")
    deleted = client.post(f"{base}/delete/", {"post": "yes"})
    bulk = client.post(
        "/admin/accounts/auditentry/",
        {"action": "delete_selected", "_selected_action": [entry.pk], "post": "yes"},
    )

    assert page.status_code == 200  # readable
    assert b"Save" not in page.content or b'name="_save"' not in page.content
    assert deleted.status_code == 403
    assert bulk.status_code in {200, 302}
    assert AuditEntry.objects.filter(pk=entry.pk, verb="drain").exists()
