"""Several hosts over ssh (``launch --hosts``, the launch form's hosts; core/nodes/group.py): ``Hosts`` starts one
node per host, each an ordinary run there with the group's rendezvous (its place there: ``Node``); the group
(its nodes, stopping them all) is kept where it was launched."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from gpumon.core.placement.base import Launch, PlaceName
from gpumon.core.placement.local import Local

if TYPE_CHECKING:
    from gpumon.core.fleet.hosts import Host
    from gpumon.core.nodes.group import Group
    from gpumon.core.nodes.remote import Reach
    from gpumon.core.runs.record.spec import RunSpec


class Node(Local):
    """One node of a group, on its host: a local run whose spec names the group."""

    name: PlaceName = "nodes"


class Hosts:
    """The group's launch: the place chosen with its hosts, as the queue is with its options (``Queued(...)``).
    Its launch gives the group, not a run: each node's run lives on its host."""

    name: PlaceName = "nodes"

    def __init__(self, hosts: Sequence[Host], reach: Reach | None = None, rdzv_host: str | None = None) -> None:
        self.hosts = list(hosts)
        self.reach = reach  # None: the user's ssh and gpumon as the fleet reads them ([fleet], $GPUMON_SSH)
        self.rdzv_host = rdzv_host

    def launch(self, spec: RunSpec, how: Launch) -> Group:
        """Start one node per host; on any host's failure stop what started and raise GroupError naming it."""
        from gpumon.core.nodes.group import configured_reach, launch_group

        reach = self.reach if self.reach is not None else configured_reach(None)
        return launch_group(spec, self.hosts, reach, how.store.root, self.rdzv_host)
