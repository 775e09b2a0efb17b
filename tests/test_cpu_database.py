"""The CPU database (assets/cpus.json, assets/cpu_compute.json) across the x86 parts of 2019 on:
every CPU has its compute figures and a vendor source for each figure that says the figure,
the names people type and /proc/cpuinfo prints find the right preset, and `cope estimate`
plans with any of them."""

from __future__ import annotations

import re

import pytest

from cope_tui.cli import EXIT_OK, main
from engine.core.assets_io import load_asset_json
from engine.core.errors import CopeInputError
from engine.hardware.cpu_compute import CPU_COMPUTE_ASSET, core_compute_of, cpu_amx
from engine.hardware.cpu_presets import CPU_FIGURES, cpu_models, find_cpu_preset_id, get_cpu_preset, model_for_cpu_name
from engine.hardware.memory_spec import parse_memory_spec

CPUS = load_asset_json("cpus.json")["cpus"]
COMPUTE = load_asset_json(CPU_COMPUTE_ASSET)
URL = re.compile(r"\((https://(?:www|ark)\.(amd|intel)\.com/[^\s)]+)\)")


def test_every_cpu_has_compute_figures_and_every_figure_a_vendor_url():
    assert len(CPUS) >= 200
    ids = [c["id"] for c in CPUS]
    assert len(set(ids)) == len(ids) and set(ids) == set(COMPUTE["cpus"])  # one compute row each
    for row in CPUS:
        vendor = "amd" if row["name"].startswith("AMD ") else "intel"
        assert row["name"].startswith(("AMD ", "Intel ")), row["id"]
        assert set(row["sources"]) == set(CPU_FIGURES), row["id"]
        for figure in CPU_FIGURES:
            m = URL.search(row["sources"][figure])
            assert m and m.group(2) == vendor, (row["id"], figure)
        entry = COMPUTE["cpus"][row["id"]]
        assert entry["microarchitecture"] in COMPUTE["microarchitectures"], row["id"]
        assert entry["microarchitecture_source"].startswith("the vendor's product family"), row["id"]
        assert entry["clock_source"].startswith("AMD " if vendor == "amd" else "Intel ARK"), row["id"]


@pytest.mark.parametrize("row", CPUS, ids=[c["id"] for c in CPUS])
def test_each_source_says_the_figure_it_sources(row):
    s = row["sources"]
    assert f"{row['physical_cores']} cores" in s["physical_cores"]
    assert f"{row['logical_threads']} threads" in s["logical_threads"]
    assert re.search(rf"\b{row['memory_channels']}\b", s["memory_channels"])
    for kind, speed in row["memory_speeds_mts"].items():
        assert f"{kind}-{speed}" in s["memory_speeds_mts"]
    # the page a row cites is the row's own part: its model number is in the address
    word = [w for w in row["name"].split() if re.search(r"\d", w)][-1]
    # "i7-14700": Intel's address writes "i7-processor-14700"
    number = re.sub(r"^i\d", "", re.sub(r"[^a-z0-9]", "", word.lower()))
    for source in s.values():
        assert number in re.sub(r"-|%20", "", URL.search(source).group(1).lower()), (row["id"], source)


def test_the_microarchitectures_give_each_family_its_dot_product():
    cases = {
        "core-i9-9900k": ("AVX2", 32), "core-i7-10700k": ("AVX2", 32),  # Skylake cores: no VNNI
        "core-i7-11700k": ("AVX-512 VNNI", 64), "xeon-gold-6348": ("AVX-512 VNNI", 64),  # Sunny/Cypress Cove
        "core-i9-10980xe": ("AVX-512 VNNI", 64), "xeon-gold-6248r": ("AVX-512 VNNI", 64),  # Cascade Lake
        "core-i7-14700": ("AVX2 VNNI", 64), "threadripper-3970x": ("AVX2", 32), "epyc-7773x": ("AVX2", 32),
        "ryzen-7-7840hs": ("AVX-512 VNNI", 64), "ryzen-ai-9-hx-pro-370": ("AVX-512 VNNI", 64),
    }
    for pid, (isa, macs) in cases.items():
        core = core_compute_of(pid)
        assert (core.isa, core.int8_macs_per_cycle, core.assumed) == (isa, macs, ""), pid
    assert core_compute_of("core-i9-10900x").clock_hz == 3.7e9
    # AMX: Sapphire Rapids and later Xeons only
    for pid in ("xeon-w5-2455x", "xeon-platinum-8470", "xeon-gold-6538yplus"):
        assert cpu_amx(get_cpu_preset(pid))[0] is True, pid
    for pid in ("xeon-platinum-8380", "xeon-gold-6248", "core-i9-10980xe", "epyc-7742", "core-i9-14900"):
        assert cpu_amx(get_cpu_preset(pid))[0] is False, pid


# "model name" as /proc/cpuinfo and lscpu print it, and as people type it
NAMES = [
    ("Intel(R) Core(TM) i9-10900X CPU @ 3.70GHz", "core-i9-10900x"),
    ("Intel(R) Core(TM) i9-10980XE CPU @ 3.00GHz", "core-i9-10980xe"),
    ("Intel(R) Core(TM) i9-10940X CPU @ 3.30GHz", "core-i9-10940x"),
    ("Intel(R) Core(TM) i9-9900K CPU @ 3.60GHz", "core-i9-9900k"),
    ("Intel(R) Core(TM) i7-9700K CPU @ 3.60GHz", "core-i7-9700k"),
    ("Intel(R) Core(TM) i5-9600K CPU @ 3.70GHz", "core-i5-9600k"),
    ("Intel(R) Core(TM) i5-10400 CPU @ 2.90GHz", "core-i5-10400"),
    ("Intel(R) Core(TM) i7-10700K CPU @ 3.80GHz", "core-i7-10700k"),
    ("Intel(R) Core(TM) i9-10900K CPU @ 3.70GHz", "core-i9-10900k"),
    ("11th Gen Intel(R) Core(TM) i5-11400 @ 2.60GHz", "core-i5-11400"),
    ("11th Gen Intel(R) Core(TM) i9-11900K @ 3.50GHz", "core-i9-11900k"),
    ("12th Gen Intel(R) Core(TM) i7-12700", "core-i7-12700"),
    ("13th Gen Intel(R) Core(TM) i9-13900", "core-i9-13900"),
    ("Intel(R) Core(TM) i7-14700", "core-i7-14700"),
    ("Intel(R) Core(TM) i9-14900KS", "core-i9-14900ks"),
    ("Intel(R) Xeon(R) W-2295 CPU @ 3.00GHz", "xeon-w-2295"),
    ("Intel(R) Xeon(R) W-3375 CPU @ 2.50GHz", "xeon-w-3375"),
    ("Intel(R) Xeon(R) w7-2495X", "xeon-w7-2495x"),
    ("Intel(R) Xeon(R) Gold 5218 CPU @ 2.30GHz", "xeon-gold-5218"),
    ("Intel(R) Xeon(R) Gold 6248R CPU @ 3.00GHz", "xeon-gold-6248r"),
    ("Intel(R) Xeon(R) Gold 6258R CPU @ 2.70GHz", "xeon-gold-6258r"),
    ("Intel(R) Xeon(R) Platinum 8280 CPU @ 2.70GHz", "xeon-platinum-8280"),
    ("Intel(R) Xeon(R) Silver 4214R CPU @ 2.40GHz", "xeon-silver-4214r"),
    ("Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz", "xeon-gold-6338"),
    ("Intel(R) Xeon(R) Platinum 8380 CPU @ 2.30GHz", "xeon-platinum-8380"),
    ("Intel(R) Xeon(R) Platinum 8470", "xeon-platinum-8470"),
    ("Intel(R) Xeon(R) Gold 6538Y+", "xeon-gold-6538yplus"),
    ("AMD Ryzen 5 3600X 6-Core Processor", "ryzen-5-3600x"),
    ("AMD Ryzen 7 3700X 8-Core Processor", "ryzen-7-3700x"),
    ("AMD Ryzen 5 5600G with Radeon Graphics", "ryzen-5-5600g"),
    ("AMD Ryzen 5 7600X3D 6-Core Processor", "ryzen-5-7600x3d"),
    ("AMD Ryzen 5 8500G w/ Radeon 740M Graphics", "ryzen-5-8500g"),
    ("AMD Ryzen 7 8700F 8-Core Processor", "ryzen-7-8700f"),
    ("AMD Ryzen 5 9600 6-Core Processor", "ryzen-5-9600"),
    ("AMD Ryzen 7 7840HS w/ Radeon 780M Graphics", "ryzen-7-7840hs"),
    ("AMD Ryzen 7 8845HS w/ Radeon 780M Graphics", "ryzen-7-8845hs"),
    ("AMD Ryzen AI 9 HX 370 w/ Radeon 890M", "ryzen-ai-9-hx-370"),
    ("AMD Ryzen AI 9 HX PRO 370 w/ Radeon 890M", "ryzen-ai-9-hx-pro-370"),
    ("AMD Ryzen AI 7 350 w/ Radeon 860M", "ryzen-ai-7-350"),
    ("AMD Ryzen Threadripper 3970X 32-Core Processor", "threadripper-3970x"),
    ("AMD Ryzen Threadripper 3990X 64-Core Processor", "threadripper-3990x"),
    ("AMD Ryzen Threadripper PRO 3975WX 32-Cores", "threadripper-pro-3975wx"),
    ("AMD EPYC 7742 64-Core Processor", "epyc-7742"),
    ("AMD EPYC 7302P 16-Core Processor", "epyc-7302p"),
    ("AMD EPYC 7F52 16-Core Processor", "epyc-7f52"),
    ("AMD EPYC 7453 28-Core Processor", "epyc-7453"),
    ("AMD EPYC 7773X 64-Core Processor", "epyc-7773x"),
    ("AMD EPYC 9184X 16-Core Processor", "epyc-9184x"),
    # laptops (Tiger Lake to Arrow and Lunar Lake; Ryzen 5000 to 9000 HX), Xeon E, EPYC 4004/4005
    ("Intel(R) Core(TM) i7-12700H CPU @ 2.30GHz", "core-i7-12700h"),
    ("12th Gen Intel(R) Core(TM) i7-1260P", "core-i7-1260p"),
    ("12th Gen Intel(R) Core(TM) i9-12900HX", "core-i9-12900hx"),
    ("13th Gen Intel(R) Core(TM) i7-13700H", "core-i7-13700h"),
    ("13th Gen Intel(R) Core(TM) i9-13980HX", "core-i9-13980hx"),
    ("13th Gen Intel(R) Core(TM) i5-1335U", "core-i5-1335u"),
    ("Intel(R) Core(TM) i9-14900HX", "core-i9-14900hx"),
    ("11th Gen Intel(R) Core(TM) i5-1135G7 @ 2.40GHz", "core-i5-1135g7"),
    ("11th Gen Intel(R) Core(TM) i7-11800H @ 2.30GHz", "core-i7-11800h"),
    ("Intel(R) Core(TM) Ultra 7 155H", "core-ultra-7-155h"),
    ("Intel(R) Core(TM) Ultra 5 125U", "core-ultra-5-125u"),
    ("Intel(R) Core(TM) Ultra 9 285H", "core-ultra-9-285h"),
    ("Intel(R) Core(TM) Ultra 9 275HX", "core-ultra-9-275hx"),
    ("Intel(R) Core(TM) Ultra 7 258V", "core-ultra-7-258v"),
    ("Intel(R) Core(TM) Ultra 7 265", "core-ultra-7-265"),
    ("Intel(R) Xeon(R) E-2288G CPU @ 3.70GHz", "xeon-e-2288g"),
    ("Intel(R) Xeon(R) E-2388G CPU @ 3.20GHz", "xeon-e-2388g"),
    ("Intel(R) Xeon(R) E-2488", "xeon-e-2488"),
    ("AMD EPYC 4564P 16-Core Processor", "epyc-4564p"),
    ("AMD EPYC 4585PX 16-Core Processor", "epyc-4585px"),
    ("AMD EPYC 9845 160-Core Processor", "epyc-9845"),
    ("AMD Ryzen 7 7840HS w/ Radeon 780M Graphics", "ryzen-7-7840hs"),
    ("AMD Ryzen 7 5800H with Radeon Graphics", "ryzen-7-5800h"),
    ("AMD Ryzen 7 6800H with Radeon Graphics", "ryzen-7-6800h"),
    ("AMD Ryzen 9 7945HX with Radeon Graphics", "ryzen-9-7945hx"),
    ("AMD Ryzen 9 9955HX3D 16-Core Processor", "ryzen-9-9955hx3d"),
    ("AMD Ryzen 5 8645HS w/ Radeon 760M Graphics", "ryzen-5-8645hs"),
    ("AMD Ryzen AI 5 340 w/ Radeon 840M", "ryzen-ai-5-340"),
    ("AMD Ryzen 9 5900XT 16-Core Processor", "ryzen-9-5900xt"),
]
TYPED = [
    # an F part by its name finds the part without graphics (detection keeps to exact names)
    ("12th Gen Intel(R) Core(TM) i3-12100F", "core-i3-12100"),
    ("13th Gen Intel(R) Core(TM) i5-13400F", "core-i5-13400"),
    ("Core i5-13400F", "core-i5-13400"),
    ("i9-10900X", "core-i9-10900x"),
    ("10980XE", "core-i9-10980xe"),
    ("i7-10700KF", "core-i7-10700k"),
    ("Core i9-14900", "core-i9-14900"),
    ("Ryzen AI 9 HX PRO 370", "ryzen-ai-9-hx-pro-370"),
    ("Ryzen 7 7840HS", "ryzen-7-7840hs"),
    ("Threadripper 3960X", "threadripper-3960x"),
    ("Threadripper PRO 3995WX", "threadripper-pro-3995wx"),
    ("EPYC 7742", "epyc-7742"),
    ("7B12", None),  # cloud-only parts have no preset
    ("Xeon Gold 6248", "xeon-gold-6248"),
    ("Gold 6248R", "xeon-gold-6248r"),
    ("Platinum 8358", "xeon-platinum-8358"),
    ("Xeon W-2245", "xeon-w-2245"),
    ("W-2295", "xeon-w-2295"),  # a Xeon W by the number Intel writes
    ("w9-3495X", "xeon-w9-3495x"),
    ("w5-2455X", "xeon-w5-2455x"),
    ("5600x3d", "ryzen-5-5600x3d"),
    ("7500F", "ryzen-5-7500f"),  # AMD's F: the same part's id
    ("EPYC 4564P", "epyc-4564p"), ("4124P", "epyc-4124p"), ("Xeon E-2288G", "xeon-e-2288g"), ("E-2414", "xeon-e-2414"),
    ("i7-12700H", "core-i7-12700h"), ("Core i5-1135G7", "core-i5-1135g7"), ("Ultra 7 155H", "core-ultra-7-155h"),
    ("Core Ultra 7 255HX", "core-ultra-7-255hx"), ("Core Ultra 5 225F", "core-ultra-5-225"),  # F: without graphics
    ("Core Ultra 7 265KF", "core-ultra-7-265k"), ("Ryzen 9 7945HX3D", "ryzen-9-7945hx3d"), ("5800H", "ryzen-7-5800h"),
]


