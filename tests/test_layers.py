"""The layout is the architecture: each folder of daemon/ is a layer, and no module imports from a
layer above its own, nor is there any import circle (at module level or inside functions).

Layers, bottom up: ``daemon.base`` < ``daemon.engine`` < ``daemon.service`` < the faces
(``daemon.cli``, ``daemon.http``, ``pipeline``). ``daemon.devnode`` (the local Cassandra launcher) is
tooling beside them: it may import ``daemon.base`` only. Handlers import only the public API.

Above the faces: ``daemon.testing`` (the harness tests and the bench share: it starts daemons) may
import any of those, never the bench or the tests; ``bench`` may import the harness and everything
below it, never the tests; the tests, on top, may import anything.

Inside the engine the packages are ranked too (``ENGINE_RANK``, bottom up): none imports a package ranked
above it, so no two packages import each other.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

RANK = {
    "daemon.base": 0,
    "daemon.devnode": 1,
    "daemon.engine": 1,
    "daemon.service": 2,
    "daemon.cli": 3,
    "daemon.http": 3,
    "pipeline": 3,
    "daemon.testing": 4,
    "handlers": 4,
    "bench": 5,
    "tests": 6,
}
# The engine's packages, and its two modules beside them, bottom up: each imports only those before it.
ENGINE_RANK = [
    "daemon.engine.storage",
    "daemon.engine.access",
    "daemon.engine.queues",
    "daemon.engine.schedules",
    "daemon.engine.cluster",
    "daemon.engine.wake",
    "daemon.engine.send",
    "daemon.engine.take",
    "daemon.engine.consume",
    "daemon.engine.delivery",
    "daemon.engine.observe",
    "daemon.engine.stores",
    "daemon.engine.operations",
    "daemon.engine.client",
]
# The package root only re-exports the public API (handler, registry, client, producer).
PUBLIC = {"daemon", "daemon.client", "daemon.producer"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    found = {}
    for top in ("daemon", "pipeline", "handlers", "bench", "tests"):
        for path in (ROOT / top).rglob("*.py"):
            found[module_name(path)] = path
    return found


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """Every project module this one imports, wherever in the file the import stands."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                out.add(target)
    return out


def layer_of(name: str) -> str | None:
    for layer in sorted(RANK, key=len, reverse=True):
        if name == layer or name.startswith(layer + "."):
            return layer
    return None


def engine_package(name: str) -> str | None:
    """The ranked engine package (or module) ``name`` belongs to; None outside the engine and for its root."""
    parts = name.split(".")
    return ".".join(parts[:3]) if parts[:2] == ["daemon", "engine"] and len(parts) > 2 else None


def graph() -> dict[str, set[str]]:
    found = modules()
    return {name: imports_of(name, path, set(found)) for name, path in found.items()}


def test_no_module_imports_from_a_layer_above_its_own() -> None:
    wrong = []
    for name, deps in graph().items():
        mine = layer_of(name)
        if mine is None:
            continue
        for dep in deps:
            theirs = layer_of(dep)
            if dep in PUBLIC and RANK[mine] >= RANK["daemon.service"]:
                continue
            if theirs is not None and RANK[theirs] > RANK[mine]:
                wrong.append(f"{name} ({mine}) imports {dep} ({theirs})")
            if mine == "daemon.devnode" and theirs not in (None, "daemon.base", "daemon.devnode"):
                wrong.append(f"{name} (tooling) imports {dep}")
            if mine == "handlers" and not (dep in PUBLIC or dep.startswith("handlers")):
                wrong.append(f"{name} (a handler) imports {dep}: use the public API (daemon, daemon.client)")
    assert not wrong, "\n".join(sorted(wrong))


def test_no_engine_package_imports_one_ranked_above_it() -> None:
    wrong = []
    for name, deps in graph().items():
        mine = engine_package(name)
        if mine is None:
            continue
        if mine not in ENGINE_RANK:
            wrong.append(f"{mine} is not in ENGINE_RANK: rank it among the engine's packages")
            continue
        for dep in deps:
            theirs = engine_package(dep)
            if theirs in ENGINE_RANK and ENGINE_RANK.index(theirs) > ENGINE_RANK.index(mine):
                wrong.append(f"{name} ({mine}) imports {dep} ({theirs}, ranked above it)")
    assert not wrong, "\n".join(sorted(set(wrong)))


def test_no_import_circle() -> None:
    deps = graph()
    # The package roots re-export their children; an edge into a package's own __init__ from a
    # child is the ordinary parent-import and not a circle of concepts.
    edges = {n: {d for d in ds if not n.startswith(d + ".")} for n, ds in deps.items()}
    state: dict[str, int] = {}
    stack: list[str] = []
    circles: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                circles.append(" -> ".join(stack[stack.index(nxt) :] + [nxt]))
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node)
    assert not circles, "import circles:\n" + "\n".join(circles)


def test_public_imports_of_the_readme_still_work() -> None:
    from daemon import Backoff, Handler, Poison, Retry, register  # noqa: F401
    from daemon.client import Casque
    from daemon.engine.client import Casque as EngineCasque
    from daemon.producer import Job

    assert Casque is EngineCasque and Job.__name__ == "Job"
