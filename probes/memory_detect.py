"""This machine's memory modules as Linux shows them, without root: type, speed, channels.

Three places, first that answers: the SMBIOS type-17 entries under
/sys/firmware/dmi/entries (the firmware's table of memory devices; usually readable by
root only), `dmidecode -t 17` when it is installed and allowed to read that table, and
the EDAC driver's DIMM list under /sys/devices/system/edac/mc (readable by anyone, on
servers with ECC; it gives the type and the channels, never the speed). Nothing here asks
for root or raises: a source that cannot be read is skipped, and the result says why the
figures it could not give are unknown. The parsers take file contents, so tests feed
them samples.
"""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from engine.hardware.memory_spec import memory_type
from engine.hardware.platform import Fact

# SMBIOS 3.x type 17 "Memory Type" codes of the memory COPE knows.
_SMBIOS_TYPES = {0x18: "DDR3", 0x1A: "DDR4", 0x1E: "LPDDR4", 0x22: "DDR5", 0x23: "LPDDR5"}


@dataclass(frozen=True)
class Dimm:
    type: str | None  # "DDR5"
    speed_mts: int | None  # the speed it runs at (configured), else its rated speed
    channel: str | None  # a name for its channel, unique on the machine ("P0/A"), when the locators say
    locator: str


@dataclass(frozen=True)
class MemoryFacts:
    type: Fact
    speed_mts: Fact
    channels: Fact  # of one socket
    dimms: int


# --- parsers ------------------------------------------------------------------------------


def _channel(locator: str, bank: str) -> str | None:
    """A channel name from a DIMM's locators: "P0 CHANNEL A", "Controller0-ChannelA-DIMM0",
    "P0_Node0_Channel1_Dimm0", "CPU1_DIMM_B2", "P1-DIMMC1"; None when they do not say."""
    text = f"{bank} {locator}"
    socket = re.search(r"(?i)\b(?:P|CPU|SOCKET|NODE)\s*_?(\d+)", text)
    where = socket.group(1) if socket else "0"
    m = re.search(r"(?i)channel\s*_?([A-Z0-9]+)", text)
    if m:
        ctl = re.search(r"(?i)controller\s*(\d+)", text)
        return f"{where}/{ctl.group(1) + ':' if ctl else ''}{m.group(1).upper()}"
    m = re.search(r"(?i)DIMM[\s_-]*([A-P])\d", text)
    if m:
        return f"{where}/{m.group(1).upper()}"
    return None


def smbios_type17(raw: bytes) -> Dimm | None:
    """One SMBIOS type-17 structure (formatted area and strings) -> Dimm, None for an empty slot."""
    if len(raw) < 0x17 or raw[0] != 17:
        return None
    length = raw[1]
    strings = raw[length:].split(b"\x00")

    def text(index_at: int) -> str:
        if index_at >= length:
            return ""
        i = raw[index_at]
        return strings[i - 1].decode("ascii", "replace").strip() if 0 < i <= len(strings) else ""

    size = struct.unpack_from("<H", raw, 0x0C)[0]
    if size == 0:
        return None  # no module in this slot
    kind = _SMBIOS_TYPES.get(raw[0x12])
    speed = struct.unpack_from("<H", raw, 0x15)[0] if length >= 0x17 else 0
    configured = struct.unpack_from("<H", raw, 0x20)[0] if length >= 0x22 else 0
    if length >= 0x5C:  # SMBIOS 3.3: 0xFFFF means "see the 32-bit extended field"
        if configured == 0xFFFF:
            configured = struct.unpack_from("<I", raw, 0x58)[0]
        if speed == 0xFFFF:
            speed = struct.unpack_from("<I", raw, 0x54)[0]
    run = next((s for s in (configured, speed) if 0 < s < 0xFFFF), None)
    locator, bank = text(0x10), text(0x11)
    return Dimm(kind, run, _channel(locator, bank), locator or bank)


def dmidecode_dimms(text: str) -> list[Dimm]:
    """`dmidecode -t 17` output -> the installed DIMMs."""
    out: list[Dimm] = []
    for block in re.split(r"\n(?=Handle )", text):
        if "Memory Device" not in block:
            continue
        fields = dict(re.findall(r"^\s+([^:\n]+):\s*(.*)$", block, flags=re.MULTILINE))
        size = fields.get("Size", "")
        if not size or "No Module" in size or size.strip() in ("0", "Unknown"):
            continue
        kind = memory_type(fields.get("Type", "")) if fields.get("Type") else None
        speed = None
        for key in ("Configured Memory Speed", "Configured Clock Speed", "Speed"):
            m = re.match(r"(\d+)\s*(MT/s|MHz)", fields.get(key, ""))
            if m:
                speed = int(m.group(1))
                break
        locator, bank = fields.get("Locator", ""), fields.get("Bank Locator", "")
        out.append(Dimm(kind.name if kind else None, speed, _channel(locator, bank), locator or bank))
    return out


