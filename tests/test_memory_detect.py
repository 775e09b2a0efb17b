"""Memory detection from what Linux exposes without root (fake sysfs, dmidecode and EDAC files)."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from probes.host import detect_cpu
from probes.memory_detect import detect_memory, dmidecode_dimms, smbios_type17

NO_DMIDECODE = lambda: (None, "dmidecode: not in tests")  # noqa: E731


def type17(locator: str, bank: str, *, size_mb: int = 16384, mtype: int = 0x22, speed: int = 5600,
           configured: int = 4800) -> bytes:
    """An SMBIOS 2.8 type-17 structure as /sys/firmware/dmi/entries/17-*/raw holds it."""
    length = 0x28
    b = bytearray(length)
    b[0], b[1] = 17, length
    struct.pack_into("<HHH", b, 0x08, 72, 64, size_mb)  # total width, data width, size (MB)
    b[0x10], b[0x11], b[0x12] = 1, 2, mtype
    struct.pack_into("<H", b, 0x15, speed)
    struct.pack_into("<H", b, 0x20, configured)
    return bytes(b) + locator.encode() + b"\0" + bank.encode() + b"\0\0"


def fake_sysfs(root: Path, raws: list[bytes]) -> Path:
    for i, raw in enumerate(raws):
        d = root / "firmware" / "dmi" / "entries" / f"17-{i}"
        d.mkdir(parents=True)
        (d / "raw").write_bytes(raw)
    return root


def fake_proc(root: Path, sockets: int = 1, cores: int = 4) -> Path:
    blocks = []
    for s in range(sockets):
        for c in range(cores):
            blocks.append(f"processor\t: {s * cores + c}\nmodel name\t: AMD Ryzen 9 7950X 16-Core Processor\n"
                          f"physical id\t: {s}\ncore id\t\t: {c}\n")
    root.mkdir(parents=True, exist_ok=True)
    (root / "cpuinfo").write_text("\n".join(blocks))
    (root / "meminfo").write_text("MemTotal:       65536000 kB\nMemAvailable:   60000000 kB\n")
    return root


def test_smbios_entries_give_type_speed_and_channels(tmp_path):
    sys_root = fake_sysfs(tmp_path / "sys", [
        type17("DIMM 0", "P0 CHANNEL A"), type17("DIMM 1", "P0 CHANNEL A", size_mb=0),  # an empty slot
        type17("DIMM 0", "P0 CHANNEL B"), type17("DIMM 1", "P0 CHANNEL B", configured=5200),
    ])
    m = detect_memory(1, sys_root, NO_DMIDECODE)
    assert (m.type.value, m.speed_mts.value, m.channels.value, m.dimms) == ("DDR5", 4800, 2, 3)
    assert {m.type.basis, m.speed_mts.basis, m.channels.basis} == {"detected"}
    assert "SMBIOS type 17" in m.type.note and "slowest" in m.speed_mts.note


def test_smbios_parser_reads_ddr4_and_skips_empty_slots():
    dimm = smbios_type17(type17("P1-DIMMC1", "P0_Node0_Channel2_Dimm0", mtype=0x1A, speed=3200, configured=2933))
    assert (dimm.type, dimm.speed_mts, dimm.channel) == ("DDR4", 2933, "0/2")
    assert smbios_type17(type17("A1", "x", size_mb=0)) is None
    assert smbios_type17(b"\x11\x04") is None  # truncated


DMIDECODE = """# dmidecode 3.5
Getting SMBIOS data from sysfs.
SMBIOS 3.3.0 present.

Handle 0x0040, DMI type 17, 92 bytes
Memory Device
	Array Handle: 0x003F
	Size: 32 GB
	Locator: CPU1_DIMM_A1
	Bank Locator: NODE 1
	Type: DDR5
	Speed: 4800 MT/s
	Configured Memory Speed: 4400 MT/s

Handle 0x0041, DMI type 17, 92 bytes
Memory Device
	Size: No Module Installed
	Locator: CPU1_DIMM_A2
	Bank Locator: NODE 1
	Type: Unknown
	Speed: Unknown

Handle 0x0042, DMI type 17, 92 bytes
Memory Device
	Size: 32 GB
	Locator: CPU1_DIMM_B1
	Bank Locator: NODE 1
	Type: DDR5
	Speed: 4800 MT/s
	Configured Memory Speed: 4400 MT/s

