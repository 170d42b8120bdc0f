"""SVG snapshots of the Fleet view (simulated hosts in every link state) and of a host's GPU view.

Update after an intended change of the look: pytest tests/test_fleet_snapshots.py --snapshot-update
"""

from __future__ import annotations

import pytest

from tests.fleet_data import StandInFleet, fleet_app, live_fleet, mixed_fleet

pytestmark = pytest.mark.usefixtures("utc")


def test_fleet_80x24(snap_compare) -> None:
    assert snap_compare(fleet_app(StandInFleet([mixed_fleet()], interval=0)), terminal_size=(80, 24))


def test_fleet_200x60(snap_compare) -> None:
    assert snap_compare(fleet_app(StandInFleet([mixed_fleet()], interval=0)), terminal_size=(200, 60))


def test_sixteen_hosts_of_eight_gpus_200x60(snap_compare) -> None:
    states = live_fleet(16, 8, ticks=3)
    assert snap_compare(fleet_app(StandInFleet(states[-1:], interval=0)), terminal_size=(200, 60))


def test_a_hosts_gpu_view_120x40(snap_compare) -> None:
    app = fleet_app(StandInFleet([mixed_fleet()], interval=0))
    assert snap_compare(app, press=["j", "enter"], terminal_size=(120, 40))
