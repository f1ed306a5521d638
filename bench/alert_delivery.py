"""How long an alert takes to reach a flaky pager: alert raised -> webhook delivered, through retries.

    DATABASE_URL=... REDIS_URL=... .venv/bin/python bench/alert_delivery.py [--repeats 5] [--start-worker]

Against a live system (``make demo`` or a deployment: the Celery worker and the database it uses), or
with ``--start-worker`` a Celery worker of its own on ``DATABASE_URL`` / ``REDIS_URL`` (migrated). It
starts a local HTTP receiver that answers every delivery 500, 500, then 200, creates a webhook route to
it that takes sev1 alerts, raises ``--repeats`` sev1 alerts through ``incidents.services.do_raise_alert``
(so the real on-commit enqueue, Celery worker, claim, backoff and signature are measured), resolves each
once its firing is delivered, and reports, per alert:

- **first request** (s): alert committed -> the receiver got the first attempt (enqueue + worker pickup);
- **delivered** (s): alert committed -> the receiver answered 200 to the third attempt;
- **attempts** and the **gaps** between them (the worker's ``UNICRON_ALERT_RETRY_BASE_S`` backoff, then
  twice it), and whether every request's signature verified;
- **resolution delivered** (s): alert resolved -> the receiver answered 200 to its resolution.

The bench raises real sev1 alerts: it refuses to run while another enabled route would take them (a
real pager) unless ``--allow-other-routes``. It deletes its route and resolves its alerts at the end.
Writes ``bench/results/alert_delivery.md``.
"""

from __future__ import annotations

import argparse
import itertools
import os
import platform
import signal
import statistics
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.config.settings")

import django  # noqa: E402

django.setup()

from controlplane.apps.incidents.choices import Severity  # noqa: E402
from controlplane.apps.incidents.models import Alert  # noqa: E402
from controlplane.apps.incidents.services import do_raise_alert, do_resolve_alert  # noqa: E402
from controlplane.apps.notifications.models import AlertDelivery, AlertRoute  # noqa: E402
from controlplane.apps.notifications.rules import route_matches  # noqa: E402
from controlplane.apps.notifications.signing import verify  # noqa: E402

RESULTS = REPO / "bench" / "results" / "alert_delivery.md"
SCRIPT = (500, 500, 200)


@dataclass
class Receiver:
    """Answers each delivery (by X-Unicron-Delivery) 500, 500, then 200; records when and whether signed."""

    secret: str
    hits: dict[str, list[tuple[float, int, bool]]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    server: ThreadingHTTPServer | None = None

    def start(self) -> str:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                signed = verify(body, receiver.secret, self.headers.get("X-Unicron-Signature", ""))
                key = self.headers.get("X-Unicron-Delivery", "?")
                with receiver.lock:
                    seen = receiver.hits.setdefault(key, [])
                    status = SCRIPT[min(len(seen), len(SCRIPT) - 1)]
                    seen.append((time.time(), status, signed))
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{self.server.server_address[1]}/pager"

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


def start_worker(log: Path) -> subprocess.Popen[bytes]:
    out = open(log, "wb")  # noqa: SIM115 - owned by the child; a fresh log: "ready." must be this run's
    cmd = [sys.executable, "-m", "celery", "-A", "controlplane.config.celery", "worker", "--concurrency=2"]
    cmd += ["--without-gossip", "--without-mingle", "--without-heartbeat", "-l", "INFO"]
    process = subprocess.Popen(cmd, cwd=str(REPO), stdout=out, stderr=out, start_new_session=True)
    deadline = time.monotonic() + 180
    while "ready." not in log.read_text(errors="replace"):
        if process.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"the Celery worker did not start; see {log}")
        time.sleep(0.2)
    return process