Handle 0x0043, DMI type 17, 92 bytes
Memory Device
	Size: 32 GB
	Locator: CPU2_DIMM_A1
	Bank Locator: NODE 2
	Type: DDR5
	Speed: 4800 MT/s
	Configured Memory Speed: 4400 MT/s

Handle 0x0044, DMI type 17, 92 bytes
Memory Device
	Size: 32 GB
	Locator: CPU2_DIMM_B1
	Bank Locator: NODE 2
	Type: DDR5
	Speed: 4800 MT/s
	Configured Memory Speed: 4400 MT/s
"""


def test_dmidecode_output_when_the_table_is_readable(tmp_path):
    assert len(dmidecode_dimms(DMIDECODE)) == 4
    m = detect_memory(2, tmp_path / "no-sys", lambda: (DMIDECODE, "dmidecode -t 17"))
    assert (m.type.value, m.speed_mts.value, m.channels.value) == ("DDR5", 4400, 2)  # 4 channels over 2 sockets
    assert "dmidecode" in m.channels.note


def fake_edac(root: Path, dimms: list[tuple[str, str, str, str]]) -> Path:
    for mc, dimm, kind, location in dimms:
        d = root / "devices" / "system" / "edac" / "mc" / mc / dimm
        d.mkdir(parents=True)
        (d / "size").write_text("32768\n")
        (d / "dimm_mem_type").write_text(kind + "\n")
        (d / "dimm_location").write_text(location + "\n")
    return root


def test_edac_gives_type_and_channels_but_no_speed(tmp_path):
    sys_root = fake_edac(tmp_path / "sys", [
        ("mc0", f"dimm{i}", "Registered-DDR4", f"channel {i} slot 0") for i in range(8)
    ])
    m = detect_memory(1, sys_root, NO_DMIDECODE)
    assert (m.type.value, m.channels.value) == ("DDR4", 8)
    assert not m.speed_mts.known and "no speed" in m.speed_mts.note


def test_nothing_readable_says_where_it_looked_and_never_raises(tmp_path):
    locked = fake_sysfs(tmp_path / "sys", [type17("DIMM 0", "P0 CHANNEL A")])
    (locked / "firmware" / "dmi" / "entries" / "17-0" / "raw").unlink()  # as if root-only: nothing to read
    m = detect_memory(1, locked, NO_DMIDECODE)
    assert not m.type.known and not m.speed_mts.known and not m.channels.known
    assert "dmi/entries" in m.type.note and "dmidecode" in m.type.note and "edac" in m.type.note
    assert "--memory" in m.type.note

    def broken():
        raise RuntimeError("boom")

    assert not detect_memory(1, tmp_path / "none", broken).type.known


def test_detect_cpu_fills_memory_and_its_peak_but_plans_nothing_yet(tmp_path):
    sys_root = fake_sysfs(tmp_path / "sys", [type17("DIMM 0", "P0 CHANNEL A", configured=6000),
                                             type17("DIMM 0", "P0 CHANNEL B", configured=6000)])
    cpu = detect_cpu(fake_proc(tmp_path / "proc"), sys_root, dmidecode=NO_DMIDECODE)
    assert (cpu.memory_type.value, cpu.memory_speed_mts.value, cpu.memory_channels.value) == ("DDR5", 6000, 2)
    assert cpu.mem_peak_bytes_per_s.value == pytest.approx(96e9) and cpu.mem_peak_bytes_per_s.basis == "detected"
    assert not cpu.mem_bandwidth_bytes_per_s.known  # measured by cope detect, or chosen when planning
    assert (cpu.sockets.value, cpu.sockets.basis) == (1, "detected")


def test_detect_cpu_counts_sockets(tmp_path):
    cpu = detect_cpu(fake_proc(tmp_path / "proc", sockets=2), tmp_path / "sys", dmidecode=NO_DMIDECODE)
    assert (cpu.sockets.value, cpu.sockets.basis) == (2, "detected")
    assert not cpu.memory_type.known and not cpu.mem_peak_bytes_per_s.known


def test_detect_cpu_on_this_machine_never_fails():
    cpu = detect_cpu()
    for fact in (cpu.sockets, cpu.memory_type, cpu.memory_speed_mts, cpu.memory_channels, cpu.mem_peak_bytes_per_s):
        assert fact.note
