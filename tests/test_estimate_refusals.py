"""Every refusal the estimator can give renders in every front end (issue 47, defect 1).

`cope estimate` prices a pasted llama.cpp command; when the command would not run, or runs
in a way COPE does not model, its price is a one-line refusal instead of a figure. Each
refusal reason the engine can produce (every "would not run" and "not modelled" message
written in engine/, and --fit's "not priced") is reached here by a real command, and the
result is rendered as `cope estimate` prints it (text), as `--json` writes it and as the
app's Export pane shows it. A last test reads engine/'s source for refusal messages, so a
new reason without a case here fails.
"""

from __future__ import annotations

import ast
import json
import shlex
from dataclasses import replace
from functools import cache
from pathlib import Path

import pytest

from cope_tui.commands.estimate import estimate_document
from cope_tui.commands.output import json_text
from cope_tui.options import PlanChoices
from cope_tui.service.advice import plan
from cope_tui.service.pasted import estimate_pasted, pasted_choices
from cope_tui.text_report import render_command_estimate
from engine.hardware.platform import Fact
from engine.llamacpp.llama_args import parse_llama_command

ONE = PlanChoices(model="qwen3-30b-a3b", tokens=40, cpu="ryzen-9-7950x", gpu="rtx-4090", threads=8)
TWO = PlanChoices(model="qwen3-30b-a3b", tokens=40, cpu="epyc-9355", gpu="2x rtx-3090", threads=32)
BIG_ONE = PlanChoices(model="qwen3-235b-a22b", tokens=40, cpu="epyc-9355", gpu="rtx-4090", threads=32)
SMALL_RAM = replace(ONE, ram_gib=8.0)
SMALL_RAM_TWO = replace(TWO, ram_gib=8.0)
M = "llama-server -m Qwen3-30B-A3B-Q4_K_M.gguf"
OT_CPU = r"-ot 'blk\.(1[0-9]|[2-9][0-9])\.ffn_.*_exps=CPU'"

# (case id, plan, command, the refusal's start)
CASES = [
    ("visible-uuid", TWO, f"CUDA_VISIBLE_DEVICES=GPU-abc {M} -ngl 99",
     "not modelled: CUDA_VISIBLE_DEVICES=GPU-abc (COPE reads device indexes, not UUIDs)"),
    ("visible-none", TWO, f"CUDA_VISIBLE_DEVICES=7 {M} -ngl 99 -ts 1,1",
     "would not run on the GPU: CUDA_VISIBLE_DEVICES=7 names none of the plan's 2 card(s)"),
    ("cache-two-cards", TWO, f"{M} -ngl 99 --cpu-moe -ts 1,1 --moe-cache-mib 4096",
     "not modelled: llama.cpp's expert cache over two or more cards"),
    ("cache-cpu-share", ONE, f"{M} -ngl 99 --cpu-moe --moe-cache-mib 4096 --moe-cache-cpu-share 0.5",
     "not modelled: --moe-cache-cpu-share"),
    ("split-row", TWO, f"{M} -ngl 99 -sm row", "not modelled: --split-mode row splits each weight's rows"),
    ("split-bogus", ONE, f"{M} -ngl 99 -sm diagonal", "would not run: --split-mode diagonal: llama.cpp takes none"),
    ("ot-second-card", ONE, f"{M} -ngl 99 -ot exps=CUDA1",
     "would not run: llama.cpp stops at start-up with 'unknown buffer type' for -ot exps=CUDA1: the plan's CUDA "
     "devices are CUDA0"),
    ("ot-unknown-buffer", ONE, f"{M} -ngl 99 -ot exps=cuda0",
     "would not run: llama.cpp stops at start-up with 'unknown buffer type' for -ot exps=cuda0: buffer names are "
     "exact"),
    ("dev-none", ONE, f"{M} -ngl 99 -dev none", "not modelled: --device none (no device: price it with -ngl 0)"),
    ("dev-invalid", TWO, f"{M} -ngl 99 -dev CUDA3", "would not run: --device CUDA3: invalid device CUDA3"),
    ("main-gpu-negative", ONE, f"{M} -ngl 99 -sm none -mg -1",
     "not modelled: --split-mode none --main-gpu -1 uses no GPU"),
    ("main-gpu-missing", ONE, f"{M} -ngl 99 -sm none -mg 1", "would not run: --main-gpu 1: llama.cpp has 1 device(s)"),
    ("ts-too-many", TWO, f"{M} -ngl 99 -ts " + ",".join(["1"] * 16), "would not run: --tensor-split 1,1,1"),
    ("ts-not-numbers", TWO, f"{M} -ngl 99 -ts a,b", "would not run: --tensor-split a,b: not numbers (std::stof)"),
    ("ts-negative", ONE, f"{M} -ngl 99 -ts -1,2", "not modelled: --tensor-split -1,2 has a negative share"),
    ("ts-free-unknown", "free-unknown", f"{M} -ngl 99",
     "not modelled: no -ts, and a card's free memory (which llama.cpp splits by) is unknown"),
    ("two-cards-fit", TWO, f"{M} -ts 1,1", "not modelled: without -ngl, llama.cpp's --fit places the model over"),
    ("card-overflow", replace(TWO, gpu="2x rtx-3060-12gb", model="qwen3-235b-a22b"), "llama-server -m Qwen3-235B-A22B-Q4_K_M.gguf -ngl 99 -ts 1,1",
     "would not run: CUDA0 (NVIDIA GeForce RTX 3060"),
    ("vram", BIG_ONE, "llama-server -m Qwen3-235B-A22B-Q4_K_M.gguf -ngl 99", "would not run: it needs "),
    # a copy (-lm none) that RAM cannot hold; mapped, the same weights stream from the page cache (priced)
    ("ram", SMALL_RAM, f"{M} -ngl 99 --cpu-moe -lm none", "would not run: "),
    ("ram-two-cards", SMALL_RAM_TWO, f"{M} -ngl 99 -ts 1,1 --cpu-moe -lm none", "would not run: "),
    ("fit-unpriced", PlanChoices(tokens=40, gpu="gtx-1650-super", cpu="ryzen-9-7950x"),
     "llama-server -m Qwen3-235B-A22B-Q4_K_M.gguf -c 4096", "not priced: with every block offloaded it needs "),
    ("no-ranking", PlanChoices(tokens=40, gpu="gtx-1650-super", cpu="ryzen-9-7950x"),
     "llama-server -m Qwen3-235B-A22B-Q4_K_M.gguf -ngl 99 -c 4096", "would not run: it needs "),
    ("no-gpu-ram", replace(SMALL_RAM, gpu="none"), f"{M} -ngl 0 -lm none", "would not run: "),
]


