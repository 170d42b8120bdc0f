"""The core never imports Textual; the monitor's start path never imports torch or ray; no import cycles."""

from __future__ import annotations

import ast
import functools
import json
import os
import pkgutil
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

import gpumon

ROOT = Path(gpumon.__file__).parent
UI_PACKAGES = ("gpumon.tui",)
# Ray is imported in these and nowhere else: the callback and stopper subclass Tune's, the runner drives Tune;
# gpumon --ray's driver (a child process of its own), its poller and the agent it pins to each node.
RAY_MODULES = (
    *("gpumon.tune.callback", "gpumon.tune.stopper", "gpumon.tune.runner"),
    *("gpumon.core.fleet.ray_driver", "gpumon.core.fleet.ray_nodes", "gpumon.core.fleet.ray_agent"),
)


def core_modules() -> list[str]:
    names = []
    for info in pkgutil.walk_packages([str(ROOT)], prefix="gpumon."):
        if not info.name.startswith(UI_PACKAGES):
            names.append(info.name)
    return names


def test_core_modules_exist() -> None:
    names = core_modules()
    assert "gpumon.core.gpu.nvml" in names and "gpumon.cli" in names and "gpumon.cli.common" in names
    assert "gpumon.core.doctor.classifier" in names and "gpumon.core.doctor.advice_types" in names


@functools.cache
def _nodes(path: Path) -> tuple[ast.AST, ...]:
    """Every node of a source file, parsed once for all the rules here (~280 files: seconds on a loaded machine)."""
    return tuple(ast.walk(ast.parse(path.read_text(), str(path))))


def imported_packages(path: Path) -> set[str]:
    """The top-level packages a source file imports, anywhere in it (lazy imports included)."""
    names: set[str] = set()
    for node in _nodes(path):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_no_core_source_file_imports_textual() -> None:
    offenders = [
        str(path)
        for path in ROOT.rglob("*.py")
        if "tui" not in path.relative_to(ROOT).parts and "textual" in imported_packages(path)
    ]
    assert offenders == []


def test_importing_every_core_module_leaves_textual_torch_ray_unloaded() -> None:
    code = (
        "import importlib, sys\n"
        f"for name in {core_modules()!r}:\n"
        f"    if not name.endswith('.__main__') and name not in {RAY_MODULES!r}: importlib.import_module(name)\n"
        "print(sorted(m for m in ('textual', 'torch', 'ray') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_monitor_start_path_never_imports_torch_or_ray() -> None:
    code = "import sys, gpumon.cli, gpumon.tui.app; print([m for m in ('torch', 'ray') if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_only_gpumon_tune_imports_ray_and_search_files_are_checked_without_it() -> None:
    offenders = []
    for path in ROOT.rglob("*.py"):
        module = ".".join(("gpumon", *path.relative_to(ROOT).with_suffix("").parts))
        if "ray" in imported_packages(path) and module not in RAY_MODULES:
            offenders.append(module)
    assert offenders == []
    code = "import sys, gpumon.tune, gpumon.core.searches.search_file, gpumon.cli.tune; print('ray' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"  # the package itself stays light until GpumonCallback is used


def _module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Each module of the package at ``root`` (gpumon/) and the modules of that package it imports.

    Every ``import``/``from ... import`` anywhere in the file counts, lazy ones inside functions included:
    they still make a cycle at run time, only later. ``if TYPE_CHECKING:`` imports count too (no false
    positive today; a type-only cycle still ties the two modules together). ``from a.b import c`` is an
    edge to ``a.b.c`` when that is a module, else to ``a.b``; ``import a.b.c`` to ``a.b.c``; relative
    imports are resolved first. The parent packages Python runs on the way are not edges.
    """
    files = {_module_name(path, root): path for path in root.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets: set[str] = set()
        for node in _nodes(path):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                    base = f"{anchor}.{base}" if base else anchor
                targets.update(f"{base}.{a.name}" if f"{base}.{a.name}" in files else base for a in node.names)
        edges = set()
        for target in targets:
            while target and target not in files:  # an attribute path falls back to its module
                target = target.rpartition(".")[0]
            if target and target != name:
                edges.add(target)
        graph[name] = edges
    return graph


def find_cycle(graph: Mapping[str, Iterable[str]]) -> list[str] | None:
    """A cycle as [a, b, ..., a], each importing the next, or None. Depth first, in name order."""
    done: set[str] = set()
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt in path:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in done and (found := visit(nxt)):
                return found
        path.pop()
        done.add(node)
        return None

    for node in sorted(graph):
        if node not in done and (found := visit(node)):
            return found
    return None


def test_find_cycle_finds_one_in_a_tiny_graph() -> None:
    graph = {"a": {"b"}, "b": {"c", "d"}, "c": {"a"}, "d": set(), "e": {"a"}}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    assert find_cycle({"x": {"x"}}) == ["x", "x"]
    graph["c"] = {"d"}
    assert find_cycle(graph) is None


def test_import_graph_counts_lazy_relative_and_from_package_imports(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    sources = {
        "__init__.py": "from pkg.sub import leaf\n",
        "a.py": "import os\nfrom pkg import b\n\ndef later():\n    from .sub.leaf import NAME\n",
        "b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pkg.sub\nfrom . import a\n",
        "sub/__init__.py": "",
        "sub/leaf.py": "from .. import b\nfrom ..a import later\nNAME = 1\n",
    }
    for name, text in sources.items():
        (pkg / name).write_text(text)
    assert import_graph(pkg) == {
        "pkg": {"pkg.sub.leaf"},
        "pkg.a": {"pkg.b", "pkg.sub.leaf"},
        "pkg.b": {"pkg.a", "pkg.sub"},
        "pkg.sub": set(),
        "pkg.sub.leaf": {"pkg.b", "pkg.a"},
    }
    assert find_cycle(import_graph(pkg)) == ["pkg.a", "pkg.b", "pkg.a"]


def test_no_import_cycle_in_gpumon() -> None:
    graph = import_graph()
    assert "gpumon.tui.app" in graph["gpumon.cli.monitor"]  # a lazy import inside a function is an edge
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or ())


def upward_imports(graph: Mapping[str, Iterable[str]]) -> list[str]:
    """Edges from the core (gpumon.core) up to the code that runs in the user's processes or drives Ray Tune."""
    return [
        f"{module} -> {target}"
        for module, targets in graph.items()
        if module.startswith("gpumon.core")
        for target in targets
        if target.startswith(("gpumon.telemetry", "gpumon.tune"))
    ]


def test_upward_imports_finds_an_arrow_back_up() -> None:
    graph = {"gpumon.core.runs.a": {"gpumon.telemetry.census", "gpumon.core.protocol"}, "gpumon.tune.b": {"x"}}
    assert upward_imports(graph) == ["gpumon.core.runs.a -> gpumon.telemetry.census"]


def test_core_never_imports_telemetry_or_tune() -> None:
    """What the ranks and the supervisor share is gpumon.core.protocol; the search file is gpumon.core.searches."""
    assert upward_imports(import_graph()) == []


PLACES_MACHINERY = ("gpumon.core.slurm", "gpumon.core.queue", "gpumon.core.nodes")


def test_the_runs_room_never_names_a_place() -> None:
    """Where a run lives is its Placement's (gpumon/core/placement/): the runs room asks it, and never imports
    Slurm's, the queue's or a group's own machinery (docs/architecture.md)."""
    graph = import_graph()
    naming = sorted(
        f"{module} -> {target}"
        for module, targets in graph.items()
        if module.startswith("gpumon.core.runs")
        for target in targets
        if target.startswith(PLACES_MACHINERY)
    )
    assert naming == []


def view_of(module: str) -> str | None:
    """'gpumon.tui.views.runs.run_table' -> 'runs'; None outside a view's folder (the registry included)."""
    parts = module.split(".")
    return parts[3] if len(parts) > 4 and parts[:3] == ["gpumon", "tui", "views"] else None


def test_no_view_imports_another_view() -> None:
    graph = import_graph()
    views = {view_of(m) for m in graph} - {None}
    assert {"gpus", "runs", "trials", "doctor"} <= views
    crossings = [
        f"{module} -> {target}"
        for module, targets in graph.items()
        if view_of(module)
        for target in targets
        if view_of(target) not in (None, view_of(module))
    ]
    assert crossings == []


def test_no_shared_widget_or_core_module_imports_a_view() -> None:
    graph = import_graph()
    offenders = [
        f"{module} -> {target}"
        for module, targets in graph.items()
        if not module.startswith(("gpumon.tui.views", "gpumon.tui.app"))
        for target in targets
        if target.startswith("gpumon.tui.views")
    ]
    assert offenders == []


def test_view_of_names_the_view_folder() -> None:
    assert view_of("gpumon.tui.views.runs.run_table") == "runs"
    assert view_of("gpumon.tui.views.runs") is None  # the folder's own __init__ is its package, not a part
    assert view_of("gpumon.tui.views") is None and view_of("gpumon.tui.widgets.charts") is None


# What the cheap commands and every run's supervisor must not load (issue 35): the tests and scripts call them by
# the hundred, and each module is paid for at every call. The doctor's classifier and advice, the queue's keeper
# and planner, Slurm's submission: each loads where used (a failed run's diagnosis, a queued run, a Slurm job).
HEAVY = ("torch", "ray", "textual", "gpumon.tui", "gpumon.core.doctor.classifier", "gpumon.core.doctor.advice")
HEAVY += ("gpumon.core.queue.keeper", "gpumon.core.queue.plan", "gpumon.core.slurm.launch")
HEAVY += ("gpumon.core.doctor.slurm_end",)
FOLDING = (
    "gpumon.core.doctor.leak",
    "gpumon.core.doctor.leak_detector",
    "gpumon.core.runs.reading.telemetry",
)  # what a run not ended needs


def _loaded(home: Path, code: str, of: tuple[str, ...] = HEAVY) -> list[str]:
    """The modules among ``of`` that a fresh interpreter holds after running ``code`` with GPUMON_HOME=home."""
    code += "\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    env = {**os.environ, "GPUMON_HOME": str(home), "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    loaded = json.loads(done.stdout.splitlines()[-1])
    return [m for m in loaded if m in of or m.startswith(tuple(f"{name}." for name in of))]


def _command(*args: str) -> str:
    """``gpumon ARGS`` run in the interpreter, its output and exit swallowed."""
    return (
        "import contextlib, io\nfrom gpumon.cli import main\n"
        f"with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n    main({list(args)!r})"
    )


def test_cheap_commands_and_the_supervisor_load_only_what_they_use(tmp_path: Path) -> None:
    from tests.test_runs_view import FINISHED, record_runs

    record_runs(tmp_path, live=False)  # ended runs: the first listing reads their files and indexes them
    assert _loaded(tmp_path, _command("runs")) == []
    # from then on they come from the index: nothing is folded, no leak watch is made
    assert _loaded(tmp_path, _command("runs", "--json"), HEAVY + FOLDING) == []
    for args in (["runs"], ["stop", FINISHED], ["logs", FINISHED], ["launch", "--help"]):
        assert _loaded(tmp_path, _command(*args)) == [], args
    assert _loaded(tmp_path, "import gpumon.core.runs.supervision.supervisor") == []


MODULE_LINES_MAX = 400  # the guide's rule: a module past it is split along a seam
APP_LINES_MAX = 250  # app.py switches views and hands on the feeds; what grows there gets a module (issue 50 item 13)


def test_no_module_is_past_400_lines_and_the_app_under_250() -> None:
    sizes = {str(path.relative_to(ROOT)): len(path.read_text().splitlines()) for path in ROOT.rglob("*.py")}
    assert {name: n for name, n in sizes.items() if n > MODULE_LINES_MAX} == {}
    assert sizes["tui/app.py"] < APP_LINES_MAX


def test_no_module_outside_the_adapter_reaches_a_textual_private() -> None:
    """Textual's private parts are reached in gpumon/tui/textual_private/ only (issue 50 item 14): imported from a
    private module, read, set or overridden (tests/textual_names.py says how that is told)."""
    from tests.textual_names import all_reaches

    assert [str(reach) for reach in all_reaches(inside_adapter=False)] == []
