from controlplane.core.failures import expired_nodes, heartbeat_deadline, heartbeat_expired


def test_a_heartbeat_expires_only_after_the_timeout() -> None:
    assert not heartbeat_expired(10.0, 13.0, timeout_s=3.0)
    assert heartbeat_expired(10.0, 13.01, timeout_s=3.0)
    assert heartbeat_deadline(10.0, 3.0) == 13.0


def test_expired_nodes_lists_only_the_silent_ones() -> None:
    seen = {"b": 0.0, "a": 1.0, "c": 9.5}
    assert expired_nodes(seen, now_s=10.0) == ["a", "b"]
