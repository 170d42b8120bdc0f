"""The core never imports Textual; the monitor's start path never imports torch or ray."""

from __future__ import annotations

import ast
import pkgutil
import subprocess
import sys
from pathlib import Path

import gpumon

ROOT = Path(gpumon.__file__).parent
UI_PACKAGES = ("gpumon.tui",)
# Ray is imported in these and nowhere else: the callback and stopper subclass Tune's, the runner drives Tune.
RAY_MODULES = ("gpumon.tune.callback", "gpumon.tune.stopper", "gpumon.tune.runner")


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


def imported_packages(path: Path) -> set[str]:
    """The top-level packages a source file imports, anywhere in it (lazy imports included)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
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
    code = "import sys, gpumon.tune, gpumon.tune.search_file, gpumon.cli.tune; print('ray' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"  # the package itself stays light until GpumonCallback is used
