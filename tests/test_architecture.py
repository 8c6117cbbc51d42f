"""The package's shape: the layers are packages, the import graph has no cycles and runs one way
between the layers, and imports sit at module top unless a comment says why (docs/architecture.md)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import prfmap

PACKAGE = Path(prfmap.__file__).resolve().parent
_BELOW_REPORT = {
    "prfmap",
    "prfmap.errors",
    "prfmap.config",
    "prfmap.io",
    "prfmap.engine.catalog",
}
# What each layer may import from prfmap (its own modules always), lowest first. ``cli`` is the top
# layer and may import any of them; everything must also keep the graph free of cycles.
ALLOWED = {
    "prfmap.errors": set(),
    "prfmap.config": set(),
    "prfmap.io": {"prfmap", "prfmap.errors", "prfmap.config"},
    "prfmap.engine": {"prfmap.errors"},
    "prfmap.runtime": {"prfmap.errors"},
    "prfmap.synth": {"prfmap", "prfmap.errors", "prfmap.io"},
    "prfmap.derivatives": _BELOW_REPORT,
    "prfmap.report": _BELOW_REPORT | {"prfmap.derivatives"},
    "prfmap.group": _BELOW_REPORT | {"prfmap.derivatives", "prfmap.report", "prfmap.runtime"},
    "prfmap.participant": {
        "prfmap",
        "prfmap.errors",
        "prfmap.config",
        "prfmap.io",
        "prfmap.engine",
        "prfmap.runtime",
        "prfmap.derivatives",
        "prfmap.report",
    },
    "prfmap.stimulus": {"prfmap", "prfmap.errors", "prfmap.config", "prfmap.io"},
}
# Function-level imports that must stay where they are, with the reason in a comment above them.
DEFERRED_IMPORTS = {
    ("prfmap", "importlib.metadata"),
    ("prfmap.cli.console", "prfmap.cli.run"),
    ("prfmap.cli.run", "prfmap.participant.level"),
    ("prfmap.cli.run", "prfmap.group"),
    ("prfmap.cli.run", "prfmap.report.rebuild"),
    ("prfmap.io.spaces", "templateflow.conf"),
    ("prfmap.io.meshes", "templateflow.conf"),
    ("prfmap.io.area_labels", "templateflow.conf"),
    ("prfmap.io.area_labels", "nilearn"),
    ("prfmap.cli.stimulus", "prfmap.stimulus"),
    ("prfmap.cli.stimulus", "prfmap.stimulus.output"),
    ("prfmap.cli.stimulus", "prfmap.stimulus.qc"),
    ("prfmap.cli.synth", "prfmap.synth.dataset"),
    ("prfmap.engine", "keras"),
    ("prfmap.engine.backend", "keras"),
    ("prfmap.participant.fit", "prfmap.engine"),
    ("prfmap.participant.checkpoint", "prfmap.engine"),
    ("prfmap.participant.checkpoint", "prfmap.engine.estimate.sigma_prior"),
    ("prfmap.participant.checkpoint", "prfmap.engine.fit.sigma_prior"),
    ("prfmap.participant.crossval", "prfmap.engine"),
    ("prfmap.participant.connective", "prfmap.engine.connective"),
}


def modules() -> dict[str, ast.Module]:
    """Every module of the package by dotted name (a package by its own name), parsed."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = ast.parse(path.read_text(), filename=str(path))
    return out


