"""One node of a group started over ssh (``launch --hosts``, core/nodes/group.py): on its host a local run,
with the group's rendezvous; the group (its nodes, stopping them all) is kept where it was launched."""

from __future__ import annotations

from gpumon.core.placement.base import PlaceName
from gpumon.core.placement.local import Local


class Node(Local):
    name: PlaceName = "nodes"
