from __future__ import annotations

from rest_framework.test import APIClient

from tests.controlplane.factories import TaskFactory, UserFactory


def test_task_list_filters(db: None, viewer_client: APIClient) -> None:
    alice, bob = UserFactory(username="alice"), UserFactory(username="bob")
    wanted = TaskFactory(name="llama-pretrain", owner=alice, state="running")
    TaskFactory(name="llama-sft", owner=bob, state="running")
    TaskFactory(name="llama-eval", owner=alice, state="completed")
    TaskFactory(name="gpt-pretrain", owner=alice, state="running")

    response = viewer_client.get("/api/v1/tasks/", {"state": "running", "owner": "alice", "name": "llama"})

    assert response.status_code == 200
    assert [t["id"] for t in response.json()["results"]] == [wanted.pk]


def test_task_list_is_paginated(db: None, viewer_client: APIClient) -> None:
    TaskFactory.create_batch(3)

    body = viewer_client.get("/api/v1/tasks/", {"limit": 2}).json()

    assert body["count"] == 3
    assert len(body["results"]) == 2
    assert body["next"] is not None
