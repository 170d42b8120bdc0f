"""The launch form's hosts field: checked like --hosts, and a group launch from the Runs view."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from textual.widgets import Input

from gpumon.tui.views.runs.launch_form import LaunchForm
from tests.conftest import make_app, notes, open_launch_form, pilot_until
from tests.test_multinode import STANDIN


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GPUMON_HOME", str(tmp_path / "launcher"))
    monkeypatch.setenv("GPUMON_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("STANDIN_ROOT", str(tmp_path / "hosts"))
    monkeypatch.setenv("GPUMON_SSH", f"{sys.executable} {STANDIN}")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    return tmp_path


async def test_hosts_field_names_the_mistake_and_a_dead_host_starts_nothing(home: Path, monkeypatch) -> None:
    monkeypatch.setenv("STANDIN_DOWN", "gpu9")
    app = make_app(gpus=1)
    async with app.run_test(size=(80, 24)) as pilot:
        form = await open_launch_form(pilot)
        hosts = form.query_one("#hosts", Input)
        hosts.focus()  # enter launches from a text field (on the kind list it opens the list)
        hosts.value = "gpu1"
        await pilot.press("enter")
        error = form.query_one("#form-error")
        assert app.screen is form and "hosts: name two hosts or more" in str(error.render())
        hosts.value = "gpu1,-x"
        await pilot.press("enter")
        assert app.screen is form and "a host name has letters" in str(error.render())
        hosts.value = "n0,gpu9"
        await pilot.press("enter")
        assert not isinstance(app.screen, LaunchForm)
        # the launch runs in a thread worker (ssh); its notice comes through the event loop
        await pilot_until(pilot, lambda: any("gpu9" in n for n in notes(app)), "no notice", 90)
        messages = notes(app)
        (text,) = [m for m in messages if "gpu9" in m]
        assert text.endswith(
            "host unreachable (ssh: connect to host gpu9 port 22: Connection refused); nothing was started"
        )
    assert not (home / "hosts" / "n0" / "state" / "runs").exists()
