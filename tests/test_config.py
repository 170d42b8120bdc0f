"""User keymaps: remap keys by binding id; mistakes get one line and exit 2."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpumon.core.config import BINDING_IDS, ConfigError, load_keymap
from gpumon.tui.app_keys import GLOBAL_BINDINGS
from gpumon.tui.views import VIEWS
from gpumon.tui.widgets.screens import ConfirmScreen
from tests.conftest import make_app, notes


def test_keymap_ids_are_exactly_the_tui_binding_ids() -> None:
    owners = [w for v in VIEWS for w in (v, *v.HELP_WIDGETS, *(screen for _, screen in v.HELP_SCREENS))]
    bindings = [*GLOBAL_BINDINGS, *(b for w in owners for b in w.BINDINGS)]  # type: ignore[attr-defined]
    declared = {b.id for b in bindings if b.id}  # type: ignore[union-attr]
    assert declared == set(BINDING_IDS)


def test_missing_file_means_default_keys(tmp_path: Path) -> None:
    assert load_keymap(tmp_path / "keymap.toml") == {}


def test_valid_keymap_loads(tmp_path: Path) -> None:
    path = tmp_path / "keymap.toml"
    path.write_text('[keymap]\nterminate = "x"\nquit = "ctrl+x,Q"\n')
    assert load_keymap(path) == {"terminate": "x", "quit": "ctrl+x,Q"}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[keymap\n", "not valid TOML"),
        ('[keymap]\nexplode = "x"\n', "unknown binding 'explode'"),
        ("[keymap]\nquit = 3\n", "needs a key string"),
        ('keymap = "q"\n', "must be a table"),
    ],
)
def test_bad_keymaps_say_what_is_wrong(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "keymap.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message) as info:
        load_keymap(path)
    assert str(path) in str(info.value)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('explode = "x"', "unknown binding 'explode'"),
        ('sort = "a"', "sort = 'a' is already 'all_gpus' in the GPUs view: pick another key"),
    ],
)
def test_cli_refuses_a_bad_keymap_in_one_line(tmp_path: Path, line: str, message: str) -> None:
    (tmp_path / "keymap.toml").write_text(f"[keymap]\n{line}\n")
    env = {**os.environ, "GPUMON_CONFIG_DIR": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, "-m", "gpumon", "--simulate", "1"], capture_output=True, text=True, env=env, timeout=30
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and "keymap.toml" in lines[0], lines


async def test_remapped_key_takes_over() -> None:
    app = make_app(gpus=1)
    app.set_keymap({"terminate": "x"})
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("tab", "T")
        assert not any("SIGTERM" in n for n in notes(app))  # T means nothing now
        await pilot.press("x")
        assert not isinstance(app.screen, ConfirmScreen)  # a simulated process: refused at once
        assert any("nothing to send SIGTERM" in n for n in notes(app))


def test_a_keymap_that_gives_one_key_two_meanings_is_refused() -> None:
    from gpumon.tui.app_keys import keymap_problems

    assert keymap_problems({}) == []
    assert keymap_problems({"terminate": "ctrl+t"}) == []
    assert keymap_problems({"terminate": "x"}) == []  # x is Trials' stop, but in another view
    assert keymap_problems({"terminate": "s"}) == [
        "terminate = 's' is already 'sort' in the GPUs view: pick another key"
    ]
    assert keymap_problems({"census": "q"}) == ["census = 'q' is already 'quit' everywhere: pick another key"]
