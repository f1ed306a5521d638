"""What authenticating the snapshot plane costs a snapshot fetch, in one run.

    .venv/bin/python bench/snapshot_auth.py [--mib 256] [--ranks 2] [--repeats 10]
                                            [--out bench/results/snapshot_auth.md]

Two real snapshot stores (:mod:`agents.snapshots`) on loopback: a peer holding one complete snapshot
of ``--ranks`` shards (``--mib`` MiB in all), and a fetching store. The same snapshot is fetched
``--repeats`` times with the HMAC checks on (request MAC checked by the server, reply MAC checked by
the fetcher, nonce and size checks) and ``--repeats`` times with them off
(``SnapshotStoreConfig.authenticate=False``, which exists for this measurement only), alternating one
with the other so that drift of a shared host hits both alike. Each fetch ends with the files renamed
into place in the fetcher's store; the copy is deleted before the next one. The figure is the ratio of
the medians (authenticated / not); the target is at most 1.05.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agents.snapshots import SnapshotStore, SnapshotStoreConfig

KEY = "5a" * 32


def _write_snapshot(root: Path, nbytes: int, ranks: int) -> None:
    from tests.agents.snapshot_worker import write_snapshot_files

    write_snapshot_files(root, "peer", "bench", 1, 100, list(range(ranks)), nbytes=nbytes // ranks)


async def _fetch_once(store: SnapshotStore, endpoint: str) -> float:
    t0 = time.perf_counter()
    paths = await store.fetch(endpoint, "bench", 100, 1)
    elapsed = time.perf_counter() - t0
    for p in paths:
        shutil.rmtree(p)
    return elapsed


async def measure(mib: int, ranks: int, repeats: int, tmp: Path) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {"auth": [], "plain": []}
    stores = {}
    for mode in times:
        on = mode == "auth"
        peer = SnapshotStore("peer", SnapshotStoreConfig(root=tmp / mode / "peer", authenticate=on))
        fetcher = SnapshotStore("fetcher", SnapshotStoreConfig(root=tmp / mode / "fetcher", authenticate=on))
        for s in (peer, fetcher):
            s.set_secret("bench", KEY)
        _write_snapshot(peer.root, mib << 20, ranks)
        await peer.start()
        stores[mode] = (peer, fetcher)
    try:
        for peer, fetcher in stores.values():  # one warm-up fetch each (page cache, sockets)
            assert peer.endpoint is not None
            await _fetch_once(fetcher, peer.endpoint)
        for _ in range(repeats):
            for mode, (peer, fetcher) in stores.items():
                assert peer.endpoint is not None
                times[mode].append(await _fetch_once(fetcher, peer.endpoint))
    finally:
        for peer, _ in stores.values():
            await peer.close()
    return times


def report(times: dict[str, list[float]], mib: int, ranks: int, repeats: int, load: str) -> str:
    auth, plain = statistics.median(times["auth"]), statistics.median(times["plain"])
    ratio = auth / plain
    rows = "\n".join(
        f"| {mode} | {statistics.median(ts) * 1e3:.1f} | {min(ts) * 1e3:.1f} | {max(ts) * 1e3:.1f} | "
        f"{mib / statistics.median(ts):.0f} |"
        for mode, ts in times.items()
    )
    verdict = "within" if ratio <= 1.05 else "ABOVE"
    return f"""# Snapshot fetch with and without authentication

`.venv/bin/python bench/snapshot_auth.py --mib {mib} --ranks {ranks} --repeats {repeats}`

One snapshot of {ranks} shards, {mib} MiB in all, fetched over loopback TCP between two real snapshot
stores, {repeats} times with the HMAC checks and {repeats} times without, alternating (same run).

Host load when the run started (`uptime`): `{load}`

| mode | median ms | min ms | max ms | MiB/s (median) |
|---|---|---|---|---|
{rows}

**Ratio of medians, authenticated / not: {ratio:.3f}** ({verdict} the 1.05 target). The checks are
O(header): one HMAC-SHA256 over the request's fields, one over the reply's file list, a nonce lookup,
a `statvfs` and a listing of the store for the size limit; the file bytes are not MACed.
"""


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mib", type=int, default=256)
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--out", type=Path, default=Path("bench/results/snapshot_auth.md"))
    args = p.parse_args()
    load = subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()
    shm = "/dev/shm" if Path("/dev/shm").is_dir() else None
    with tempfile.TemporaryDirectory(prefix="snapshot-auth-", dir=shm) as tmp:
        times = asyncio.run(measure(args.mib, args.ranks, args.repeats, Path(tmp)))
    text = report(times, args.mib, args.ranks, args.repeats, load)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
