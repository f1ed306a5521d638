"""`make demo`: bring the whole control plane up on one machine and stop it cleanly on Ctrl-C.

1. PostgreSQL and Redis: the configured ones (``DATABASE_URL`` / ``REDIS_URL``) or the embedded ones,
   started here and owned by this process (their URLs are exported to every child).
2. Migrations, demo accounts (admin, operator, viewer) with printed passwords and API tokens.
3. daphne (HTTP + WebSockets), a Celery worker and Celery beat as child processes, supervised: one that
   dies is restarted with back-off, and the console says what died, its exit code and the restart's
   number (:mod:`controlplane.config.system`, the harness the bench and the end-to-end tests share).
4. Node agents (``--agents`` x ``--devices-per-agent`` CPU devices, 4 x 2 by default, 4 x 1 on a host with
   fewer cores than that: :func:`fit_demo_size`) running real Megatron-Core workers.
5. The workload (three GPT tasks of different weights, submitted through the REST API as training
   recipes on the shipped corpus, prepared on first use; ``--data synthetic``: bare shapes on synthetic
   tokens) and a fault schedule that cycles through every failure class (``--fault-every`` seconds;
   ``--no-faults`` turns it off); an agent killed by a node-loss drill is restarted after
   ``--repair-after`` seconds (the node returns). What the control plane does is printed as it happens
   (:mod:`controlplane.config.demo_scenario`).
6. Prints the URLs and the time from command to ready; only Ctrl-C (or SIGTERM) stops the demo: then every
   child and the embedded servers. Settings reach the children in their environments (nothing is
   written into this process's ``os.environ``).
"""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Any

from controlplane.config.demo_scenario import (
    Api,
    ApiError,
    DemoData,
    EventLog,
    FaultSchedule,
    prepare_demo_corpus,
    submit_demo_tasks,
)
from controlplane.config.embedded import state_dir
from controlplane.config.system import System, agent_command


