"""numpydoc sections on every public function of the engine, io, and the participant and group levels.

A public function with arguments documents them under ``Parameters``, and one that returns a value
documents it under ``Returns`` (or ``Yields``). Properties are attributes (their one line suffices).
Two kinds of function share the documentation of the interface they implement: a method that
overrides a documented method of a base class of the package (``DoGModel.neural`` is
``PRFModel.neural``), and a backend module's implementation of :class:`prfmap.engine.backend.BackendModule`.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import prfmap
from prfmap.engine.backend import BackendModule

PACKAGE = Path(prfmap.__file__).resolve().parent
DOCUMENTED = ("engine", "io", "participant", "group")
BACKEND_MODULES = {"jax.py", "torch.py", "tensorflow.py"}
INTERFACE = {name for name in dir(BackendModule) if not name.startswith("_")}


def _classes(tree: ast.Module, seen: frozenset[Path] = frozenset()) -> dict[str, ast.ClassDef]:
    """The classes of a module, and those it imports from prfmap (a base may live elsewhere)."""
    found = {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("prfmap."):
            base = PACKAGE.parent / node.module.replace(".", "/")
            source = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
            if not source.is_file() or source in seen:  # a package's module imports its package
                continue
            theirs = _classes(ast.parse(source.read_text()), seen | {source})
            found.update(
                {a.name: theirs[a.name] for a in node.names if a.name in theirs and a.name not in found}
            )
    return found


def _methods(tree: ast.Module) -> dict[str, set[str]]:
    """The methods of each class a module defines or imports from prfmap."""
    return {
        name: {f.name for f in node.body if isinstance(f, ast.FunctionDef)}
        for name, node in _classes(tree).items()
    }


def _bases(node: ast.ClassDef) -> list[str]:
    """The names of a class's bases (``Solver[LMState]`` is ``Solver``)."""
    bases = [b.value if isinstance(b, ast.Subscript) else b for b in node.bases]
    return [b.id for b in bases if isinstance(b, ast.Name)]


def _arguments(node: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    args = node.args
    names = [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs if a.arg not in ("self", "cls")]
    return names + [a.arg for a in (args.vararg, args.kwarg) if a is not None]


def _implements_backend(path: Path, name: str) -> bool:
    return path.name in BACKEND_MODULES and path.parent.name == "backend" and name in INTERFACE


def _inherited(
    cls: ast.ClassDef | None, name: str, methods: dict[str, set[str]], classes: dict[str, ast.ClassDef]
) -> bool:
    """Whether ``cls`` overrides a method ``name`` of one of its bases (which documents it)."""
    pending = _bases(cls) if cls is not None else []
    while pending:
        base = pending.pop()
        if name in methods.get(base, ()):
            return True
        if base in classes:
            pending += _bases(classes[base])
    return False


def missing_sections(path: Path) -> list[str]:
    """``function: Parameters/Returns`` for every public function of ``path`` that lacks a section."""
    tree = ast.parse(path.read_text())
    methods = _methods(tree)
    classes = _classes(tree)
    found = []

    def visit(body: list[ast.stmt], cls: ast.ClassDef | None) -> None:
        for node in body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                visit(node.body, node)
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) or node.name.startswith("_"):
                continue
            decorators = {getattr(d, "id", getattr(d, "attr", "")) for d in node.decorator_list}
            if decorators & {"property", "cached_property"} or _inherited(cls, node.name, methods, classes):
                continue
            if cls is None and _implements_backend(path, node.name):
                continue
            arguments = [a.arg for a in node.args.posonlyargs + node.args.args + node.args.kwonlyargs]
            arguments = (
                [a for a in arguments if a not in ("self", "cls")]
                + ([node.args.vararg.arg] if node.args.vararg else [])
                + ([node.args.kwarg.arg] if node.args.kwarg else [])
            )
            doc = ast.get_docstring(node) or ""
            name = f"{cls.name}.{node.name}" if cls is not None else node.name
            if arguments and "Parameters\n----------" not in doc:
                found.append(f"{name}: Parameters")
            returns = node.returns
            none = returns is None or (isinstance(returns, ast.Constant) and returns.value is None)
            if not none and "Returns\n-------" not in doc and "Yields\n------" not in doc:
                found.append(f"{name}: Returns")

    visit(tree.body, None)
    return found


@pytest.mark.parametrize(
    "path",
    sorted(p for layer in DOCUMENTED for p in (PACKAGE / layer).rglob("*.py")),
    ids=lambda p: str(p.relative_to(PACKAGE)),
)
def test_public_functions_have_numpydoc_sections(path: Path) -> None:
    assert missing_sections(path) == []


def test_the_check_sees_a_missing_section(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        'class Base:\n    def f(self, x):\n        """F.\n\n        Parameters\n        ----------\n'
        '        x : int\n            A number.\n        """\n\nclass Child(Base):\n    def f(self, x):\n'
        '        return x\n\ndef g(y) -> int:\n    """G."""\n    return y\n'
    )
    assert missing_sections(module) == ["g: Parameters", "g: Returns"]
