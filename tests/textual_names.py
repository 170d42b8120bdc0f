"""Which names of Textual are private, and where gpumon reaches them (tests/test_architecture.py,
tests/test_textual_private.py).

A name is Textual's private when it starts with one underscore and Textual defines it: a module
(``textual._xterm_parser``), or a method, class attribute or instance attribute (``self._x = ...``) of a class in
Textual. gpumon reaches one where it imports a private module, or where an attribute access, a method it defines, or
a ``getattr``-style string names a private of a Textual class that the accessed object's class derives from, or (on
an object that is not ``self``) a private that Textual defines and gpumon never does.
"""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
from dataclasses import dataclass
from pathlib import Path

import textual

import gpumon

ROOT = Path(gpumon.__file__).parent
ADAPTER = "tui/textual_private"  # the one place allowed to reach Textual's private parts


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


@functools.cache
def textual_privates() -> frozenset[str]:
    """Every private name Textual's source defines: methods, class attributes, ``self._x`` stores, module names."""
    names: set[str] = set()
    for path in Path(textual.__file__).parent.rglob("*.py"):
        if _private(path.stem):
            names.add(path.stem)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and _private(node.name):
                names.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and _private(node.attr):
                names.add(node.attr)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and _private(node.target.id):
                names.add(node.target.id)
            elif isinstance(node, ast.Assign):
                names.update(t.id for t in node.targets if isinstance(t, ast.Name) and _private(t.id))
    return frozenset(names)


@functools.cache
def _class_privates(cls: type) -> frozenset[str]:
    """The private names a Textual class and its Textual bases define (class attributes, ``self._x`` stores)."""
    names: set[str] = set()
    for base in cls.__mro__:
        if not base.__module__.startswith("textual"):
            continue
        names.update(n for n in vars(base) if _private(n) and not n.startswith(f"_{base.__name__}__"))
        try:
            source = inspect.getsource(base)
        except (OSError, TypeError):
            continue
        for node in ast.walk(ast.parse(inspect.cleandoc("\n" + source) if source[0].isspace() else source)):
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and _private(node.attr):
                names.add(node.attr)
    return frozenset(names)


@dataclass(frozen=True)
class Reach:
    path: str
    line: int
    name: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line} {self.name}"


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.cache
def _own_names() -> frozenset[str]:
    """Private names gpumon gives its own objects: ``self._x`` stores and methods, outside Textual subclasses too."""
    names: set[str] = set()
    for path in ROOT.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and _private(node.name):
                names.add(node.name)
            elif (
                isinstance(node, ast.Attribute)
                and isinstance(node.ctx, ast.Store)
                and isinstance(node.value, ast.Name)
                and node.value.id == "self"
            ):
                names.add(node.attr)
    return frozenset(names)


def _textual_classes(module: object, class_node: ast.ClassDef) -> frozenset[str]:
    """The Textual privates ``class_node``'s class inherits (empty for a class with no Textual base)."""
    cls = getattr(module, class_node.name, None)
    if not isinstance(cls, type):
        return frozenset()
    return _class_privates(cls)


def reaches(path: Path) -> list[Reach]:
    """Where the source file at ``path`` reaches a private of Textual."""
    rel = str(path.relative_to(ROOT))
    tree = ast.parse(path.read_text())
    found: list[Reach] = []
    privates, own = textual_privates(), _own_names()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "textual":
            if any(_private(part) for part in node.module.split(".")):
                found.append(Reach(rel, node.lineno, node.module))
            found += [Reach(rel, node.lineno, a.name) for a in node.names if _private(a.name)]
        elif isinstance(node, ast.Import):
            found += [
                Reach(rel, node.lineno, a.name)
                for a in node.names
                if a.name.split(".")[0] == "textual" and any(_private(p) for p in a.name.split("."))
            ]
    module = None
    classes = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]
    inherited: dict[ast.AST, frozenset[str]] = {}
    if classes:
        module = importlib.import_module(_module_name(path))
        for class_node in classes:
            names = _textual_classes(module, class_node)
            for inner in ast.walk(class_node):
                inherited.setdefault(inner, names)
    for node in ast.walk(tree):
        names = inherited.get(node, frozenset())
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name in names:
            found.append(Reach(rel, node.lineno, f"def {node.name}"))  # overrides Textual's private method
        elif isinstance(node, ast.Attribute) and _private(node.attr):
            on_self = isinstance(node.value, ast.Name) and node.value.id in ("self", "cls") and bool(names)
            if (on_self and node.attr in names) or (not on_self and node.attr in privates and node.attr not in own):
                found.append(Reach(rel, node.lineno, node.attr))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "setattr", "hasattr", "delattr")
            and len(node.args) > 1
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            and node.args[1].value in privates
            and node.args[1].value not in own
        ):
            found.append(Reach(rel, node.lineno, node.args[1].value))
    return found


def all_reaches(inside_adapter: bool) -> list[Reach]:
    """Every reach in gpumon/tui (the core never imports Textual: test_architecture.py), inside the adapter or out."""
    out: list[Reach] = []
    for path in sorted((ROOT / "tui").rglob("*.py")):
        if (ADAPTER in str(path.relative_to(ROOT))) == inside_adapter:
            out += reaches(path)
    return out