def wait_settled(delivery: AlertDelivery, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        delivery.refresh_from_db()
        if delivery.state in ("sent", "failed") or time.monotonic() > deadline:
            return
        time.sleep(0.02)


def measure_one(receiver: Receiver, index: int, timeout_s: float) -> dict[str, Any]:
    t0 = time.time()
    alert = do_raise_alert(Severity.SEV1, f"bench: alert delivery probe {index}")
    delivery = AlertDelivery.objects.get(alert=alert)
    wait_settled(delivery, timeout_s)
    # then the operator resolves it: the resolution goes to the same route, through the same retries
    resolved_at = time.time()
    do_resolve_alert(None, alert, "bench probe")
    resolution = AlertDelivery.objects.filter(alert=alert, event="resolved").first()
    resolution_s = None
    if resolution is not None:
        wait_settled(resolution, timeout_s)
        answered = receiver.hits.get(str(resolution.pk), [])
        resolution_s = next((t - resolved_at for t, status, _ in answered if status == 200), None)
    hits = receiver.hits.get(str(delivery.pk), [])
    times = [t for t, _, _ in hits]
    return {
        "alert": alert,
        "state": delivery.state,
        "attempts": delivery.attempts,
        "first_request_s": times[0] - t0 if times else None,
        "delivered_s": next((t - t0 for t, status, _ in hits if status == 200), None),
        "gaps_s": [b - a for a, b in itertools.pairwise(times)],
        "signed": all(signed for _, _, signed in hits) and bool(hits),
        "statuses": [status for _, status, _ in hits],
        "resolution_s": resolution_s,
    }


def report(rows: list[dict[str, Any]], started_worker: bool) -> str:
    flag = " --start-worker" if started_worker else ""
    base = os.environ.get("UNICRON_ALERT_RETRY_BASE_S", "5")

    def fmt(x: float | None) -> str:
        return "—" if x is None else f"{x:.3f}"

    lines = [
        "# Alert delivery: sev1 alert and its resolution -> a webhook answering 500, 500, 200",
        "",
        f"Run {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {platform.node()} ({os.cpu_count()} cores), "
        f"`python bench/alert_delivery.py --repeats {len(rows)}{flag}`; "
        f"worker backoff base `UNICRON_ALERT_RETRY_BASE_S={base}` "
        "(as seen by this process; the worker's own environment decides).",
        "",
        "| alert | state | attempts | answers | first request (s) | delivered (s) | gaps (s) | signed "
        "| resolution delivered (s) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['alert'].pk} | {r['state']} | {r['attempts']} | {', '.join(map(str, r['statuses']))} "
            f"| {fmt(r['first_request_s'])} | {fmt(r['delivered_s'])} "
            f"| {', '.join(f'{g:.3f}' for g in r['gaps_s'])} | {'yes' if r['signed'] else 'NO'} "
            f"| {fmt(r['resolution_s'])} |"
        )
    delivered = [r["delivered_s"] for r in rows if r["delivered_s"] is not None]
    first = [r["first_request_s"] for r in rows if r["first_request_s"] is not None]
    lines += [""]
    if delivered and first:
        lines.append(
            f"Median: first request after {statistics.median(first):.3f} s, delivered after "
            f"{statistics.median(delivered):.3f} s ({len(delivered)}/{len(rows)} delivered). The backoff "
            f"alone is {3 * float(base):g} s (base + twice the base, if the worker runs with base {base} s); "
            "the rest is enqueue and pickup of the first message plus each retry's scheduling overhead. "
            "Each alert is then resolved; its resolution goes to the same route through the same 500, 500, "
            "200 (the last column: resolve -> the receiver's 200)."
        )
    else:
        lines.append(f"Nothing was delivered ({len(rows)} alerts): is a Celery worker running?")
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--timeout-s", type=float, default=120.0, help="per alert")
    p.add_argument("--start-worker", action="store_true", help="run a Celery worker of its own")
    p.add_argument("--allow-other-routes", action="store_true", help="other routes will get the sev1 alerts")
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args()

    others = [
        r.name
        for r in AlertRoute.objects.filter(enabled=True)
        if route_matches(r.min_severity, r.severities, r.kinds, "sev1", "")
    ]
    if others and not args.allow_other_routes:
        raise SystemExit(
            f"enabled routes {others} would get the bench's sev1 alerts; --allow-other-routes to go on"
        )
    secret = uuid.uuid4().hex
    receiver = Receiver(secret)
    url = receiver.start()
    route = AlertRoute.objects.create(
        name=f"bench-pager-{secret[:8]}", min_severity="sev1", destination="webhook", url=url, secret=secret
    )
    worker = start_worker(REPO / ".run" / "bench_alert_delivery_worker.log") if args.start_worker else None
    alerts: list[Alert] = []
    try:
        rows = []
        for i in range(args.repeats):
            row = measure_one(receiver, i, args.timeout_s)
            alerts.append(row["alert"])
            rows.append(row)
            print(
                f"alert {row['alert'].pk}: {row['state']} after {row['attempts']} attempts "
                f"{row['statuses']}, first request {row['first_request_s']}, delivered {row['delivered_s']}",
                flush=True,
            )
        text = report(rows, worker is not None)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
        print(text)
    finally:
        route.delete()  # before resolving what is left: no more requests to the bench's receiver
        for alert in alerts:
            alert.refresh_from_db()
            if alert.state != "resolved":
                do_resolve_alert(None, alert, "bench probe")
        receiver.stop()
        if worker is not None:
            os.killpg(worker.pid, signal.SIGTERM)
            worker.wait(timeout=30)


if __name__ == "__main__":
    main()