def edac_dimm(mc: str, mem_type: str, location: str, size_mib: str) -> Dimm | None:
    """One EDAC DIMM (its files' contents) -> Dimm, None for an empty one."""
    try:
        if int(size_mib.strip() or 0) <= 0:
            return None
    except ValueError:
        return None
    m = re.search(r"(LP)?DDR\d", mem_type.upper())
    kind = memory_type(m.group(0)) if m else None
    ch = re.search(r"channel\s*(\d+)", location)
    return Dimm(kind.name if kind else None, None, f"{mc}/{ch.group(1)}" if ch else None, location.strip())


def memory_facts(dimms: list[Dimm], sockets: int, how: str) -> MemoryFacts:
    """The type, speed and channels of one socket the DIMMs say, each with `how`."""
    n = len(dimms)
    types = {d.type for d in dimms if d.type}
    speeds = [d.speed_mts for d in dimms if d.speed_mts]
    kind = (Fact.detected(types.pop(), f"{how}, {n} DIMMs") if len(types) == 1
            else Fact.unknown(f"{how}: {'mixed types ' + ', '.join(sorted(types)) if types else 'no type given'}"))
    # The slowest DIMM sets the speed of all (the controller runs every channel alike).
    speed = (Fact.detected(min(speeds), f"{how}: the speed the DIMMs run at (the slowest of {n})") if speeds
             else Fact.unknown(f"{how}: no speed given"))
    named = {d.channel for d in dimms if d.channel}
    if named and all(d.channel for d in dimms):
        per_socket = max(1, round(len(named) / max(1, sockets)))
        channels = Fact.detected(per_socket, f"{how}: {len(named)} channels with a DIMM, by the DIMMs' locators, "
                                             f"over {sockets} socket(s)")
    else:
        channels = Fact.unknown(f"{how}: the DIMMs' locators do not name their channels ({n} DIMMs)")
    return MemoryFacts(kind, speed, channels, n)


# --- reading this machine -----------------------------------------------------------------


def _read_bytes(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:
        return None


def _from_sysfs_dmi(sys_root: Path) -> tuple[list[Dimm] | None, str]:
    folder = sys_root / "firmware" / "dmi" / "entries"
    try:
        entries = sorted(p for p in folder.iterdir() if p.name.startswith("17-"))
    except OSError:
        return None, f"{folder} is missing"
    if not entries:
        return None, f"{folder} lists no memory devices"
    raws = [_read_bytes(e / "raw") for e in entries]
    if all(r is None for r in raws):
        return None, f"{folder}/17-*/raw is readable by root only"
    return [d for r in raws if r is not None and (d := smbios_type17(r)) is not None], f"SMBIOS type 17 in {folder}"


def read_dmidecode() -> tuple[str | None, str]:
    """(`dmidecode -t 17` output, its source) or (None, why not); never asks for root."""
    exe = shutil.which("dmidecode")
    if exe is None:
        return None, "dmidecode is not installed"
    try:
        r = subprocess.run([exe, "-t", "17"], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"dmidecode failed ({type(exc).__name__})"
    if r.returncode != 0 or "Memory Device" not in r.stdout:
        return None, "dmidecode cannot read the table without root"
    return r.stdout, "dmidecode -t 17"


def _from_dmidecode(read: Callable[[], tuple[str | None, str]]) -> tuple[list[Dimm] | None, str]:
    text, how = read()
    return (dmidecode_dimms(text), how) if text is not None else (None, how)


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _from_edac(sys_root: Path) -> tuple[list[Dimm] | None, str]:
    folder = sys_root / "devices" / "system" / "edac" / "mc"
    try:
        mcs = sorted(p for p in folder.iterdir() if re.fullmatch(r"mc\d+", p.name))
    except OSError:
        return None, f"{folder} is missing (no EDAC driver)"
    dimms: list[Dimm] = []
    for mc in mcs:
        for d in sorted(p for p in mc.iterdir() if re.fullmatch(r"(dimm|rank)\d+", p.name)):
            dimm = edac_dimm(mc.name, _read_text(d / "dimm_mem_type"), _read_text(d / "dimm_location"),
                             _read_text(d / "size"))
            if dimm is not None:
                dimms.append(dimm)
    if not dimms:
        return None, f"{folder} lists no DIMMs"
    return dimms, f"EDAC DIMMs in {folder}"


def detect_memory(sockets: int = 1, sys_root: str | Path = "/sys",
                  dmidecode: Callable[[], tuple[str | None, str]] = read_dmidecode) -> MemoryFacts:
    """This machine's memory from the first source that lists DIMMs; never raises."""
    tried: list[str] = []
    for source in (lambda: _from_sysfs_dmi(Path(sys_root)), lambda: _from_dmidecode(dmidecode),
                   lambda: _from_edac(Path(sys_root))):
        try:
            dimms, how = source()
        except Exception as exc:  # noqa: BLE001 - detection never fails the caller
            dimms, how = None, f"{type(exc).__name__} while reading"
        if dimms:
            return memory_facts(dimms, sockets, how)
        tried.append(how)
    why = Fact.unknown("not detected: " + "; ".join(tried) + " (--memory TYPE-SPEEDxCHANNELS gives it)")
    return MemoryFacts(why, why, why, 0)
