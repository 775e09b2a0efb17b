"""Tab keys as a real terminal sends them (issue 30): the raw escape sequences of xterm,
tmux and the VS Code terminal read by Textual's own parser, then handled by the app while
an input has the focus; and, where tmux is installed, the app run in tmux with the
sequences sent as bytes.

The Pilot's `press("alt+5")` hands the app a key Textual's parser never makes from
ESC 5 (it reads ESC+digit as a macOS Option character and types it), so these tests go
through the parser."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

pytest.importorskip("textual")

from textual._xterm_parser import XTermParser  # noqa: E402
from textual.widgets import Input, TabbedContent  # noqa: E402

from cope_tui.app.app import TABS, CopeApp  # noqa: E402
from cope_tui.app.panes.export import PASTE_HINT  # noqa: E402
from tests.test_app import make_app, make_services, settle  # noqa: E402

# What xterm, tmux (TERM screen or tmux-256color) and VS Code's xterm.js send.
F_KEYS = {"f2": "\x1bOQ", "f3": "\x1bOR", "f4": "\x1bOS", "f5": "\x1b[15~", "f6": "\x1b[17~", "f7": "\x1b[18~"}
CTRL_PAGE = {"ctrl+pageup": "\x1b[5;5~", "ctrl+pagedown": "\x1b[6;5~"}
ESC_DIGIT = {f"alt+{i}": f"\x1b{i}" for i in range(1, 7)}  # alt+digit with meta sending ESC


def parsed(sequence: str) -> list:  # type: ignore[no-untyped-def]
    parser = XTermParser()
    return [*parser.feed(sequence), *parser.feed("")]


def bound_keys() -> dict[str, str]:
    """key -> action of the app's bindings."""
    return {key.strip(): b.action for b in CopeApp.BINDINGS for key in b.key.split(",")}


def test_the_tab_keys_terminals_send_parse_to_bound_keys():
    bound = bound_keys()
    for (key, sequence), tab in zip(F_KEYS.items(), TABS):
        [event] = parsed(sequence)
        assert event.key == key and bound[key] == f"show_tab('{tab}')"
    for key, sequence in CTRL_PAGE.items():
        [event] = parsed(sequence)
        assert event.key == key and bound[key].startswith("cycle_tab(")


def test_esc_digit_is_no_binding_so_it_is_not_the_advertised_key():
    """Why alt+digit is kept only for the kitty keyboard protocol: ESC+digit, what alt+digit
    sends elsewhere, arrives as a printable character, not as alt+digit."""
    bound = bound_keys()
    for sequence in ESC_DIGIT.values():
        [event] = parsed(sequence)
        assert event.key not in bound and event.is_printable
    [kitty] = parsed("\x1b[53;3u")  # alt+5 under the kitty protocol
    assert bound[kitty.key] == "show_tab('results')"


async def feed(pilot, sequence: str) -> None:  # type: ignore[no-untyped-def]
    """The sequence's key events, as the driver posts what its parser reads."""
    for event in parsed(sequence):
        event.set_sender(pilot.app)
        pilot.app.post_message(event)
    await pilot.pause()
    await pilot.pause()


async def into_threads_field(pilot) -> Input:  # type: ignore[no-untyped-def]
    """The Model tab shown (its activation handled: a late one would switch back) and the
    focus in its Threads field."""
    pilot.app.query_one(TabbedContent).active = "model"
    await pilot.pause()
    await pilot.pause()
    threads = pilot.app.query_one("#threads", Input)
    threads.focus()
    await pilot.pause()
    return threads


@pytest.mark.anyio
@pytest.mark.usefixtures("app_caches")
async def test_raw_tab_keys_switch_tabs_from_inside_an_input():
    app = make_app(make_services())
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        tabs = app.query_one(TabbedContent)
        for (key, sequence), tab in zip(F_KEYS.items(), TABS):
            threads = await into_threads_field(pilot)
            await pilot.press("1", "2")
            await feed(pilot, sequence)
            assert tabs.active == tab, key
            assert threads.value == "12", key  # the key switched; nothing was typed
            threads.value = ""
        for sequence, step in ((CTRL_PAGE["ctrl+pagedown"], 1), (CTRL_PAGE["ctrl+pageup"], -1)):
            threads = await into_threads_field(pilot)
            await feed(pilot, sequence)
            assert tabs.active == TABS[TABS.index("model") + step]
            assert threads.value == ""
        await into_threads_field(pilot)  # round from the last tab to the first
        await feed(pilot, F_KEYS["f7"])
        assert tabs.active == "export"
        await feed(pilot, CTRL_PAGE["ctrl+pagedown"])
        assert tabs.active == "hardware"


def every_step(n: int) -> list[int]:
    """A walk over n tabs that takes each step (from, to), staying put included, exactly
    once: from each tab, the highest-numbered step not taken yet (a de Bruijn walk)."""
    walk, taken = [0], set()
    while untaken := [t for t in reversed(range(n)) if (walk[-1], t) not in taken]:
        taken.add((walk[-1], untaken[0]))
        walk.append(untaken[0])
    return walk


