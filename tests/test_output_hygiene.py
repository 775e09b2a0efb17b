"""What reaches the terminal: escaped control characters, one-line warnings, short error lines."""

from __future__ import annotations

import sys
import warnings

import numpy as np
import pytest

from cope_tui.cli import EXIT_INPUT, EXIT_OK, main
from cope_tui.commands.output import LINE_LIMIT, clean_output, one_line
from engine.traces.validate import TraceWarning
from tests.test_gguf_model import write_deepseek_like

HOSTILE = "\x1b[2JTinyDS\x1b[m"  # clears the screen when printed raw; as long as "Tiny DeepSeek"


def test_control_characters_from_a_gguf_name_are_escaped(tmp_path, capsys):
    path = write_deepseek_like(tmp_path / "tiny-Q4_K_M.gguf").close()
    data = path.read_bytes()
    assert data.count(b"Tiny DeepSeek") == 1
    path.write_bytes(data.replace(b"Tiny DeepSeek", HOSTILE.encode()))
    assert main(["advise", "--model", str(path), "--tokens", "20"]) == EXIT_OK
    out, err = capsys.readouterr()
    assert "\x1b" not in out + err
    assert "\\x1b[2JTinyDS\\x1b[m" in out


def test_warnings_are_one_line_without_source(capsys):
    with clean_output():
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.warn(TraceWarning("t.csv: 1 token\nlacks a layer"), stacklevel=1)
            warnings.warn("overflow in \x07exp", RuntimeWarning, stacklevel=1)
    err = capsys.readouterr().err
    assert err.splitlines() == ["cope: warning: t.csv: 1 token lacks a layer",
                                "cope: warning: RuntimeWarning: overflow in \\x07exp"]


def test_a_trace_warning_from_a_command_is_one_line(tmp_path, capsys):
    rng = np.random.default_rng(0)
    rows = [f"{p},{b}," + ",".join(map(str, rng.choice(128, 8, replace=False))) for p in range(12) for b in range(48)]
    rows.remove(next(r for r in rows if r.startswith("5,7,")))  # token 5 lacks block 7: dropped, warned
    trace = tmp_path / "holes.csv"
    trace.write_text("\n".join(rows) + "\n")
    assert main(["advise", "--model", "qwen3-30b-a3b", "--trace", str(trace), "--json"]) == EXIT_OK
    err = capsys.readouterr().err
    warned = [line for line in err.splitlines() if "warning" in line and "holes.csv" in line]
    assert warned and all(line.startswith("cope: warning: ") for line in warned)
    assert "warnings.warn" not in err and ".py:" not in err


def test_an_error_listing_99999_missing_files_is_summarised(tmp_path, capsys):
    first = tmp_path / "m-00001-of-99999.gguf"
    first.write_bytes(b"GGUF\x03\x00\x00\x00")
    assert main(["advise", "--model", str(first)]) == EXIT_INPUT
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and len(err) <= LINE_LIMIT + 40
    assert "missing 99998 of its 99999 files: m-00002-of-99999.gguf" in err and "and 99,994 more" in err


def test_an_unknown_model_error_summarises_the_catalog(capsys):
    assert main(["advise", "--model", "x" * 5000]) == EXIT_INPUT  # longer than a file name may be
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and len(err) <= LINE_LIMIT + 40
    assert err.startswith("cope: error: unknown model 'xxx") and err.rstrip().endswith("(org/name)")


def test_one_line_keeps_short_lines_and_cuts_long_ones_in_the_middle():
    assert one_line("a\nb\tc") == "a b c"
    long = "start " + "y" * 1000 + " end"
    cut = one_line(long)
    assert cut.startswith("start ") and cut.endswith(" end") and len(cut) <= LINE_LIMIT + 40
    assert "characters left out" in cut


def test_one_line_keeps_a_quoted_command_whole_and_cuts_before_it():
    """The offline --gguf-file error of a long sharded name once cut its own `hf download`
    workaround in the middle (issue 45): the command to copy stays whole."""
    name = "UD-Q4_K_XL/Qwen3-Coder-480B-A35B-Instruct-UD-Q4_K_XL-00001-of-00006.gguf"
    repo = "unsloth/Qwen3-Coder-480B-A35B-Instruct-GGUF"
    command = f"`hf download {repo} {name} --local-dir .`"
    text = (f"{repo}/{name}: offline mode (HF_HUB_OFFLINE) and {name} is not in the Hub cache; "
            f"download it ({command}) and pass its path to --model")
    assert len(text) > LINE_LIMIT
    line = one_line(text)
    assert command in line and line.endswith("and pass its path to --model")
    assert line.startswith(f"{repo}/") and "characters left out" in line and len(line) <= LINE_LIMIT + 40


def test_the_offline_gguf_file_error_keeps_its_workaround(monkeypatch, tmp_path, capsys):
    hf_constants = pytest.importorskip("huggingface_hub.constants")
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", True)  # read once, at its import
    monkeypatch.setattr(hf_constants, "HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    name = "UD-Q4_K_XL/Qwen3-Coder-480B-A35B-Instruct-UD-Q4_K_XL-00001-of-00006.gguf"
    repo = "unsloth/Qwen3-Coder-480B-A35B-Instruct-GGUF"
    assert main(["advise", "--model", repo, "--gguf-file", name]) == EXIT_INPUT
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"`hf download {repo} {name} --local-dir .`" in err


def test_the_streams_are_restored(capsys):
    before = sys.stdout, sys.stderr, warnings.showwarning
    main(["models"])
    assert (sys.stdout, sys.stderr, warnings.showwarning) == before


def test_every_json_document_says_its_layout_and_cope_version(capsys):
    """A script reading `--json` can check the layout before it reads; `cope --version` says
    the same version."""
    import json

    from cope_tui.cli import EXIT_OK, main
    from cope_tui.commands.output import JSON_SCHEMA_VERSION, cope_version

    for argv in (["models", "--json"], ["presets", "--json"], ["detect", "--json", "--no-measure"],
                 ["estimate", "--json", "--tokens", "100", "--", "llama-server", "-m", "Qwen3-30B-A3B-Q4_K_M.gguf",
                  "-ngl", "0", "-t", "2"]):
        assert main(argv) == EXIT_OK
        doc = json.loads(capsys.readouterr().out)
        assert doc["schema_version"] == JSON_SCHEMA_VERSION and doc["cope_version"] == cope_version(), argv
    assert main(["--version"]) == EXIT_OK
    assert capsys.readouterr().out.strip() == f"cope {cope_version()}"