@pytest.mark.parametrize(("name", "pid"), NAMES)
def test_detected_names_find_their_preset(name, pid):
    assert model_for_cpu_name(name).preset_id == pid
    assert find_cpu_preset_id(name) == pid


@pytest.mark.parametrize(("name", "pid"), TYPED)
def test_typed_names_find_their_preset(name, pid):
    if pid is None:
        with pytest.raises(CopeInputError, match="unknown CPU preset"):
            find_cpu_preset_id(name)
    else:
        assert find_cpu_preset_id(name) == pid


def test_every_preset_is_found_by_its_name_its_short_name_and_its_id():
    for pid, model in cpu_models().items():
        short = model.name.split(" ", 1)[1]  # without the vendor
        assert find_cpu_preset_id(model.name) == find_cpu_preset_id(short) == find_cpu_preset_id(pid) == pid


def test_a_laptop_part_takes_its_slots_and_its_soldered_memory():
    phoenix = cpu_models()["ryzen-7-7840hs"]
    for spec in ("ddr5-5600x2", "lpddr5x-7500x128bit"):
        phoenix.check_memory(parse_memory_spec(spec), "--memory")
    assert get_cpu_preset("ryzen-7-7840hs").mem_bandwidth_bytes_per_s.value == pytest.approx(89.6e9)


@pytest.mark.parametrize(("cpu", "threads"), [
    ("Core i5-13400F", 10),
    ("Core i9-10900X", 10),
    ("Ryzen AI 9 HX PRO 370", 12),
    ("Intel(R) Xeon(R) Gold 6248R CPU @ 3.00GHz", 24),
    ("AMD EPYC 7742 64-Core Processor", 64),
    ("Threadripper 3970X", 32),
    ("i9-9900K", 8),
])
def test_cope_estimate_plans_with_new_cpus(capsys, cpu, threads):
    code = main(["estimate", "--cpu", cpu, "--gpu", "rtx-4090", "--tokens", "100", "--",
                 "llama-server", "-m", "Qwen3-30B-A3B-Q4_K_M.gguf", "-ngl", "99", "--n-cpu-moe", "20",
                 "-t", str(threads)])
    out = capsys.readouterr()
    assert code == EXIT_OK, out.err
    assert "COPE estimate: Qwen3-30B-A3B Q4_K_M" in out.out and "ms/token" in out.out