def imported(tree: ast.AST, known: set[str]) -> Iterator[tuple[ast.stmt, str]]:
    """Every import under ``tree`` (function-level and ``TYPE_CHECKING`` ones too): the module of
    the package it names (``from prfmap.io import bold`` names ``prfmap.io.bold``), else the
    imported name."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node, alias.name
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, "prfmap imports by absolute names"
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                yield node, full if full in known else str(node.module)


def graph() -> dict[str, set[str]]:
    trees = modules()
    known = set(trees)
    return {
        name: {target for _, target in imported(tree, known) if target in known and target != name}
        for name, tree in trees.items()
    }


def allowed(target: str, names: set[str]) -> bool:
    """Whether ``target`` is one of ``names`` or a module inside one of them (``prfmap.engine.catalog``
    allows ``prfmap.engine.catalog.bounds``); a layer's name allows only the layer's package itself."""
    return (
        target in names
        or any(target.startswith(name + ".") for name in names if name not in ALLOWED and name != "prfmap")
        or layer(target) in names
    )


def layer(name: str) -> str | None:
    return next((key for key in ALLOWED if name == key or name.startswith(key + ".")), None)


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(edges[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def test_the_walker_sees_every_kind_of_import() -> None:
    edges = graph()
    assert "prfmap.io.bold" in edges["prfmap.participant.load"]  # module top
    assert "prfmap.participant.level" in edges["prfmap.cli.run"]  # inside a function
    assert {"prfmap.io.geometry", "prfmap.errors"} <= edges["prfmap.io.bold"]
    tangled = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(tangled) == [["a", "b", "c"]]


def test_the_layers_are_packages() -> None:
    layers = (
        "io",
        "engine",
        "runtime",
        "derivatives",
        "report",
        "participant",
        "group",
        "synth",
        "stimulus",
        "cli",
    )
    for layer_name in layers:
        assert (PACKAGE / layer_name / "__init__.py").is_file(), layer_name
    loose = sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem not in ("__init__", "errors", "config"))
    assert loose == [], f"modules outside the layers: {loose}"


def test_no_import_cycles() -> None:
    assert cycles(graph()) == []


def test_layers_import_only_downwards() -> None:
    wrong = []
    for name, targets in graph().items():
        own = layer(name)
        if own is None:
            continue
        for target in targets:
            if layer(target) != own and not allowed(target, ALLOWED[own]):
                wrong.append(f"{name} imports {target}")
    assert wrong == []


def test_imports_sit_at_module_top() -> None:
    inner = set()
    known = set(modules())
    for name, tree in modules().items():
        for func in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)):
            inner.update((name, target, node.lineno) for node, target in imported(func, known))
    unexpected = sorted(f"{n}:{line} imports {t}" for n, t, line in inner if (n, t) not in DEFERRED_IMPORTS)
    assert unexpected == []
    for name, _, line in inner:
        base = PACKAGE.parent / name.replace(".", "/")
        source = (base / "__init__.py" if base.is_dir() else base.with_suffix(".py")).read_text().splitlines()
        comment = source[line - 2].strip()
        assert comment.startswith("#") and len(comment) > 20, f"{name}:{line} needs a one-line reason"


def test_the_engine_is_its_extension_points() -> None:
    """The engine's top holds its packages (each an extension point with its contract in
    ``__init__``) and at most six loose modules shared by every stage."""
    engine = PACKAGE / "engine"
    loose = sorted(p.stem for p in engine.glob("*.py") if p.stem != "__init__")
    assert len(loose) <= 6, loose
    packages = {p.name for p in engine.iterdir() if (p / "__init__.py").is_file()}
    assert {
        "catalog",
        "models",
        "solvers",
        "noise",
        "hrf",
        "stimulus",
        "kernels",
        "fit",
        "estimate",
        "backend",
    } <= packages


def test_only_the_backend_reads_the_environment() -> None:
    """The engine's switches (KERAS_BACKEND's default, PRFMAP_COMPILE) are read in
    ``engine/backend/`` alone: nothing else in the engine touches ``os.environ`` or ``os.getenv``."""
    readers = []
    for path in sorted((PACKAGE / "engine").rglob("*.py")):
        if "backend" in path.relative_to(PACKAGE / "engine").parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv", "putenv"):
                readers.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert readers == []


# The engine's process-wide state: the compiled functions (keyed by kernel and model, as jax.jit keys
# its own) and one instance per model name, which those keys need. Problems and grid predictions are
# kept in a FitCache their caller owns; a registry (catalog.MODELS...) is public data, not a cache.
PROCESS_WIDE = {"prfmap.engine.batching._COMPILED", "prfmap.engine.models._INSTANCES"}
REGISTRIES = {
    f"prfmap.engine.catalog.{name}" for name in ("MODELS", "PARAMETERS", "REFINERS", "NOISE_MODELS")
}


def test_the_engine_keeps_no_hidden_cache() -> None:
    """A module-level name the engine's functions write into (``NAME[key] = ...``, ``NAME.append``...)."""
    found = set()
    for name, tree in modules().items():
        if not name.startswith("prfmap.engine"):
            continue
        module_names = {
            t.id for node in tree.body if isinstance(node, ast.Assign | ast.AnnAssign)
            for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
            if isinstance(t, ast.Name)
        }  # fmt: skip
        for node in ast.walk(tree):
            written = None
            if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store | ast.Del):
                written = node.value
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                if node.func.attr in ("append", "clear", "pop", "setdefault", "update", "insert"):
                    written = node.func.value
            if isinstance(written, ast.Name) and written.id in module_names:
                found.add(f"{name}.{written.id}")
    assert found == PROCESS_WIDE | REGISTRIES


# Functions that still take more than 8 parameters (issue 32 allows at most 3: the three whose
# keyword-only options mirror the command line). The list only shrinks: a new one fails the test.
LONG_PARAMETER_LISTS = {
    "io.bids.find_inputs",
    "io.datasets.inputs_config",
    "report.methods.methods_text",
}


def test_no_new_long_parameter_lists() -> None:
    found = set()
    for name, tree in modules().items():
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                args = node.args
                count = len(args.posonlyargs) + len(args.args) + len(args.kwonlyargs)
                count -= bool(args.args and args.args[0].arg in ("self", "cls"))
                if count > 8:
                    found.add(f"{name.removeprefix('prfmap.')}.{node.name}")
    assert found <= LONG_PARAMETER_LISTS, sorted(found - LONG_PARAMETER_LISTS)
    assert found == LONG_PARAMETER_LISTS, (
        f"shortened: drop {sorted(LONG_PARAMETER_LISTS - found)} from the list"
    )


def test_the_engine_tests_mirror_the_engine_packages() -> None:
    """Each folder of tests/engine/ is named for the engine package it tests."""
    tests = Path(__file__).resolve().parent / "engine"
    folders = {p.name for p in tests.iterdir() if p.is_dir() and any(p.glob("test_*.py"))}
    packages = {p.name for p in (PACKAGE / "engine").iterdir() if (p / "__init__.py").exists()}
    assert folders and folders <= packages, sorted(folders - packages)


# What runs before a fit needs the engine's compiled code: the command line, the participant level's
# discovery, loading and preprocessing, the group level, the report rebuilt from maps on disk.
BEFORE_THE_FIT = (
    "prfmap.cli.run",
    "prfmap.participant.level",
    "prfmap.participant.load",
    "prfmap.group",
    "prfmap.report.rebuild",
    "prfmap.engine.catalog.result",
)


def test_no_backend_is_imported_before_a_fit_needs_it() -> None:
    """Importing them loads neither Keras nor a framework (Keras' import alone took 9.6 s)."""
    code = (
        "import importlib, sys\n"
        "from prfmap.engine.backend import select_backend\n"
        "select_backend('jax', nprocs=2, device='cpu', omp_threads=2)  # as the command line does\n"
        f"for name in {BEFORE_THE_FIT!r}:\n"
        "    importlib.import_module(name)\n"
        "print(' '.join(m for m in ('keras', 'jax', 'torch', 'tensorflow') if m in sys.modules))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(PACKAGE.parent)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == []
