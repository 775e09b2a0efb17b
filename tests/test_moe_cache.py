"""llama.cpp's own expert cache (engine/llamacpp/moe_cache.py): grouping, slot arithmetic,
the 32-token rule, the replay against an independent reference on real routing, and its
price through `cope estimate` and `cope advise`."""

from __future__ import annotations


import numpy as np
import pytest

from engine.core.errors import CopeInputError
from engine.llamacpp.llama_args import parse_llama_command
from engine.llamacpp.moe_cache import (
    MIB,
    bank_bytes,
    cache_groups,
    expert_layouts,
    replay_cache,
    slots_for,
    used_for_batch,
)
from engine.models.catalog import get_model
from engine.models.quant import get_quantization
from tests.moe_cache_reference import reference_counts


def test_bank_bytes_pad_each_tensor_and_keep_one_spare_slot():
    # gate 1000, up 1000, down 1500 bytes an expert; 3 slots -> banks of 4 experts each,
    # padded to 128: 4096 + 4096 + 6016
    assert bank_bytes((1000, 1000, 1500), 3) == 14208
    assert bank_bytes((1000, 1000, 1500), 4) == 10240 + 7552


def test_slots_are_the_most_whose_banks_fit():
    layout = (1000, 1000, 1500)
    assert slots_for(layout, 14208, 100) == 3
    assert slots_for(layout, 14207, 100) == 2
    assert slots_for(layout, 17791, 100) == 3
    assert slots_for(layout, 10**9, 100) == 100  # never more than the group's experts


def test_a_group_below_one_tokens_experts_is_not_cached():
    layouts = ((1000, 1000, 1500),) * 2
    host = np.array([True, True])
    # 7 slots for top-8: llama.cpp leaves the group uncached (its layers run on the CPU)
    small = cache_groups(layouts, host, 64, 8, bank_bytes((1000, 1000, 1500), 7))
    assert [g.n_slots for g in small] == [0]
    assert cache_groups(layouts, host, 64, 8, bank_bytes((1000, 1000, 1500), 8))[0].n_slots == 8


def test_only_host_layers_are_grouped_and_layouts_split_groups():
    layouts = ((10, 10, 15), (10, 10, 20), (10, 10, 15), (10, 10, 20))
    groups = cache_groups(layouts, np.array([True, True, False, True]), 4, 2, 10**6)
    assert [g.layers for g in groups] == [(0,), (1, 3)]
    assert [g.tensor_expert_bytes for g in groups] == [(10, 10, 15), (10, 10, 20)]


def test_qwen3_q4_k_m_has_two_layouts_and_each_group_caches_the_same_fraction():
    model = get_model("qwen3-30b-a3b")
    layouts = expert_layouts(model, get_quantization("Q4_K_M"))
    assert len(set(layouts)) == 2  # down projections at Q6_K in some layers, Q4_K in the rest
    groups = cache_groups(layouts, np.ones(model.n_moe_layers, bool), model.n_routed_experts, model.top_k,
                          4000 * MIB)
    fractions = [g.cached_fraction for g in groups]
    assert max(fractions) - min(fractions) < 0.01
    # the budget is split by host bytes and every bank fits its share
    assert sum(g.budget_bytes for g in groups) <= 4000 * MIB
    assert all(g.bank_bytes <= g.budget_bytes for g in groups)


@pytest.mark.parametrize("n_tokens, slots, used", [
    (1, 8, True), (32, 128, True), (33, 1000, False), (0, 100, False),
    (1, 7, False),  # below one token's experts
    (4, 31, False), (4, 32, True),  # 4 tokens x top-8 = 32 distinct experts at most
])
def test_the_cache_serves_ubatches_of_at_most_32_tokens(n_tokens, slots, used):
    assert used_for_batch(n_tokens, 8, 128, slots) is used


def test_hand_worked_replay():
    # one layer, 3 slots, top-2; worked by hand from moe_cache_lru::plan:
    # t0 [5,2]: 2->slot0, 5->slot1 (2 runs); t1 [5,3]: hit 5, 3->slot2;
    # t2 [7,8]: evict 2 (slot0) then 5 (slot1): 7->0, 8->1, one run; t3 [3,2]: hit 3, 2 evicts 7
    ids = np.array([[[5, 2]], [[5, 3]], [[7, 8]], [[3, 2]]])
    group = cache_groups(((128, 128, 128),), np.array([True]), 16, 2, bank_bytes((128, 128, 128), 3))
    assert group[0].n_slots == 3
    replay = replay_cache(ids, group)
    assert replay.hits().tolist() == [2]
    assert replay.misses().tolist() == [6]
    assert replay.segments.tolist() == [5]
    assert replay.hits_hist.tolist() == [[2, 2, 0]]


@pytest.mark.shared_traces
def test_replay_equals_an_independent_reference_on_real_routing(shared_traces):
    from engine.traces.moe_beyond import read_moe_beyond_csv_dir

    trace = read_moe_beyond_csv_dir(shared_traces / "deepseek-v2-lite-chat__moe-beyond" / "training_data_eamc",
                                    max_files=40)
    ids = trace.expert_ids
    n_layers = ids.shape[1]
    # two layouts (every third layer's down projection wider), four cache sizes
    layouts = tuple((1000, 1000, 1500 if l % 3 == 0 else 1200) for l in range(n_layers))
    host = np.ones(n_layers, bool)
    host[:2] = False  # the first layers on the GPU
    for mib_bytes in (30_000, 150_000, 600_000, 2_000_000):
        groups = cache_groups(layouts, host, 64, 6, mib_bytes)
        replay = replay_cache(ids, groups)
        for g in groups:
            if not g.n_slots:
                continue
            hits, misses, runs = reference_counts(ids, g.layers, g.n_slots)
            layers = list(g.layers)
            assert replay.hits()[layers].tolist() == hits.tolist()
            assert replay.misses()[layers].tolist() == misses.tolist()
            assert replay.segments[layers].tolist() == runs.tolist()
        assert not replay.cached[:2].any()


def test_the_cache_flag_is_read_and_checked():
    command = parse_llama_command(["llama-server", "-m", "x.gguf", "--cpu-moe", "--moe-cache-mib", "2048"])
    assert command.moe_cache_mib == 2048
    with pytest.raises(CopeInputError, match="--moe-cache-mib"):
        parse_llama_command(["llama-server", "-m", "x.gguf", "--moe-cache-mib", "-5"])


def test_advise_leads_with_the_cache_and_estimate_prices_its_command(run_cope, cope_json):
    doc = cope_json("advise", "--gpu", "rtx-4090", "--vram-budget", "12", "--json")
    cache = doc["llama_cpp_cache"]
    assert cache["cache_wins"], cache["verdict"]
    pick = cache["with_cache"]
    assert "--moe-cache-mib" in pick["argv"]
    assert pick["vram_bytes"] <= 12 * 1024**3
    est = cope_json("estimate", "--gpu", "rtx-4090", "--vram-budget", "12", "--json", "--",
                     *pick["argv"])
    assert est["yours"]["tpot_s"] == pytest.approx(pick["tpot_s"], rel=1e-9)
    # the cache makes the same placement faster than without it
    plain = [w for w in pick["argv"] if w not in ("--moe-cache-mib", str(pick["cache_mib"]))]
    bare = cope_json("estimate", "--gpu", "rtx-4090", "--vram-budget", "12", "--json", "--", *plain)
    assert bare["yours"]["tpot_s"] > pick["tpot_s"]


def test_the_cpu_share_is_read_checked_and_not_priced(run_cope, cope_json):
    command = parse_llama_command(["llama-server", "-m", "x.gguf", "--cpu-moe", "--moe-cache-mib", "2048",
                                   "--moe-cache-cpu-share", "0.5"])
    assert command.moe_cache_cpu_share == 0.5
    with pytest.raises(CopeInputError, match="--moe-cache-cpu-share"):
        parse_llama_command(["llama-server", "--moe-cache-cpu-share", "1.5"])
    doc = cope_json("estimate", "--gpu", "rtx-4090", "--json", "--", "llama-server", "-m",
                     "Qwen3-30B-A3B-Q4_K_M.gguf", "-ngl", "99", "--cpu-moe", "--moe-cache-mib", "4096",
                     "--moe-cache-cpu-share", "0.5")
    assert doc["yours"]["verdict"] == "not_priced"
    assert "--moe-cache-cpu-share" in doc["yours"]["refusal"]
    code, out, err = run_cope("estimate", "--gpu", "rtx-4090", "--", "llama-server", "-m",
                              "Qwen3-30B-A3B-Q4_K_M.gguf", "-ngl", "99", "--cpu-moe", "--moe-cache-mib", "4096",
                              "--moe-cache-cpu-share", "0.5")
    assert code == 0 and "not modelled: --moe-cache-cpu-share" in out, err


