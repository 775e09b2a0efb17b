"""Interrupted probing: partial work is resumed (and said), --reprobe keeps the old
profile until the new one is complete, SIGTERM ends like Ctrl-C with the cache valid."""

from __future__ import annotations

import json
import os
import signal
import sys

import pytest

from cope_tui import cli
from cope_tui.service import pricing
from engine.cost.cost_model import Fidelity
from engine.replays.policy import Execution
from probes.profile_cache import is_partial, load_cached, staging_path
from probes.runner import cached_profile_complete, ensure_profile, profile_key
from tests.test_probes import FakeProber, stats, tiny_request


def candidates():
    return [(Execution.SEQUENTIAL, stats(2, 0)), (Execution.PARALLEL, stats(2, 1)), (Execution.PARALLEL, stats(2, 2))]


class Interrupting(FakeProber):
    """Raises KeyboardInterrupt (Ctrl-C) at its `stop_at`-th measurement."""

    def __init__(self, stop_at: int, scale: float = 1.0):
        super().__init__()
        self.stop_at, self.scale = stop_at, scale

    def measure(self, operator, key, share_s):
        if len(self.calls) + 1 == self.stop_at:
            raise KeyboardInterrupt
        m = super().measure(operator, key, share_s)
        return type(m)(m.operator, m.key, m.median_s * self.scale, m.spread_s, m.repeats, basis=m.basis)


def combined(req, root, prober, **kw):
    return ensure_profile(req, Fidelity.COMBINED, budget_s=1000, root=root, candidates=candidates,
                          make_prober=lambda: prober, **kw)


def test_a_run_interrupted_in_the_schedule_probes_is_resumed_and_says_so(tmp_path):
    req = tiny_request()
    whole = FakeProber()
    combined(req, tmp_path / "whole", whole)
    n = len(whole.calls)
    cut = n - 1  # Ctrl-C at the next-to-last measurement: inside the combined states
    assert whole.calls[cut - 2][0] == "schedule" and whole.calls[0][0] != "schedule"

    with pytest.raises(KeyboardInterrupt):
        combined(req, tmp_path, Interrupting(stop_at=cut))
    assert is_partial(profile_key(req), tmp_path)
    # The partial profile holds every atomic probe but is not taken as complete.
    assert cached_profile_complete(req, tmp_path) is None
    assert len(load_cached(profile_key(req), tmp_path).measurements) == cut - 1

    again = FakeProber()
    out = combined(req, tmp_path, again)
    assert out.ran.resumed == cut - 1 and out.ran.skipped == cut - 1
    assert again.calls == whole.calls[cut - 1:]  # only what was missing
    assert not is_partial(profile_key(req), tmp_path)
    assert cached_profile_complete(req, tmp_path) is not None
    summary = pricing.ProbeReport(out.ran.measured, out.ran.skipped, 0, None, 0.0, out.ran.resumed).summary()
    assert summary.startswith(f"resumed an interrupted run ({cut - 1} measurements kept): 2 measured")


def test_reprobe_keeps_the_complete_profile_until_the_new_one_is_complete(tmp_path):
    req = tiny_request()
    combined(req, tmp_path, FakeProber())
    old = load_cached(profile_key(req), tmp_path)
    with pytest.raises(KeyboardInterrupt):
        combined(req, tmp_path, Interrupting(stop_at=7, scale=2.0), reprobe=True)
    assert load_cached(profile_key(req), tmp_path) == old  # whole, not 6 measurements
    assert cached_profile_complete(req, tmp_path) is not None
    assert staging_path(profile_key(req), tmp_path).exists()

    redo = Interrupting(stop_at=10_000, scale=2.0)
    out = combined(req, tmp_path, redo, reprobe=True)
    assert out.ran.skipped == 0 and out.ran.resumed == 0
    new = load_cached(profile_key(req), tmp_path)
    assert len(new.measurements) == len(old.measurements)
    assert all(n.median_s == 2 * o.median_s for n, o in zip(new.measurements, old.measurements))
    assert not staging_path(profile_key(req), tmp_path).exists()


@pytest.mark.skipif(sys.platform == "win32", reason="SIGTERM to oneself is POSIX")
def test_sigterm_ends_like_ctrl_c_with_the_cache_valid_and_the_next_run_resumes(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("COPE_CACHE_DIR", str(tmp_path))

    class Terminating(FakeProber):
        def measure(self, operator, key, share_s):
            if len(self.calls) == 4:
                os.kill(os.getpid(), signal.SIGTERM)
            return super().measure(operator, key, share_s)

    monkeypatch.setattr(pricing, "PROBER_FACTORY", Terminating)
    args = ["advise", "--json", "--tokens", "40", "--cpu", "desktop-ddr5", "--threads", "2"]
    before = signal.getsignal(signal.SIGTERM)
    assert cli.main([*args, "--fidelity", "combined", "--probe-budget", "30"]) == cli.EXIT_TERMINATED == 143
    out, err = capsys.readouterr()
    assert out == "" and err.splitlines()[-1] == "cope: terminated"
    assert signal.getsignal(signal.SIGTERM) is before  # restored for whoever called main
    files = sorted(os.listdir(tmp_path / "profiles"))
    assert len(files) == 2 and files[1] == files[0] + ".partial"
    assert json.loads((tmp_path / "profiles" / files[0]).read_text())["measurements"]  # valid, kept

    # The default (no fidelity) never takes partial work as complete, and says why.
    assert cli.main(args) == cli.EXIT_OK
    doc = json.loads(capsys.readouterr().out)
    assert doc["cost_model"]["fidelity"] == "analytic"

    monkeypatch.setattr(pricing, "PROBER_FACTORY", FakeProber)
    assert cli.main([*args, "--fidelity", "combined", "--probe-budget", "30"]) == cli.EXIT_OK
    err = capsys.readouterr().err
    assert "cope: probes: resumed an interrupted run (4 measurements kept)" in err
    assert sorted(os.listdir(tmp_path / "profiles")) == files[:1]
