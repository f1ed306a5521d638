"""Measure the shape of the code: import cycles, apps that import each other, the largest modules, and the
path a worker's crash report takes through the modules.

    python tools/architecture.py                  # the static figures (every import, function-local too)
    python tools/architecture.py --json out.json  # the same, as JSON

Static figures come from the source alone (``ast``): an import anywhere in a module — at the top, inside a
function, under ``TYPE_CHECKING`` — is an edge from that module to the project module it names. A cycle is a
strongly connected component of more than one module. ``--trace`` runs ``tests/e2e/crash_path_probe.py`` (a
worker crash reported over the real agent link, handled, its commands acknowledged and the new epoch
reported, in one process under a profile hook) against ``DATABASE_URL``/``REDIS_URL`` or the embedded
servers, and prints the project modules the crash passed through, in the order they were first entered,
and how many times the path came back to a module it had left (consecutive calls within one module are one
step), for every project module and for the orchestration modules alone (apps and live, without the pure
core); and the calls on that path that go against the layers (into a component above the caller's: the apps'
layers as the import-linter contract in ``pyproject.toml`` states them, the transport above them, the pure
core below), which no import allows, so each is a registered callback or a signal.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import subprocess
import sys
import tempfile
import tomllib
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("controlplane", "agents")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            found[module_name(path)] = path
    return found


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The longest project module that ``name`` is or lies inside (``a.b.c`` → ``a.b`` if ``c`` is a name)."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def imports_of(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            names = [f"{base}.{alias.name}" for alias in node.names] + [base]
        for name in names:
            target = _resolve(name, modules)
            if target is not None and target != module:
                found.add(target)
    return found


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative; components of more than one node, sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    result: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work: list[tuple[str, Iterable[str]]] = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in graph:
                    continue
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    result.append(sorted(component))
    return sorted(result)


SERVER_SIDE = {"controlplane.live"}
"""Components counted beside the Django apps in the both-ways figure: the transport may depend on the apps,
never the reverse."""


def _counted(component: str) -> bool:
    return component in SERVER_SIDE or component.startswith("controlplane.apps.")


def component_of(module: str) -> str:
    """The unit the app-level figures count: ``controlplane.apps.<app>``, ``controlplane.live``, ...."""
    parts = module.split(".")
    if parts[:2] == ["controlplane", "apps"] and len(parts) > 2:
        return ".".join(parts[:3])
    return ".".join(parts[:2])


@dataclass
class Figures:
    modules: int
    import_edges: int
    cycles: list[list[str]]
    modules_in_cycles: int
    app_pairs_both_ways: list[list[str]]
    app_imports: int
    largest_modules: list[tuple[str, int]]


def measure() -> Figures:
    modules = project_modules()
    graph = {name: imports_of(name, path, modules) for name, path in modules.items()}
    cycles = strongly_connected(graph)
    apps: dict[str, set[str]] = defaultdict(set)
    for source, targets in graph.items():
        for target in targets:
            a, b = component_of(source), component_of(target)
            if a != b and _counted(a) and _counted(b):
                apps[a].add(b)
    both = sorted(
        {tuple(sorted((a, b))) for a, targets in apps.items() for b in targets if a in apps.get(b, set())}
    )
    sizes = sorted(
        ((name, len(path.read_text().splitlines())) for name, path in modules.items()),
        key=lambda item: -item[1],
    )
    return Figures(
        modules=len(modules),
        import_edges=sum(len(t) for t in graph.values()),
        cycles=cycles,
        modules_in_cycles=sum(len(c) for c in cycles),
        app_pairs_both_ways=[list(pair) for pair in both],
        app_imports=sum(len(t) for t in apps.values()),
        largest_modules=sizes[:5],
    )


def app_layers() -> list[set[str]]:
    """The apps' layers, top first, as the import-linter contract in ``pyproject.toml`` states them."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    for contract in config["tool"]["importlinter"]["contracts"]:
        if contract.get("type") == "layers" and contract.get("containers") == ["controlplane.apps"]:
            return [
                {f"controlplane.apps.{app.strip()}" for app in layer.split("|")}
                for layer in contract["layers"]
            ]
    raise SystemExit("pyproject.toml has no layers contract for controlplane.apps")


