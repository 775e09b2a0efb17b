"""The memory a person writes (`--memory TYPE-SPEEDxCHANNELS`, `--ram-bandwidth GBPS`) and its peak."""

from __future__ import annotations

import pytest

from engine.core.errors import CopeInputError
from engine.hardware.memory_spec import parse_bandwidth_gbps, parse_memory_spec


@pytest.mark.parametrize(
    "text, kind, speed, channels, bits, peak_gbps, canonical",
    [
        ("ddr5-4800x2", "DDR5", 4800, 2, 128, 76.8, "ddr5-4800x2"),
        ("DDR4-3200x4", "DDR4", 3200, 4, 256, 102.4, "ddr4-3200x4"),
        ("ddr4-3200x8", "DDR4", 3200, 8, 512, 204.8, "ddr4-3200x8"),
        ("ddr5-6000x12", "DDR5", 6000, 12, 768, 576.0, "ddr5-6000x12"),  # an EPYC 9005 socket
        ("DDR5-4800 x 8", "DDR5", 4800, 8, 512, 307.2, "ddr5-4800x8"),  # spaces as people type them
        ("ddr5-5600MT/sx2", "DDR5", 5600, 2, 128, 89.6, "ddr5-5600x2"),
        ("ddr4-2666x6", "DDR4", 2666, 6, 384, 127.968, "ddr4-2666x6"),
        ("lpddr5x-8000x256bit", "LPDDR5X", 8000, 16, 256, 256.0, "lpddr5x-8000x256bit"),  # Ryzen AI Max+ 395
        ("lpddr5x-8000x16", "LPDDR5X", 8000, 16, 256, 256.0, "lpddr5x-8000x256bit"),  # sixteen 16-bit channels
        ("LPDDR5-6400x128-bit", "LPDDR5", 6400, 8, 128, 102.4, "lpddr5-6400x128bit"),
    ],
)
def test_valid_specs_and_their_theoretical_peak(text, kind, speed, channels, bits, peak_gbps, canonical):
    m = parse_memory_spec(text)
    assert (m.type, m.speed_mts, m.channels, m.bus_bits) == (kind, speed, channels, bits)
    assert m.peak_bytes_per_s == pytest.approx(peak_gbps * 1e9)
    assert m.text == canonical and parse_memory_spec(m.text) == m  # the canonical form reads back the same


def test_ddr5_counts_dimm_channels_not_subchannels():
    # Two 32-bit subchannels per DIMM channel move the same 8 bytes a transfer as one DDR4 channel.
    assert parse_memory_spec("ddr5-3200x2").peak_bytes_per_s == parse_memory_spec("ddr4-3200x2").peak_bytes_per_s


def test_describe_says_configuration_and_peak():
    assert parse_memory_spec("ddr5-5200x2").describe() == "2 x DDR5-5200 (83.2 GB/s peak)"
    assert parse_memory_spec("lpddr5x-8000x256bit").describe() == "LPDDR5X-8000 on a 256-bit bus (256.0 GB/s peak)"


@pytest.mark.parametrize(
    "text, needle",
    [
        ("ddr5", "is not TYPE-SPEEDxCHANNELS"),
        ("ddr5x2", "is not TYPE-SPEEDxCHANNELS"),
        ("ddr5-4800", "is not TYPE-SPEEDxCHANNELS"),
        ("4800x2", "is not TYPE-SPEEDxCHANNELS"),
        ("ddr5-fastx2", "is not TYPE-SPEEDxCHANNELS"),
        ("ddr6-9600x2", "unknown type 'ddr6'"),
        ("gddr6-14000x2", "unknown type 'gddr6'"),
        ("ddr5-48000x2", "DDR5 runs at 3200 to 10000 MT/s, not 48000"),
        ("ddr4-800x2", "DDR4 runs at 1600 to 5600 MT/s"),
        ("ddr5-4800x0", "channels must be 1 to 16"),
        ("ddr5-4800x24", "channels must be 1 to 16 (of one socket)"),
        ("lpddr5x-8000x100bit", "multiple of 16 bits"),
        ("ddr5-4800x96bit", "multiple of 64 bits"),
    ],
)
def test_invalid_specs_say_why_in_one_line(text, needle):
    with pytest.raises(CopeInputError) as err:
        parse_memory_spec(text)
    msg = str(err.value)
    assert needle in msg and "\n" not in msg


@pytest.mark.parametrize("text, gbps", [("96", 96.0), ("460.8", 460.8), ("96GB/s", 96.0), (" 51.2 gbps ", 51.2)])
def test_bandwidth_in_gbps(text, gbps):
    assert parse_bandwidth_gbps(text) == gbps


@pytest.mark.parametrize("text", ["fast", "96 MB/s", "", "-5"])
def test_bad_bandwidth_refused(text):
    with pytest.raises(CopeInputError, match="not a bandwidth in GB/s"):
        parse_bandwidth_gbps(text)


@pytest.mark.parametrize("text", ["1e9", "96e9", "460800"])
def test_a_bandwidth_in_bytes_per_second_is_refused_as_such(text):
    # 96e9 is 96 GB/s written in bytes per second: no host memory reaches 96 billion GB/s.
    with pytest.raises(CopeInputError, match="give GB/s, not bytes per second"):
        parse_bandwidth_gbps(text)
    assert parse_bandwidth_gbps("1700") == 1700.0  # two sockets of fast MRDIMMs still pass
