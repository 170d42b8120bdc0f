"""The collector kept off the keys' path: what the app builds to keep (its views, the help, the launch form)
is frozen out of the garbage collector once drawn.

Python's full collection walks every object the app holds (about 140,000 once the views are built: widgets,
styles, drawn cells); it came every few seconds of keys and took 100-400 ms, the keys' slowest draws (the p90).
``gc.freeze`` moves the objects alive now to a generation no collection walks (O(1)); what is built later is
collected as before. Called a few times only (each view's first showing, the help, the form): a cycle of
garbage alive at that moment would stay, so never on each key.
"""

from __future__ import annotations

import gc

from textual.dom import DOMNode


def release() -> None:
    """The app ends: what it froze goes back to the collector (a test process runs many apps)."""
    gc.unfreeze()


def keep_built(node: DOMNode) -> None:
    """Freeze what exists once ``node`` (just built) has been drawn."""
    node.call_after_refresh(gc.freeze)