def layer_rank(component: str, layers: list[set[str]]) -> int | None:
    """0 for the transport (the agent link and the dashboard's sockets), then the apps' layers, the pure core
    last; None for a component outside the layering: the agents, and the configuration, whose logging filters
    and settings every layer reaches by design."""
    if component == "controlplane.live":
        return 0
    for i, layer in enumerate(layers):
        if component in layer:
            return i + 1
    if component == "controlplane.core":
        return len(layers) + 1
    return None


def calls_against_the_layers(calls: list[list[object]]) -> list[tuple[str, str, int]]:
    """Of the traced calls between project modules, those into a component of a higher layer than the
    caller's: the loop does not read in one direction where they happen (the import contracts forbid such
    imports, so each goes through a signal, a callback or a task queue)."""
    layers = app_layers()
    out = []
    for caller, callee, n in calls:
        if not (isinstance(caller, str) and isinstance(callee, str) and isinstance(n, int)):
            raise TypeError(f"a traced call is [caller, callee, count], not {[caller, callee, n]}")
        a, b = layer_rank(component_of(caller), layers), layer_rank(component_of(callee), layers)
        if a is not None and b is not None and b < a:
            out.append((caller, callee, n))
    return out


def trace_crash_path() -> dict[str, object]:
    """Run the crash-path probe in a pytest process of its own; returns what it wrote."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "crash_path.json"
        env = dict(os.environ, UNICRON_TRACE_OUT=str(out), UNICRON_INSECURE_HTTP="1")
        command = [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "tests/e2e/crash_path_probe.py",
        ]
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0 or not out.exists():
            raise SystemExit(f"the crash-path probe failed:\n{done.stdout[-4000:]}\n{done.stderr[-2000:]}")
        result: dict[str, object] = json.loads(out.read_text())
        return result


def print_trace(trace: dict[str, object]) -> None:
    for scope in ("all", "orchestration"):
        figures = trace[scope]
        assert isinstance(figures, dict)
        print(
            f"crash path ({scope}): {figures['distinct_modules']} modules, {figures['steps']} steps, "
            f"{figures['returns']} returns to a module already left"
        )
        print("  " + " > ".join(str(m).removeprefix("controlplane.") for m in figures["order"]))
    calls = trace["calls"]
    assert isinstance(calls, list)
    between = {(component_of(a), component_of(b)) for a, b, _ in calls if component_of(a) != component_of(b)}
    upward = calls_against_the_layers(calls)
    print(
        f"calls between components on the crash path: {len(between)} pairs; against the layers: "
        f"{len(upward)} module pairs ({sum(n for _, _, n in upward)} calls)"
    )
    for caller, callee, n in upward:
        print(f"  - {caller} -> {callee} ({n}x)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument("--trace", action="store_true", help="also trace a worker crash through the modules")
    args = parser.parse_args()
    figures = measure()
    print(f"project modules: {figures.modules}, import edges: {figures.import_edges}")
    print(f"import cycles: {len(figures.cycles)} ({figures.modules_in_cycles} modules)")
    for cycle in figures.cycles:
        print("  - " + " <-> ".join(cycle))
    print(
        f"imports between components (apps, live): {figures.app_imports}; pairs both ways: "
        f"{len(figures.app_pairs_both_ways)}"
    )
    for a, b in figures.app_pairs_both_ways:
        print(f"  - {a} <-> {b}")
    print("largest modules (lines):")
    for name, lines in figures.largest_modules:
        print(f"  {lines:6d}  {name}")
    result: dict[str, object] = asdict(figures)
    if args.trace:
        trace = trace_crash_path()
        print_trace(trace)
        result["crash_path"] = {
            k: trace[k] for k in ("all", "orchestration", "commands", "transition", "calls")
        }
        result["crash_path_against_the_layers"] = calls_against_the_layers(trace["calls"])  # type: ignore[arg-type]
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
