"""What a mapped model larger than the RAM reads from disk when the page cache keeps the
experts tokens reuse (engine/hardware/host_memory.py, cold_expert_disk_bytes), by hand."""

from __future__ import annotations

import numpy as np
import pytest

from engine.hardware.host_memory import cold_expert_disk_bytes


def test_the_page_cache_drops_the_least_routed_experts_first():
    """Two layers of four experts, top-2, one expert 100 bytes; the counts make the chances a
    token routes each expert (counts + 1 over the layer's, times 2): layer 0 [0.8, 0.6, 0.4,
    0.2], layer 1 [0.5, 0.5, 0.5, 0.5]. 150 bytes missing: layer 0's expert 3 (0.2) whole, then
    half of expert 2 (0.4): 100 x 0.2 + 50 x 0.4 = 40 bytes a token."""
    popularity = np.array([[3, 2, 1, 0], [1, 1, 1, 1]])
    assert cold_expert_disk_bytes(popularity, np.array([100, 100]), 2, 150) == pytest.approx(40.0)
    # nothing missing, nothing read; the GPU's layer (0 bytes on the CPU) is never dropped
    assert cold_expert_disk_bytes(popularity, np.array([100, 100]), 2, 0) == 0.0
    assert cold_expert_disk_bytes(popularity, np.array([0, 100]), 2, 100) == pytest.approx(50.0)
    # more missing than all the CPU's experts: every expert from disk with its chance (layer 1:
    # 4 x 100 x 0.5 = 200), and the other 100 bytes read every token
    assert cold_expert_disk_bytes(popularity, np.array([0, 100]), 2, 500) == pytest.approx(300.0)


def test_a_skewed_routing_reads_less_from_disk_than_a_flat_one():
    flat = np.full((1, 8), 10)
    skewed = np.array([[70, 5, 1, 1, 1, 1, 1, 0]])
    missing = 300.0
    assert (cold_expert_disk_bytes(skewed, np.array([100]), 2, missing)
            < cold_expert_disk_bytes(flat, np.array([100]), 2, missing) == pytest.approx(300 * 2 / 8))
