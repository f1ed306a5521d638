"""The agent's snapshot server (a real TCP server) reads, writes and lists a task's snapshots only for
a request signed with that task's key: an unauthenticated read gets no byte, another task's key is
refused, a planted snapshot is never listed, a peer cannot overwrite this node's own snapshot, a
declared 1 TiB snapshot is refused before any byte lands, and what it receives is 0600 in 0700
directories. Every refusal is counted."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import stat
import struct
import time
from pathlib import Path
from typing import Any

import pytest

from agents.snapshots import INCOMING, SnapshotStore, SnapshotStoreConfig, SnapshotTransferError, request_mac
from tests.agents.snapshot_worker import write_snapshot_files

GPT_KEY = "a1" * 32
OTHER_KEY = "b2" * 32
_HEADER = struct.Struct(">I")


async def _request(endpoint: str, header: dict[str, Any], body: bytes = b"") -> tuple[dict[str, Any], bytes]:
    """One raw request; the reply header and whatever bytes followed it."""
    host, _, port = endpoint.rpartition(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        raw = json.dumps(header).encode()
        writer.write(_HEADER.pack(len(raw)) + raw + body)
        await writer.drain()
        (n,) = _HEADER.unpack(await asyncio.wait_for(reader.readexactly(4), 10))
        reply = json.loads(await asyncio.wait_for(reader.readexactly(n), 10))
        rest = await asyncio.wait_for(reader.read(), 10)
        return reply, rest
    finally:
        writer.close()


def _signed(key: str, **fields: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"origin": None, "files": None, "size": None, **fields}
    out.update(ts=time.time(), nonce=secrets.token_hex(16))
    signed = {
        k: out.get(k)
        for k in ("op", "task_id", "epoch", "iteration", "origin", "files", "size", "ts", "nonce")
    }
    out["mac"] = request_mac(bytes.fromhex(key), signed)
    return out


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


@pytest.fixture
async def server(tmp_path: Path) -> Any:
    store = SnapshotStore("node-b", SnapshotStoreConfig(root=tmp_path / "b", scan_interval_s=0.05))
    store.set_secret("gpt", GPT_KEY)
    store.set_secret("other", OTHER_KEY)
    await store.start()
    yield store
    await store.close()


async def test_an_unauthenticated_read_gets_no_byte(server: SnapshotStore) -> None:
    write_snapshot_files(server.root, "node-b", "gpt", 1, 9, [0], nbytes=1 << 20)
    assert server.endpoint is not None

    reply, rest = await _request(server.endpoint, {"op": "get", "task_id": "gpt", "iteration": 9})

    assert reply["ok"] is False
    assert "bad_mac" in reply["error"]
    assert rest == b""
    assert (server.refused, dict(server.refusals)) == (1, {"bad_mac": 1})


async def test_another_tasks_key_is_refused(server: SnapshotStore, tmp_path: Path) -> None:
    write_snapshot_files(server.root, "node-b", "gpt", 1, 9, [0], nbytes=1 << 20)
    assert server.endpoint is not None
    thief = SnapshotStore("node-c", SnapshotStoreConfig(root=tmp_path / "c"))
    thief.set_secret("gpt", OTHER_KEY)  # it runs task "other" and asks for "gpt" with that key

    with pytest.raises(SnapshotTransferError, match="bad_mac"):
        await thief.fetch(server.endpoint, "gpt", 9)

    assert not list(thief.root.glob("*/gpt/*"))
    assert server.refusals["bad_mac"] == 1


async def test_a_planted_or_overwriting_snapshot_is_refused_and_never_listed(server: SnapshotStore) -> None:
    real = write_snapshot_files(server.root, "node-b", "gpt", 1, 9, [0], nbytes=4096)
    before = {f.name: f.read_bytes() for f in real.iterdir()}
    assert server.endpoint is not None
    files = [{"name": "COMPLETE", "size": 2}]
    planted = {"op": "put", "origin": "node-x", "task_id": "gpt", "epoch": 5, "iteration": 50, "files": files}
    overwrite = _signed(GPT_KEY, **{**planted, "origin": "node-b", "epoch": 1, "iteration": 9, "size": 2})

    unsigned, _ = await _request(server.endpoint, planted, b"{}")
    own, _ = await _request(server.endpoint, overwrite, b"{}")
    await asyncio.sleep(0.2)  # a few scans

    assert (unsigned["ok"], own["ok"]) == (False, False)
    assert [(i.origin_node, i.epoch, i.iteration) for i in server.infos()] == [("node-b", 1, 9)]
    assert {f.name: f.read_bytes() for f in real.iterdir()} == before
    assert not (server.root / "node-x").exists()
    assert dict(server.refusals) == {"bad_mac": 1, "own_snapshot": 1}


async def test_a_declared_terabyte_is_refused_before_any_byte_lands(server: SnapshotStore) -> None:
    assert server.endpoint is not None
    files = [{"name": "rank00000.pt", "size": 1 << 40}, {"name": "COMPLETE", "size": 2}]
    header = _signed(
        GPT_KEY,
        op="put",
        origin="node-a",
        task_id="gpt",
        epoch=1,
        iteration=9,
        files=files,
        size=(1 << 40) + 2,
    )

    t0 = time.monotonic()
    reply, _ = await _request(server.endpoint, header, os.urandom(1 << 16))

    assert reply["ok"] is False
    assert "too_large" in reply["error"]
    assert time.monotonic() - t0 < 5
    assert list(server.root.glob(f"{INCOMING}/**/*")) == []
    assert not (server.root / "node-a").exists()
    assert server.refusals["too_large"] == 1


async def test_a_replica_from_the_tasks_agent_is_private_to_the_agent_user(
    server: SnapshotStore, tmp_path: Path
) -> None:
    assert server.endpoint is not None
    own = SnapshotStore("node-a", SnapshotStoreConfig(root=tmp_path / "a", scan_interval_s=0.05))
    own.set_secret("gpt", GPT_KEY)
    await own.start()
    try:
        write_snapshot_files(own.root, "node-a", "gpt", 1, 9, [0, 1], nbytes=1 << 16, replica=server.endpoint)
        deadline = time.monotonic() + 20
        while not [i for i in server.infos() if i.origin_node == "node-a"]:
            assert time.monotonic() < deadline, "the replica never arrived"
            await asyncio.sleep(0.05)
        [replica] = server.paths("gpt", 9)
    finally:
        await own.close()

    assert _mode(server.root) == 0o700
    assert {_mode(d) for d in (replica, replica.parent, replica.parent.parent)} == {0o700}
    assert {_mode(f) for f in replica.iterdir()} == {0o600}
    assert server.refused == 0
