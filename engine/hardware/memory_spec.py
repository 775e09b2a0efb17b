"""A machine's main memory as people write it: `TYPE-SPEEDxCHANNELS`, and its theoretical peak.

`ddr5-4800x2` is two channels of DDR5 at 4800 MT/s; `ddr4-3200x8` eight channels of DDR4.
The peak is transfers per second times the bytes each transfer moves on the whole bus:
MT/s x 8 bytes x channels for DDR4 and DDR5. A DDR5 DIMM splits its 64 data bits into two
independent 32-bit subchannels; two subchannels move the same 8 bytes per transfer as one
DDR4 channel, so a DDR5 "channel" here is a DIMM channel (what boards and vendor pages
count: 2 on a desktop, 12 on an EPYC 9004), never a subchannel.

LPDDR parts sit on a soldered bus whose width is what matters: `lpddr5x-8000x256bit` (a
256-bit bus, 256 GB/s), or `lpddr5x-8000x16` (sixteen 16-bit channels, the same bus).

Channels are those of one socket (vendor pages give channels and bandwidth per socket);
engine.hardware.cpu_choice says what COPE does with a second socket. Errors are one line
(CopeInputError) that say what a valid spec looks like.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from engine.core.errors import CopeInputError

EXAMPLES = "e.g. ddr5-4800x2, ddr4-3200x8, lpddr5x-8000x256bit"
MAX_CHANNELS = 16  # per socket: 12 on EPYC 9004/9005 and Xeon 6900P; a little room above


@dataclass(frozen=True)
class MemoryType:
    name: str
    channel_bits: int  # data bits of one channel as written in `xN`
    low_mts: int  # speeds outside [low, high] are refused as typos
    high_mts: int


# Speed ranges: JEDEC's lowest bin to the fastest parts sold (overclocking kits included).
MEMORY_TYPES: dict[str, MemoryType] = {t.name.lower(): t for t in (
    MemoryType("DDR3", 64, 800, 3200),
    MemoryType("DDR4", 64, 1600, 5600),
    MemoryType("DDR5", 64, 3200, 10000),
    MemoryType("LPDDR4", 16, 1600, 4266),
    MemoryType("LPDDR4X", 16, 1600, 4800),
    MemoryType("LPDDR5", 16, 4800, 6400),
    MemoryType("LPDDR5X", 16, 6400, 10700),
)}

_SPEC = re.compile(
    r"^\s*(?P<type>[a-z0-9]+?)\s*-\s*(?P<speed>\d+)\s*(?:mt/?s)?\s*[x*×]\s*(?P<count>\d+)\s*(?P<bits>-?bits?)?\s*$",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class MemorySpec:
    """One socket's memory: its type, speed and bus."""

    type: str  # "DDR5", "LPDDR5X"
    speed_mts: int  # mega-transfers per second
    bus_bits: int  # data bits of the whole bus of one socket (64 per DDR channel)
    channel_bits: int  # data bits of one channel of this type

    @property
    def channels(self) -> int:
        return self.bus_bits // self.channel_bits

    @property
    def peak_bytes_per_s(self) -> float:
        return self.speed_mts * 1e6 * self.bus_bits / 8

    @property
    def text(self) -> str:
        """The canonical spec: `ddr5-4800x2`, `lpddr5x-8000x256bit`."""
        if self.channel_bits == 64:
            return f"{self.type.lower()}-{self.speed_mts}x{self.channels}"
        return f"{self.type.lower()}-{self.speed_mts}x{self.bus_bits}bit"

    def describe(self) -> str:
        """`2 x DDR5-4800 (76.8 GB/s peak)`, `LPDDR5X-8000 on a 256-bit bus (256.0 GB/s peak)`."""
        peak = f"{self.peak_bytes_per_s / 1e9:.1f} GB/s peak"
        if self.channel_bits == 64:
            return f"{self.channels} x {self.type}-{self.speed_mts} ({peak})"
        return f"{self.type}-{self.speed_mts} on a {self.bus_bits}-bit bus ({peak})"


def memory_type(name: str) -> MemoryType | None:
    return MEMORY_TYPES.get(name.strip().lower())


def parse_memory_spec(text: str) -> MemorySpec:
    """`TYPE-SPEEDxCHANNELS` (or `...xBITSbit`) -> MemorySpec; CopeInputError (one line) if wrong."""
    raw = str(text).strip()
    m = _SPEC.match(raw)
    if m is None:
        raise CopeInputError(f"memory {raw!r} is not TYPE-SPEEDxCHANNELS ({EXAMPLES})")
    kind = memory_type(m["type"])
    if kind is None:
        known = ", ".join(t.name for t in MEMORY_TYPES.values())
        raise CopeInputError(f"memory {raw!r}: unknown type {m['type']!r}; known: {known}")
    return memory_spec(kind.name, int(m["speed"]), bits=int(m["count"]) if m["bits"] else None,
                       channels=None if m["bits"] else int(m["count"]), label=raw)


def memory_spec(type_name: str, speed_mts: int, *, channels: int | None = None, bits: int | None = None,
                label: str | None = None) -> MemorySpec:
    """A checked MemorySpec from its parts (exactly one of `channels`, `bits`)."""
    kind = memory_type(type_name)
    where = f"memory {label!r}" if label else f"memory {type_name}-{speed_mts}"
    if kind is None:
        raise CopeInputError(f"{where}: unknown type {type_name!r}")
    if not kind.low_mts <= speed_mts <= kind.high_mts:
        raise CopeInputError(f"{where}: {kind.name} runs at {kind.low_mts} to {kind.high_mts} MT/s, "
                             f"not {speed_mts} ({EXAMPLES})")
    if (channels is None) == (bits is None):
        raise ValueError("give exactly one of channels and bits")
    if bits is None:
        if not 1 <= channels <= MAX_CHANNELS:  # type: ignore[operator]
            raise CopeInputError(f"{where}: channels must be 1 to {MAX_CHANNELS} (of one socket), not {channels}")
        bits = channels * kind.channel_bits  # type: ignore[operator]
    elif bits % kind.channel_bits or not kind.channel_bits <= bits <= MAX_CHANNELS * 64:
        raise CopeInputError(f"{where}: a {kind.name} bus is a multiple of {kind.channel_bits} bits "
                             f"up to {MAX_CHANNELS * 64}, not {bits}")
    return MemorySpec(kind.name, int(speed_mts), int(bits), kind.channel_bits)


# Two sockets of twelve DDR5-8800 MRDIMM channels are about 1,700 GB/s: ten times that is no
# host memory, but a figure in bytes per second (or MB/s) given as GB/s.
MAX_HOST_GBPS = 20_000


def parse_bandwidth_gbps(text: str) -> float:
    """`--ram-bandwidth 96` or `96GB/s` -> 96.0 (GB/s, 10^9 bytes per second)."""
    raw = str(text).strip()
    m = re.fullmatch(r"(?i)([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*(?:gb/?s|gbps)?", raw)
    if m is None:
        raise CopeInputError(f"{raw!r} is not a bandwidth in GB/s (e.g. 96 or 460.8)")
    gbps = float(m.group(1))
    if gbps > MAX_HOST_GBPS:
        raise CopeInputError(f"{raw!r} GB/s is more than any host memory reaches (at most {MAX_HOST_GBPS:,} GB/s "
                             "taken): give GB/s, not bytes per second (e.g. 96 or 460.8)")
    return gbps