def _with_free_unknown(advice):  # type: ignore[no-untyped-def]
    """Two cards whose free memory nobody knows (without -ts, llama.cpp splits by it)."""
    gpu = advice.request.platform.gpu
    cards = tuple(replace(c, vram_free_bytes=Fact.unknown("test: not detected")) for c in gpu.cards)
    platform = replace(advice.request.platform, gpu=replace(gpu, cards=cards))
    return replace(advice, request=replace(advice.request, platform=platform),
                   rec=replace(advice.rec, request=replace(advice.rec.request, platform=platform)))


@cache
def _estimate(case_id: str):  # type: ignore[no-untyped-def]
    """The command's words and its estimate, by the path `cope estimate` and the app's paste field take."""
    _, choices, line, _ = next(c for c in CASES if c[0] == case_id)
    words = shlex.split(line)
    command = parse_llama_command(words)
    make_advice = plan
    if choices == "free-unknown":
        choices, make_advice = TWO, lambda c: _with_free_unknown(plan(c))
    return words, estimate_pasted(command, pasted_choices(command, choices), make_advice)


@pytest.mark.parametrize("case_id, starts", [(c[0], c[3]) for c in CASES], ids=[c[0] for c in CASES])
def test_each_refusal_renders_as_text_and_json(case_id, starts):
    words, est = _estimate(case_id)
    yours = est.yours
    assert not yours.runs and yours.refusal.startswith(starts), yours.refusal
    assert yours.verdict == ("would_not_run" if starts.startswith("would not run") else "not_priced")
    text = render_command_estimate(est)
    # the refusal is said once, on the command's line, and no ratio is made up for an unpriced command
    assert text.count(yours.refusal) == 1
    head = text.split("COPE's best")[0]
    assert yours.refusal in head and "ms/token" not in head
    assert "x yours" not in text and "None" not in text
    doc = json.loads(json_text(estimate_document(words, est.command, est)))
    assert doc["yours"]["refusal"] == yours.refusal and doc["yours"]["runs"] is False
    assert doc["yours"]["tpot_s"] is None and doc["speedup_of_best"] is None and doc["best_is"] is None
    if doc["best_that_runs"] is not None:  # COPE's best is still given, with nothing to compare it to
        assert doc["best_that_runs"]["speedup_vs_yours"] is None and doc["best_that_runs"]["tpot_s"] > 0


@pytest.mark.parametrize("case_id", [c[0] for c in CASES])
def test_each_refusal_renders_in_the_app(case_id):
    pytest.importorskip("textual")
    from cope_tui.app.panes.export import estimate_text

    _, est = _estimate(case_id)
    shown = estimate_text(est).plain
    assert est.yours.refusal in shown and "ms/token, " not in shown.split("COPE's best")[0]


def _refusal_prefixes() -> set[str]:
    """The literal start of every refusal message in engine/ ("would not run...", "not modelled...", "not priced...")."""
    found = set()
    for path in Path(__file__).resolve().parents[1].joinpath("engine").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            head = None
            if isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant):
                head = node.values[0].value
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                head = node.value
            if isinstance(head, str) and head.startswith(("would not run", "not modelled:", "not priced:")):
                found.add(head)
    return found


def test_every_refusal_message_of_the_engine_has_a_case():
    refusals = [_estimate(c[0])[1].yours.refusal for c in CASES]
    prefixes = _refusal_prefixes()
    assert len(prefixes) >= 15  # the scan finds the messages (device_split.py alone has a dozen)
    missing = sorted(p for p in prefixes if not any(r.startswith(p) for r in refusals))
    assert not missing, f"refusal messages no case here reaches: {missing}"
