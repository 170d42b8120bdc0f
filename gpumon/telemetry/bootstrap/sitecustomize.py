"""gpumon's telemetry bootstrap: the launcher puts this folder first on a run's PYTHONPATH.

Python imports ``sitecustomize`` at start-up, so every Python process of the run
(torchrun's ranks, mp.spawn's workers, accelerate's, a subprocess) gets the lazy
hooks: whichever steps becomes a rank, with per-step memory samples, its loss and
an exception record, without any change to the training script; the others write
nothing. It must never break the script: any failure here is swallowed. Another
``sitecustomize`` later on the path is still run.
"""

import contextlib
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


def _whole_lines() -> None:
    """Each line written whole, as in a terminal. The launcher runs Python unbuffered (-u, PYTHONUNBUFFERED) so
    logs stream; unbuffered, print() writes each piece and its newline apart, and the lines of processes that
    share the log's pipe (mp.spawn workers) cut into each other. Line-buffered, a line (or a progress bar's
    ``\r``) goes out in one write, as soon as it ends. Needs no gpumon: a foreign Python of the run gets it too."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None and not stream.isatty():
            reconfigure(line_buffering=True, write_through=False)


with contextlib.suppress(Exception):  # a stream of another kind: left as it is
    _whole_lines()

try:
    from gpumon.telemetry import autohooks

    autohooks.install()
except Exception as err:  # noqa: BLE001 - the user's run matters more than our telemetry
    sys.stderr.write(f"gpumon: telemetry bootstrap off: {err}\n")

try:
    _chain()
except Exception as err:  # noqa: BLE001
    sys.stderr.write(f"gpumon: another sitecustomize failed: {err}\n")
