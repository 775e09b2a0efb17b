"""CPU presets (assets/cpus.json): every figure with its source, the memory each CPU takes,
and the names people and /proc/cpuinfo give them."""

from __future__ import annotations

import pytest

import engine.hardware.cpu_presets as cp
from engine.core.errors import CopeInputError
from engine.hardware.cpu_presets import get_cpu_preset
from engine.hardware.memory_spec import parse_memory_spec

GiB = 1024**3

# Every CPU the published measurements name (calibration data), as they name it.
CSV_CPUS = [
    ("Ryzen-7950X", "ryzen-9-7950x"),
    ("AMD Ryzen 5 3500 (6c)", "ryzen-5-3500"),
    ("AMD Ryzen 7 5800X", "ryzen-7-5800x"),
    ("AMD Ryzen 7 9700X (8c/16t)", "ryzen-7-9700x"),
    ("Intel Core i9-14900K", "core-i9-14900k"),
    ("Ryzen-5975WX", "threadripper-pro-5975wx"),
    ("AMD EPYC 7343", "epyc-7343"),
    ("AMD EPYC 9355", "epyc-9355"),
    ("AMD EPYC 9175F (16C)", "epyc-9175f"),
    ("AMD EPYC 9654P", "epyc-9654p"),
    ("Intel Xeon Gold 6454S", "xeon-gold-6454s"),
    ("Intel Xeon Gold 6138", "xeon-gold-6138"),
    ("Intel Xeon 8480+", "xeon-platinum-8480plus"),
    ("Intel Xeon E7-8880 v3", "xeon-e7-8880-v3"),
]


@pytest.fixture
def fresh(monkeypatch):
    caches = (cp.cpu_models, cp.machines, cp.cpu_presets)
    for c in caches:
        c.cache_clear()
    yield monkeypatch
    for c in caches:
        c.cache_clear()


def test_every_cpu_model_has_a_source_for_each_figure():
    models = cp.cpu_models()
    assert len(models) >= 100
    for pid, m in models.items():
        for figure in cp.CPU_FIGURES:
            src = m.source(figure)
            assert "https://" in src and ("amd.com" in src or "intel.com" in src), (pid, figure)
        assert m.threads >= m.cores > 0
        assert m.default_memory.type in dict(m.memory_speeds_mts)
        assert m.default_memory.channels <= m.memory_channels
        assert m.default_memory_note and m.ram_bytes > 0


def test_the_families_people_use_are_there():
    ids = set(cp.cpu_models())
    for pid in ("ryzen-9-5950x", "ryzen-9-7950x3d", "ryzen-9-9950x", "core-i9-12900k", "core-i7-13700k",
                "core-i5-14600k", "core-ultra-9-285k", "threadripper-7980x", "threadripper-pro-7995wx",
                "epyc-9654", "epyc-9755", "epyc-9965", "xeon-platinum-8592plus", "xeon-6980p", "ryzen-ai-max-plus-395"):
        assert pid in ids, pid


@pytest.mark.parametrize("name, pid", CSV_CPUS)
def test_calibration_cpus_find_their_preset(name, pid):
    from engine.hardware.cpu_choice import split_sockets
    from engine.hardware.preset_names import match_preset, presets_named_in

    names = {k: m.name for k, m in cp.cpu_models().items()}
    _, bare = split_sockets(name)
    found = match_preset(names, bare) or presets_named_in(names, bare)
    assert found == [pid]


@pytest.mark.parametrize(
    "cpuinfo_name, pid",
    [
        # "model name" as /proc/cpuinfo and lscpu print it
        ("AMD Ryzen 9 7950X 16-Core Processor", "ryzen-9-7950x"),
        ("AMD Ryzen 7 9700X 8-Core Processor", "ryzen-7-9700x"),
        ("AMD Ryzen 5 3500 6-Core Processor", "ryzen-5-3500"),
        ("13th Gen Intel(R) Core(TM) i9-13900K", "core-i9-13900k"),
        ("Intel(R) Core(TM) i9-14900K", "core-i9-14900k"),
        ("Intel(R) Core(TM) Ultra 9 285K", "core-ultra-9-285k"),
        ("Intel(R) Xeon(R) Gold 6454S", "xeon-gold-6454s"),
        ("Intel(R) Xeon(R) Platinum 8480+", "xeon-platinum-8480plus"),
        ("Intel(R) Xeon(R) Gold 6138 CPU @ 2.00GHz", "xeon-gold-6138"),
        ("Intel(R) Xeon(R) CPU E7-8880 v3 @ 2.30GHz", "xeon-e7-8880-v3"),
        ("AMD EPYC 9654P 96-Core Processor", "epyc-9654p"),
        ("AMD EPYC 7343 16-Core Processor", "epyc-7343"),
        ("AMD Ryzen Threadripper PRO 5975WX 32-Cores", "threadripper-pro-5975wx"),
        ("AMD Ryzen AI Max+ 395 w/ Radeon 8060S", "ryzen-ai-max-plus-395"),
    ],
)
def test_detected_names_find_their_model_and_lookups_agree(cpuinfo_name, pid):
    assert cp.model_for_cpu_name(cpuinfo_name).preset_id == pid
    assert get_cpu_preset(cpuinfo_name).preset_id == pid


@pytest.mark.parametrize("name", ["AMD EPYC", "AMD Ryzen 7 7735HS with Radeon Graphics", "Intel(R) Xeon(R) Gold 6454",
                                  "AMD Ryzen 9 7950X3D2 16-Core Processor", "ARMv8 Processor rev 1 (v8l)", ""])
def test_other_cpus_borrow_no_figures(name):
    assert cp.model_for_cpu_name(name) is None