def say(line: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {line}", flush=True)


DEMO_AGENTS = 4
DEMO_DEVICES_PER_AGENT = 2
SMALL_HOST_DEVICES_PER_AGENT = 1


def fit_demo_size(
    agents: int | None, devices_per_agent: int | None, cores: int
) -> tuple[int, int, list[str]]:
    """Agents and devices per agent for the demo: ``agents`` / ``devices_per_agent`` as the operator chose
    them (None: not chosen), else 4 agents x 2 devices, or x 1 device on a host with fewer cores than
    the 8 workers. On 2 cores, 8 workers and 4 warm spares starved the control plane: transitions rolled
    back on their step deadlines and nodes were declared lost; 4 workers keep a node-loss drill and a
    choice for the planner (:func:`~controlplane.config.demo_scenario.demo_tasks` sizes the tasks).

    Returns ``(agents, devices_per_agent, what was done)``; nothing is changed where the operator chose
    either number."""
    if agents is not None or devices_per_agent is not None:
        return (
            DEMO_AGENTS if agents is None else agents,
            DEMO_DEVICES_PER_AGENT if devices_per_agent is None else devices_per_agent,
            [],
        )
    if cores >= DEMO_AGENTS * DEMO_DEVICES_PER_AGENT:
        return DEMO_AGENTS, DEMO_DEVICES_PER_AGENT, []
    workers = DEMO_AGENTS * SMALL_HOST_DEVICES_PER_AGENT
    return (
        DEMO_AGENTS,
        SMALL_HOST_DEVICES_PER_AGENT,
        [
            f"{workers} workers ({DEMO_AGENTS} agents x {SMALL_HOST_DEVICES_PER_AGENT} device), not "
            f"{DEMO_AGENTS * DEMO_DEVICES_PER_AGENT}, on {cores} cores; the tasks sized to match "
            "(pass --agents / --devices-per-agent to choose)"
        ],
    )


OVERSUBSCRIBED_SUSPECT_AFTER_S = 6.0
OVERSUBSCRIBED_LOST_AFTER_S = 12.0
OVERSUBSCRIBED_STRAGGLER_RATIO = 2.0
OVERSUBSCRIBED_WORKER_NICE = 10


def fit_small_host(settings: dict[str, str], workers: int, cores: int) -> list[str]:
    """On a host with fewer cores than demo workers, adapt what CPU starvation would otherwise turn into
    false failures, each only where the operator did not set it (in the environment), by adding it to
    ``settings`` (what the demo's children get):

    - node-health deadlines: CPU-starved agents missed the production ones (suspect 2 s, lost 2.8 s) and
      every node was declared lost at once while the workers started;
    - ``UNICRON_CPU_BIND=task``: unbound, the kernel shares the cores unevenly among the workers, and a
      rank that got less CPU for a few seconds looked like a straggler to its node's monitor; bound by
      task, the ranks of a task share one core evenly;
    - the straggler ratio, 1.5 -> 2: the drills' straggler is 3x slower, host noise is not;
    - ``UNICRON_WORKER_NICE=10``: with the workers at the same priority as the control plane, daphne,
      PostgreSQL and the agents were starved so long that all four nodes fell silent at once (held by
      the mass-silence guard, but every transition meanwhile rolled back).

    Returns what was done, one line each (empty if nothing)."""
    if workers <= cores:
        return []
    said = []
    if "UNICRON_LOST_AFTER_S" not in os.environ and "UNICRON_SUSPECT_AFTER_S" not in os.environ:
        settings["UNICRON_SUSPECT_AFTER_S"] = str(OVERSUBSCRIBED_SUSPECT_AFTER_S)
        settings["UNICRON_LOST_AFTER_S"] = str(OVERSUBSCRIBED_LOST_AFTER_S)
        said.append(
            f"{workers} workers on {cores} cores: node health deadlines relaxed to suspect "
            f"{OVERSUBSCRIBED_SUSPECT_AFTER_S:g} s / lost {OVERSUBSCRIBED_LOST_AFTER_S:g} s "
            "(set UNICRON_LOST_AFTER_S / UNICRON_SUSPECT_AFTER_S to choose)"
        )
    for name, value, line in (
        ("UNICRON_CPU_BIND", "task", "each task's workers bound to one core"),
        (
            "UNICRON_WORKER_NICE",
            str(OVERSUBSCRIBED_WORKER_NICE),
            f"workers run at nice {OVERSUBSCRIBED_WORKER_NICE}, below the control plane",
        ),
        (
            "UNICRON_STRAGGLER_RATIO",
            str(OVERSUBSCRIBED_STRAGGLER_RATIO),
            f"straggler ratio {OVERSUBSCRIBED_STRAGGLER_RATIO:g}x its local peers",
        ),
    ):
        if name not in os.environ:
            settings[name] = value
            said.append(f"{line} (set {name} to choose)")
    return said


def demo_security_env(settings: dict[str, str]) -> None:
    """The demo serves plain HTTP on this host (UNICRON_INSECURE_HTTP=1, unless set) and signs with a
    random SECRET_KEY kept in the state directory (so that sessions survive a restart), unless the
    operator gave SECRET_KEY or SECRET_KEY_FILE. Both go into ``settings`` (what the children get)."""
    if "UNICRON_INSECURE_HTTP" not in os.environ:
        settings["UNICRON_INSECURE_HTTP"] = "1"
    if os.environ.get("SECRET_KEY") or os.environ.get("SECRET_KEY_FILE"):
        return
    path = state_dir() / "secret-key"
    if not path.exists():
        path.touch(mode=0o600)
        path.write_text(secrets.token_urlsafe(50))
    settings["SECRET_KEY_FILE"] = str(path)


DEMO_AGENT_METRICS_PORT = 9101
"""The demo's first agent serves its Prometheus metrics here, the next one on the next port, and so on."""


def demo_metrics_env(settings: dict[str, str]) -> None:
    """``/metrics`` of the demo answers a bearer token (``UNICRON_METRICS_TOKEN``, unless the operator gave
    one or ``UNICRON_METRICS_TOKEN_FILE``): a random one kept in the state directory (0600), which the demo
    prints so that a Prometheus can be pointed at it."""
    if os.environ.get("UNICRON_METRICS_TOKEN") or os.environ.get("UNICRON_METRICS_TOKEN_FILE"):
        return
    path = state_dir() / "metrics-token"
    if not path.exists():
        path.touch(mode=0o600)
        path.write_text(secrets.token_urlsafe(32))
    settings["UNICRON_METRICS_TOKEN_FILE"] = str(path)


def metrics_token(settings: dict[str, str]) -> str:
    path = settings.get("UNICRON_METRICS_TOKEN_FILE") or os.environ.get("UNICRON_METRICS_TOKEN_FILE")
    return Path(path).read_text().strip() if path else os.environ.get("UNICRON_METRICS_TOKEN", "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--host", default=os.environ.get("UNICRON_HOST", "127.0.0.1"))
    parser.add_argument("--port", type=int, default=int(os.environ.get("UNICRON_PORT", "8000")))
    agents_env = os.environ.get("UNICRON_DEMO_AGENTS")
    parser.add_argument(
        "--agents",
        type=int,
        default=int(agents_env) if agents_env else None,
        help=f"node agents (default {DEMO_AGENTS}, or UNICRON_DEMO_AGENTS)",
    )
    parser.add_argument(
        "--devices-per-agent",
        type=int,
        default=None,
        help=f"CPU devices per agent (default {DEMO_DEVICES_PER_AGENT}, or 1 on a host with fewer cores than "
        f"{DEMO_AGENTS * DEMO_DEVICES_PER_AGENT} when --agents is not given either)",
    )
    parser.add_argument("--worker", choices=["megatron", "sim"], default="megatron")
    parser.add_argument("--exit-after-ready", action="store_true", help="stop once everything is up (smoke)")
    parser.add_argument("--no-tasks", action="store_true", help="do not submit the demo tasks")
    parser.add_argument(
        "--data",
        choices=["corpus", "synthetic"],
        default="corpus",
        help="what the demo tasks train on: recipes on the shipped corpus (default) or synthetic tokens",
    )
    parser.add_argument("--no-faults", action="store_true", help="no fault-injection schedule")
    parser.add_argument("--fault-every", type=float, default=60.0, help="seconds between fault drills")
    parser.add_argument("--first-fault-after", type=float, default=45.0)
    parser.add_argument("--repair-after", type=float, default=30.0, help="restart a lost node's agent after")
    args = parser.parse_args(argv)

    started = time.monotonic()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.config.settings")
    settings: dict[str, str] = {}
    demo_security_env(settings)
    demo_metrics_env(settings)
    cores = len(os.sched_getaffinity(0))
    args.agents, args.devices_per_agent, adapted = fit_demo_size(args.agents, args.devices_per_agent, cores)
    workers = args.agents * args.devices_per_agent
    adapted += fit_small_host(settings, workers, cores)
    logs = state_dir() / "logs"
    system = System(logs, host=args.host, port=args.port, settings=settings, say=say)

    stopping = False

    def stop(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)

    try:
        urls = system.start_stores(os.environ.get("DATABASE_URL"), os.environ.get("REDIS_URL"))
        system.migrate()
        import django

        django.setup()  # this process's settings point at the same stores (the embedded ones when unset)
        from controlplane.config.demo_data import (
            ensure_demo_accounts,
            ensure_demo_nodes,
            ensure_demo_schedule,
            wait_for_healthy_nodes,
        )

        accounts = ensure_demo_accounts()
        ensure_demo_schedule()
        system.start_web()
        system.start_worker(concurrency=2, name="worker@%h")
        system.start_beat()
        system.wait_ready(60)
        base = system.base_url
        # Node agents (one per simulated node) connect over the agent link with their node tokens.
        demo_nodes = ensure_demo_nodes(args.agents)
        agent_metrics: dict[str, str] = {}

        def start_agent(node: Any) -> None:
            command = agent_command(
                system.agent_url,
                node.name,
                state_dir() / "agents" / node.name,
                devices=args.devices_per_agent,
                worker=args.worker,
                token_file=node.token_file,
            )
            system.start(node.name, command, env={"UNICRON_AGENT_METRICS_PORT": agent_metrics[node.name]})

        for i, node in enumerate(demo_nodes):
            agent_metrics[node.name] = str(DEMO_AGENT_METRICS_PORT + i)
            start_agent(node)
        nodes_by_name = {node.name: node for node in demo_nodes}
        # a node turns healthy once its agent's warm spare has imported torch and megatron (up to
        # agents.supervisor.WARMING_MAX_S = 30 s; four agents importing at once on a small machine)
        healthy = wait_for_healthy_nodes([n.name for n in demo_nodes], timeout_s=45)
        ready_s = time.monotonic() - started
        print(f"\nUnicron control plane is up in {ready_s:.1f} s", flush=True)
        for adaptation in adapted:
            print(f"  small host     {adaptation}", flush=True)
        print(f"  dashboard      {base}/")
        print(f"  REST API       {base}/api/v1/")
        print(f"  OpenAPI schema {base}/api/schema/   (UI: {base}/api/docs/)")
        print(f"  admin          {base}/admin/")
        print(f"  metrics        {base}/metrics   (Authorization: Bearer {metrics_token(settings)})")
        ports = ", ".join(sorted(agent_metrics.values()))
        print(f"  agent metrics  http://127.0.0.1:<port>/metrics, ports {ports}")
        print(f"  database       {urls['DATABASE_URL']}")
        print(f"  redis          {urls['REDIS_URL']}")
        print(f"  logs           {logs}/")
        print(
            f"  agents         {healthy}/{args.agents} nodes healthy ({args.devices_per_agent} devices each)"
        )
        for account in accounts:
            print(
                f"  login {account.role:<9} user={account.username} password={account.password}"
                f" token={account.token}"
            )
        print(
            "Ctrl-C stops everything; daphne, the Celery worker and beat are restarted if they die.",
            flush=True,
        )
        operator = next(a for a in accounts if a.role == "operator")
        api = Api(base, operator.token)
        schedule: FaultSchedule | None = None
        if not args.no_tasks and not args.exit_after_ready:
            data: DemoData | None = None
            if args.data == "corpus" and args.worker == "megatron":
                data = prepare_demo_corpus(state_dir() / "data", say)
            for task in submit_demo_tasks(api, workers, data):
                say(f"submitted task {task['name']} (weight {task['weight']})")
            if not args.no_faults:
                schedule = FaultSchedule(api, args.fault_every, args.first_fault_after)
                say(f"fault drills every {args.fault_every:.0f} s, first in {args.first_fault_after:.0f} s")
        events = EventLog(api)
        repairs: dict[str, float] = {}
        next_poll = 0.0
        while not stopping and not args.exit_after_ready:
            # daphne, the worker and beat are restarted with back-off; a node agent dying is a drill the
            # control plane must survive: its node is repaired (the agent started again) a while later
            for name in system.supervise():
                repairs[name] = time.monotonic() + args.repair_after
            for name, due in list(repairs.items()):
                if time.monotonic() >= due:
                    del repairs[name]
                    start_agent(nodes_by_name[name])
                    say(f"{name}: agent restarted (node repaired)")
            if time.monotonic() >= next_poll:
                next_poll = time.monotonic() + 1.0
                try:
                    if schedule is not None and (line := schedule.tick()) is not None:
                        say(line)
                    for line in events.poll():
                        say(line)
                except (ApiError, OSError) as exc:
                    say(f"(demo could not reach the API: {exc})")
            time.sleep(0.25)
    except RuntimeError as exc:
        say(f"start-up failed: {exc}")
        return 1
    finally:
        system.stop()  # every child, then the embedded PostgreSQL and Redis if this demo started them
        print("stopped.", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
