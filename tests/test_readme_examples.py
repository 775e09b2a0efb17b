"""The README's own `cope ...` examples (and docs/usage.md's) run as written (exit 0, something on stdout).

Every `cope` command the README shows, in backticks or in a sh block, is either run here
or listed in SKIP with the reason; synopses (with `[...]`, `a|b` or placeholders such as
ID and FILE) show flags, not commands, and are not run.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from cope_tui.cli import EXIT_OK, main

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
USAGE = ROOT / "docs" / "usage.md"  # the flag-by-flag reference the README points to

SKIP = {
    "cope": "opens the app (tests/test_app.py drives it with the Pilot)",
    "cope estimate": "names the command in prose; its example is the one with a command after --",
    "cope trace record --model": "names a flag in prose",
    "cope trace pull --verify-index": "downloads every index entry: a maintainer's step with network "
                                      "(tests/test_trace_index_verify.py runs it against a local Hub)",
    "cope trace pull org/name": "names a placeholder repo in prose (tests/test_trace_push.py round-trips one)",
    "cope calibrate": "names the command in a heading",
    "cope calibrate --gguf model.gguf": "runs llama-bench on a model.gguf file (tests/test_calibrate.py drives it "
                                        "with a fake llama-bench)",
    "cope export": "names the command in prose (its examples carry --candidate)",
    "cope trace record --gguf model.gguf --domain chat --tokens 64":
        "records through llama.cpp: needs a model.gguf file and the llamacpp extra (tests/test_record_llamacpp.py)",
    "cope detect": "measures this machine's memory bandwidth with every core for about 10 s "
                   "(tests/test_detect.py covers the command with the measurement faked)",
}
_SYNOPSIS = re.compile(r"[\[|]|\b(ID|FILE|PATH|REPO|DIR|GIB|GBPS|NAME|PRESET|TYPE|COMMAND|Q|N|T|S)\b")


def readme_commands() -> list[str]:
    text = README.read_text() + "\n" + USAGE.read_text()
    found = re.findall(r"`(cope(?:\s[^`]*)?)`", text)
    for block in re.findall(r"```sh\n(.*?)```", text, re.S):
        found += [line for line in block.splitlines() if line.startswith("cope")]
    commands = []
    for line in found:
        line = line.split("  #", 1)[0].strip()
        if line not in commands:
            commands.append(line)
    return commands


EXAMPLES = [c for c in readme_commands() if not _SYNOPSIS.search(c)]


def test_the_readme_has_examples_and_every_skip_is_still_in_it():
    assert len(EXAMPLES) >= 6
    assert set(SKIP) <= set(EXAMPLES), set(SKIP) - set(EXAMPLES)


@pytest.mark.parametrize("command", [c for c in EXAMPLES if c not in SKIP])
def test_readme_example_runs_as_written(command, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # what an example writes lands here
    monkeypatch.setenv("COPE_CACHE_DIR", str(tmp_path / "cache"))
    code = main(shlex.split(command)[1:])
    out, err = capsys.readouterr()
    assert code == EXIT_OK, f"{command}: exit {code}: {err.strip()[-300:]}"
    assert out.strip() or list(tmp_path.glob("run/*")), command