@pytest.mark.anyio
@pytest.mark.usefixtures("app_caches")
async def test_every_tab_key_reaches_its_tab_from_every_tab():
    """From wherever the focus was left: Hardware's GPU table once handed the focus to its
    CPU table as the pane hid, and that switched back (6 from Hardware stayed there). Each
    key is sent from where the last one left the app, so the 36 (from, key) pairs take 36
    keys, not 36 keys and 36 switches back."""
    walk = every_step(len(TABS))
    assert len(set(zip(walk, walk[1:]))) == len(walk) - 1 == len(TABS) ** 2  # every pair, once
    keys = list(F_KEYS.items())
    app = make_app(make_services())
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        tabs = app.query_one(TabbedContent)
        await pilot.press(str(walk[0] + 1))
        await pilot.pause()
        assert tabs.active == TABS[walk[0]]
        for start, end in zip(walk, walk[1:]):
            key, sequence = keys[end]
            await feed(pilot, sequence)
            assert tabs.active == TABS[end], f"{key} from {TABS[start]}"


# --- end to end: the app in tmux ---------------------------------------------------------

LAUNCH = ("from tests.test_app import FAST, make_services; from cope_tui.app.app import CopeApp; "
          "CopeApp(services=make_services(), choices=FAST).run()")
SHOWN = {"hardware": "GPU planned for", "results": "tok/s vs VRAM budget", "export": "The command you run today"}


class Tmux:
    """One tmux server of the test's own (its own socket), one window running the app."""

    def __init__(self, cwd: Path, env: dict[str, str]):
        self.socket = f"cope-test-{uuid.uuid4().hex[:8]}"
        command = f"{sys.executable} -c '{LAUNCH}'"
        self.run("-f", os.devnull, "new-session", "-d", "-x", "120", "-y", "40", "-s", "cope", command,
                 cwd=cwd, env=env)

    def run(self, *args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
        done = subprocess.run(["tmux", "-L", self.socket, *args], cwd=cwd, env=env, capture_output=True,
                              text=True, timeout=30, check=True)
        return done.stdout

    def screen(self) -> str:
        return self.run("capture-pane", "-p", "-t", "cope")

    def send_hex(self, sequence: str) -> None:
        self.run("send-keys", "-t", "cope", "-H", *(f"{b:02x}" for b in sequence.encode()))

    def wait_for(self, text: str, seconds: float = 90.0, step: str = "") -> str:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            screen = self.screen()
            if text in screen:
                return screen
            time.sleep(0.2)
        raise AssertionError(f"{text!r} never appeared{' ' + step if step else ''}; the screen:\n{self.screen()}")

    def wait_settled(self, step: str, seconds: float = 30.0) -> str:
        """Two captures in a row alike: the app has handled what it was sent and repainted
        (e places the paste field's focus a refresh after Export is drawn; a key sent
        before that is "from the tab bar", not from inside the field)."""
        deadline = time.monotonic() + seconds
        last = self.screen()
        while time.monotonic() < deadline:
            time.sleep(0.2)
            screen = self.screen()
            if screen == last:
                return screen
            last = screen
        raise AssertionError(f"the screen never settled {step}; the screen:\n{last}")

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True, timeout=30)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")
def test_in_tmux_the_raw_keys_switch_tabs_from_the_paste_field(tmp_path):
    env = {**os.environ, "COPE_CACHE_DIR": str(tmp_path / "cache"), "HF_HUB_OFFLINE": "1", "TERM": "xterm-256color"}
    tmux = Tmux(Path(__file__).resolve().parents[1], env)
    try:
        tmux.wait_for("x base = against")  # the first ranking is shown
        tmux.wait_for(SHOWN["results"])
        for key, tab in (("f2", "hardware"), ("ctrl+pagedown", "hardware"), ("ctrl+pageup", "results")):
            # e is a key only where no text is typed: Results' table (a tab opens in its first field)
            tmux.send_hex(F_KEYS["f6"])
            tmux.wait_for(SHOWN["results"], step=f"after F6 (before {key})")
            tmux.wait_settled(f"after F6 (before {key})")
            tmux.send_hex("e")  # the paste field of Export takes the focus
            tmux.wait_for(SHOWN["export"], step=f"after e (before {key})")
            tmux.wait_settled(f"after e (before {key})")
            tmux.send_hex({**F_KEYS, **CTRL_PAGE}[key])
            screen = tmux.wait_for(SHOWN[tab], step=f"after e then {key}")
            assert SHOWN["export"] not in screen
        tmux.send_hex(F_KEYS["f6"])
        tmux.wait_settled("after F6")
        tmux.send_hex("e")
        # Nothing was typed into the field: it still shows its placeholder. Waited for, not
        # read off the first frame that shows the tab: on a loaded machine the tab's label
        # can reach the screen a frame before the field does.
        screen = tmux.wait_for(PASTE_HINT)
        assert SHOWN["export"] in screen
    finally:
        tmux.close()


@pytest.mark.anyio
@pytest.mark.usefixtures("app_caches")
async def test_a_tab_key_right_after_e_is_not_undone():
    """e asks for the paste field; a tab key handled before the switch to Export has
    settled wins: the field is focused only with that switch, never later unasked (focusing
    a widget of a hidden pane shows that pane again: in tmux F2 right after e was undone)."""
    app = make_app(make_services())
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        tabs = app.query_one(TabbedContent)
        field = app.query_one("#paste-command", Input)
        for tab in ("hardware", "results"):
            app.action_paste_command()
            app.action_show_tab(tab)  # before Export's activation and its focus are handled
            await settle(pilot)
            assert tabs.active == tab and not field.has_focus
        await pilot.press("e")
        await settle(pilot)
        assert tabs.active == "export" and field.has_focus