def test_export_llama_cache_after_advise_exports_advises_command(run_cope, cope_json):
    doc = cope_json("advise", "--gpu", "rtx-4090", "--vram-budget", "12", "--json")
    exported = cope_json("export", "--candidate", "llama-cache", "--json")
    assert exported["argv"] == doc["llama_cpp_cache"]["with_cache"]["argv"]
    assert "--gpu rtx-4090" in exported["plan"]
    code, out, err = run_cope("export", "--candidate", "llama-cache", "--runtime", "ik_llama.cpp")
    assert code != 0 and "llama-cache" in err.strip().splitlines()[-1]


def test_export_llama_cache_with_a_workload_exports_the_command_advise_searched_for_it(run_cope, cope_json):
    """With a workload advise ranks the search by request time and tries -ub: the export is
    that command (before, export searched by decode alone and gave another cache size, no -ub)."""
    doc = cope_json("advise", "--gpu", "rtx-4090", "--vram-budget", "12", "--cpu", "ryzen-3-3100", "--tokens", "150",
                    "--workload", "chat", "--json")
    cache = doc["llama_cpp_cache"]
    best = cache["with_cache"] if cache["cache_wins"] else cache["partition"]
    assert cache["ranked_by"] == "request_s" and "-ub" in best["argv"]
    exported = cope_json("export", "--candidate", "llama-cache", "--json")
    assert exported["argv"] == best["argv"]
    assert exported["candidate_tpot_s"] == best["tpot_s"]
    # no GGUF named: the -m word is a placeholder, said as every other export says it
    assert [p["word"] for p in exported["placeholders"]] == [best["argv"][best["argv"].index("-m") + 1]]
    named = cope_json("export", "--candidate", "llama-cache", "--model-path", "/models/q.gguf", "--json")
    assert named["argv"] == [*best["argv"][:2], "/models/q.gguf", *best["argv"][3:]] and not named["placeholders"]


def test_when_everything_fits_the_cache_has_nothing_to_do(run_cope, cope_json):
    doc = cope_json("advise", "--gpu", "rtx-4090", "--model", "gpt-oss-20b", "--json")
    cache = doc["llama_cpp_cache"]
    assert not cache["cache_wins"] and cache["partition"]["host_layers"] == 0
    assert cache["verdict"].startswith("every expert fits on the GPU")


def _advice_with_cache():  # type: ignore[no-untyped-def]
    from engine.advice.cache_search import CacheAdvice, PricedCommand

    cached = PricedCommand(("llama-server", "-m", "m.gguf", "--fit", "off", "--cpu-moe", "--moe-cache-mib", "900"),
                           48, 48, 900, False, 0.02, 10 * 2**30, "cached")
    plain = PricedCommand(("llama-server", "-m", "m.gguf", "--fit", "off", "--n-cpu-moe", "22"),
                          22, 22, 0, False, 0.04, 10 * 2**30, "plain")
    return CacheAdvice(cached, plain, 2)


@pytest.mark.parametrize("help_lines, expect", [
    (["--n-cpu-moe N   experts of the first N layers on the CPU"], "predates its expert cache"),
    (["--moe-cache-mib N   GPU cache size in MiB"], "Run this now: llama.cpp's expert cache"),
    (["--moe-cache-mib N   GPU cache size in MiB", "--moe-cache-cpu-share F   share of the misses"],
     "evicts by frequency classes"),
])
def test_what_advise_says_follows_the_build_found(help_lines, expect):
    from engine.advice.cache_search import render_cache_advice
    from engine.llamacpp.builds import build_from_help

    build = build_from_help("llama.cpp", {"llama-server": "\n".join(["-m, --model FNAME   model path", *help_lines])},
                            "llama-server --help in /opt/llama")
    text = "\n".join(render_cache_advice(_advice_with_cache(), build=build))
    assert expect in text
    assert "--moe-cache-mib 900" in text  # the command is shown either way (to run, or what upgrading gives)


def test_estimate_does_not_carry_the_users_cache_into_copes_command(cope_json):
    # COPE's best from the ranking is priced without llama.cpp's cache: the user's
    # --moe-cache-mib must not ride along, or estimating the printed command would differ
    doc = cope_json("estimate", "--gpu", "rtx-4090", "--vram-budget", "12", "--json", "--", "llama-server", "-m",
                    "Qwen3-30B-A3B-Q4_K_M.gguf", "-ngl", "99", "--n-cpu-moe", "30", "--moe-cache-mib", "4000")
    argv = doc["export"]["argv"]
    assert "--moe-cache-mib" not in argv
    again = cope_json("estimate", "--gpu", "rtx-4090", "--vram-budget", "12", "--json", "--", *argv)
    claimed = doc["export"]["nearest_tpot_s"] or doc["export"]["candidate_tpot_s"]
    assert again["yours"]["tpot_s"] == pytest.approx(claimed, rel=1e-9)
