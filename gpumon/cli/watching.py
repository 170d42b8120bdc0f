"""The print-and-repeat loop of the ``--watch`` commands (``gpumon fleet``, ``gpumon fleet --slurm``)."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable


def print_until_stopped(show: Callable[[bool], None], watch: bool, interval: float) -> None:
    """``show(first)`` once, or every ``interval`` s while watching, until Ctrl-C or the reader leaves
    (``| head``, ssh closed): both are the normal end of a watch."""
    first = True
    try:
        while True:
            show(first)
            if not watch:
                return
            first = False
            time.sleep(interval)
    except KeyboardInterrupt:
        return
    except BrokenPipeError:
        # stdout goes to /dev/null so the interpreter's last flush cannot raise again at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