def test_model_numbers_alone_and_old_ids():
    assert get_cpu_preset("7950x3d").preset_id == "ryzen-9-7950x3d"
    assert get_cpu_preset("7950x").preset_id == "ryzen-9-7950x"
    assert get_cpu_preset("6454s").preset_id == "xeon-gold-6454s"
    assert get_cpu_preset("server-epyc").name == "AMD EPYC 9654"


def test_a_preset_plans_with_its_usual_memory_and_says_which():
    c = get_cpu_preset("ryzen-9-7950x")
    assert (c.memory_type.value, c.memory_speed_mts.value, c.memory_channels.value) == ("DDR5", 5200, 2)
    assert c.mem_bandwidth_bytes_per_s.value == pytest.approx(83.2e9) == c.mem_peak_bytes_per_s.value
    assert "usual memory" in c.mem_bandwidth_bytes_per_s.note and "--memory" in c.mem_bandwidth_bytes_per_s.note
    epyc = get_cpu_preset("epyc-9175f")
    assert epyc.memory_channels.value == 12 and epyc.mem_bandwidth_bytes_per_s.value == pytest.approx(576e9)
    assert "amd.com" in epyc.memory_channels.note
    strix = get_cpu_preset("ryzen-ai-max-plus-395")
    assert strix.mem_bandwidth_bytes_per_s.value == pytest.approx(256e9) and "16-bit" in strix.memory_channels.note
    e7 = get_cpu_preset("xeon-e7-8880-v3")
    assert e7.mem_bandwidth_bytes_per_s.value == pytest.approx(102.4e9)  # ARK's 102 GB/s


@pytest.mark.parametrize(
    "pid, spec, needle",
    [
        ("ryzen-9-7950x", "ddr4-3200x2", "takes DDR5, not DDR4"),
        ("ryzen-9-7950x", "ddr5-6000x4", "has 2 memory channels a socket, not 4"),
        ("epyc-9654", "ddr5-4800x16", "has 12 memory channels"),
    ],
)
def test_memory_a_cpu_cannot_take_is_refused(pid, spec, needle):
    with pytest.raises(CopeInputError, match=needle):
        cp.cpu_models()[pid].check_memory(parse_memory_spec(spec), "--memory")
    cp.cpu_models()["core-i9-14900k"].check_memory(parse_memory_spec("ddr4-3200x2"), "--memory")  # LGA1700 takes both


def test_a_figure_without_its_source_is_refused(fresh):
    data = cp.load_asset_json("cpus.json")
    data["cpus"][3]["sources"]["memory_channels"] = "the vendor said so"
    fresh.setattr(cp, "load_asset_json", lambda name: data)
    with pytest.raises(CopeInputError, match=r"cpus\.json.*sources.*memory_channels.*https://"):
        cp.cpu_models()


@pytest.mark.parametrize(
    "change, needle",
    [
        ({"default_memory": "ddr5-48000x2"}, "default_memory"),
        ({"default_memory": "ddr4-3200x2"}, "takes DDR5"),
        ({"memory_speeds_mts": {"DDR9": 5200}}, "memory_speeds_mts"),
        ({"memory_channels": 0}, "memory_channels"),
    ],
)
def test_corrupt_cpu_rows_name_the_field(fresh, change, needle):
    data = cp.load_asset_json("cpus.json")
    row = next(r for r in data["cpus"] if r["id"] == "ryzen-9-7950x")
    row.update(change)
    fresh.setattr(cp, "load_asset_json", lambda name: data)
    with pytest.raises(CopeInputError) as err:
        cp.cpu_models()
    assert "ryzen-9-7950x" in str(err.value) and needle in str(err.value)


def test_a_machine_must_name_a_cpu_preset(fresh):
    data = cp.load_asset_json("cpus.json")
    data["machines"][0]["cpu"] = "pentium-4"
    fresh.setattr(cp, "load_asset_json", lambda name: data)
    with pytest.raises(CopeInputError, match=r"machines\[0\].*no CPU preset 'pentium-4'"):
        cp.machines()


@pytest.mark.parametrize("name, preset", [
    ("Core i5-13400F", "core-i5-13400"),
    ("13th Gen Intel(R) Core(TM) i5-13400F", "core-i5-13400"),
    ("i7-14700KF", "core-i7-14700k"),
    ("EPYC 9175F", "epyc-9175f"),  # AMD's F is another part (frequency-optimised): kept
])
def test_an_intel_f_part_is_the_part_without_its_graphics(name, preset):
    from engine.hardware.cpu_presets import find_cpu_preset_id

    assert find_cpu_preset_id(name) == preset


def test_a_cpu_name_with_a_machines_memory_plans_as_that_machine(capsys):
    """One preset per CPU name, memory given separately (issue 30): the Ryzen 9 7950X with
    the desktop-ddr5 machine's memory is priced as desktop-ddr5, and the app's CPU picker
    names each CPU once, a machine row with the memory that sets it apart."""
    import json

    from cope_tui.cli import main
    from cope_tui.options import _cpu_presets

    ranked = []
    for cpu in (["--cpu", "desktop-ddr5"], ["--cpu", "AMD Ryzen 9 7950X", "--memory", "ddr5-6000x2"]):
        assert main(["advise", "--json", "--tokens", "150", *cpu]) == 0
        doc = json.loads(capsys.readouterr().out)
        ranked.append([(c["id"], c["tpot_s"]) for c in doc["candidates"]])
    assert ranked[0] == ranked[1]
    labels = dict((value, label) for label, value in _cpu_presets())
    assert labels["ryzen-9-7950x"] == "AMD Ryzen 9 7950X"
    assert labels["desktop-ddr5"] == "AMD Ryzen 9 7950X + ddr5-6000x2"
    assert len(set(labels.values())) == len(labels)  # no two entries read alike
