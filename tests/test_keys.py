"""Keys: a signal key means nothing else anywhere; the help is generated from the bindings and follows the keymap."""

from __future__ import annotations

from textual.binding import Binding

from gpumon.tui.app_keys import FOOTNOTE, GLOBAL_BINDINGS, help_sections
from gpumon.tui.keys import help_text
from gpumon.tui.views import VIEWS
from gpumon.tui.widgets.screens import HelpScreen
from tests.conftest import make_app

SIGNAL_ACTIONS = ("signal(", "stop_run(")  # SIGTERM/SIGKILL/SIGINT to a process or to a run's processes


def scopes() -> dict[str, list[Binding]]:
    """Every binding, by where it acts: the app (everywhere) and each view (with its parts)."""
    out = {"app": [b for b in GLOBAL_BINDINGS if isinstance(b, Binding)]}
    for view in VIEWS:
        owners = (view, *view.HELP_WIDGETS)
        out[view.NAME] = [b for w in owners for b in w.BINDINGS if isinstance(b, Binding)]  # type: ignore[attr-defined]
        for title, screen in view.HELP_SCREENS:  # a full screen's keys act only there: a scope of its own
            out[title] = [b for b in screen.BINDINGS if isinstance(b, Binding)]
    return out


def keys_of(binding: Binding) -> set[str]:
    return {k.strip() for k in binding.key.split(",")}


def test_a_key_that_sends_a_signal_means_nothing_else_in_any_view() -> None:
    every = [(scope, b) for scope, bindings in scopes().items() for b in bindings]
    signal_keys = {k for _, b in every if b.action.startswith(SIGNAL_ACTIONS) for k in keys_of(b)}
    assert {"T", "K", "I"} <= signal_keys
    for scope, binding in every:
        if keys_of(binding) & signal_keys:
            assert binding.action.startswith(SIGNAL_ACTIONS), (scope, binding.key, binding.action)


def test_one_meaning_per_key_within_a_view_and_the_app() -> None:
    app_keys = {k for b in scopes()["app"] for k in keys_of(b)}
    full_screens = {title for view in VIEWS for title, _ in view.HELP_SCREENS}
    for scope, bindings in scopes().items():
        seen: dict[str, str] = {}
        for binding in bindings:
            for key in keys_of(binding):
                assert seen.setdefault(key, binding.action) == binding.action, (scope, key)
                if scope != "app" and not (key == "q" and binding.action == "close" and scope in full_screens):
                    # a full screen's q closes it, as q leaves less and the help screen; it never quits from there
                    assert key not in app_keys, f"{key} in {scope} shadows a global key"


def test_the_help_lists_every_binding_of_every_view() -> None:
    text = help_text(help_sections(), {}, FOOTNOTE)
    for bindings in scopes().values():
        for binding in bindings:
            assert (binding.tooltip or binding.description) in text, binding.id
    for view in VIEWS:
        assert view.TITLE in text and view.HELP_NOTE in text


async def test_the_help_screen_shows_a_remapped_key() -> None:
    app = make_app(gpus=1, keymap={"terminate": "ctrl+t"})
    async with app.run_test(size=(120, 60)) as pilot:
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        sigterm = [line for line in app.screen.text.splitlines() if "send SIGTERM" in line]
        assert len(sigterm) == 1 and sigterm[0].split()[0] == "ctrl+t"


async def test_a_key_still_on_its_way_when_the_app_has_closed_goes_nowhere() -> None:
    """Beside CPU hogs, keys typed ahead (`r e`, held by typeahead.py until the Runs view is up) were still on
    their way when the app closed: Textual asked for the screen on top of an empty stack and the app died with
    ScreenStackError (test_launch_form, test_key_paths under load). Both ways a key reaches the app, here once
    its screens are gone."""
    from textual import events

    app = make_app(gpus=1)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("r")
    assert not app.screen_stack
    await app.on_event(events.Key("e", "e"))  # read by the app
    bubbled = events.Key("e", "e")
    bubbled._forwarded = True  # back up from the screen it went to
    await app.on_event(bubbled)
