"""gpumon's telemetry bootstrap: the launcher puts this folder first on a run's PYTHONPATH.

Python imports ``sitecustomize`` at start-up, so every Python process of the run
(torchrun's ranks, mp.spawn's workers, accelerate's, a subprocess) gets the lazy
hooks: whichever steps becomes a rank, with per-step memory samples, its loss and
an exception record, without any change to the training script; the others write
nothing. It must never break the script: any failure here is swallowed. Another
``sitecustomize`` later on the path is still run.
"""

import importlib.machinery
import importlib.util
import os
import sys


def _chain() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


try:
    from gpumon.telemetry import autohooks

    autohooks.install()
except Exception as err:  # noqa: BLE001 - the user's run matters more than our telemetry
    sys.stderr.write(f"gpumon: telemetry bootstrap off: {err}\n")

try:
    _chain()
except Exception as err:  # noqa: BLE001
    sys.stderr.write(f"gpumon: another sitecustomize failed: {err}\n")
