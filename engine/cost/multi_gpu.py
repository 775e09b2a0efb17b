"""What a second card costs a decode token: the hand-over at each split between cards,
and each card reading its own bytes at its own bandwidth.

With llama.cpp's layer split a token's activations cross from one card to the next once
per boundary (ggml-backend.cpp, ggml_backend_sched: a split whose inputs live on another
backend copies them, `ggml_backend_tensor_copy_async` between the two devices, then the
destination waits on the source's event). One hand-over costs a fixed latency (the copy's
launch and the event wait: `CARD_HANDOVER_FIXED_S`, assumed, not measured here) plus the
hidden state's bytes (F32, `hidden_size x 4`) over the slower card's host link: without
peer-to-peer between the cards (most consumer boards) the copy goes through host memory,
so twice over PCIe.

The cards work one after another, so the GPU time of a token is the sum over cards of its
bytes on each over that card's bandwidth: `card_time_scale` is how much that differs from
pricing every GPU byte at the set's one bandwidth (1 for identical cards).
"""

from __future__ import annotations

from typing import Sequence

from engine.cost.request import AdviseRequest
from engine.hardware.gpu_set import cards_of
from engine.hardware.platform import GpuSpec

# assumed: one cross-device copy's launch and the wait on its event (a few microseconds
# each on CUDA; the published two-card rows are the check, bench/published.py)
CARD_HANDOVER_FIXED_S = 10e-6
ACTIVATION_BYTES_PER_ELEMENT = 4  # the hidden state between ggml splits is F32


def handover_s(hidden_size: int, a: GpuSpec, b: GpuSpec) -> float:
    """One token's hand-over from card `a` to card `b` (through host memory: both links)."""
    nbytes = hidden_size * ACTIVATION_BYTES_PER_ELEMENT
    links = [float(c.h2d_bytes_per_s.value) for c in (a, b) if c.h2d_bytes_per_s.known]  # type: ignore[arg-type]
    copy = sum(nbytes / link for link in links) if links else 0.0
    return CARD_HANDOVER_FIXED_S + copy


def plan_handovers_s(request: AdviseRequest) -> float:
    """The hand-overs of a plan over the request's cards: one at each boundary between
    consecutive cards (COPE's exports fill the cards with contiguous blocks); 0 for one card."""
    cards = cards_of(request.platform.gpu)
    return sum(handover_s(request.model.hidden_size, a, b) for a, b in zip(cards, cards[1:]))


def card_time_scale(read_bytes: Sequence[float], cards: Sequence[GpuSpec], set_bandwidth: float) -> float:
    """sum(bytes_i / bandwidth_i) over sum(bytes_i) / set_bandwidth: what pricing each card's
    bytes at its own bandwidth changes (1.0 when nothing is read on the GPUs)."""
    total = sum(read_bytes)
    if total <= 0:
        return 1.0
    own = sum(b / float(c.mem_bandwidth_bytes_per_s.value) for b, c in zip(read_bytes, cards))  # type: ignore[arg-type]
    return own / (total / set_bandwidth)


def handovers_along(devices_in_order: Sequence[int], cards: Sequence[GpuSpec], hidden_size: int) -> tuple[int, float]:
    """(card changes, their seconds) along the devices a token's work visits in order
    (-1: the CPU: work that goes from one card to the CPU and on to another card pays the
    placement's own CPU hand-overs instead, so only direct card-to-card changes count)."""
    last = None
    n, seconds = 0, 0.0
    for d in devices_in_order:
        if d < 0:
            last = None
            continue
        if last is not None and d != last:
            n += 1
            seconds += handover_s(hidden_size, cards[last], cards[d])
        last = d
    return n, seconds


def multi_card_notes(request: AdviseRequest) -> list[str]:
    """What a plan over two or more cards assumes, for the ranking's notes."""
    cards = cards_of(request.platform.gpu)
    if len(cards) < 2:
        return []
    gpu = request.platform.gpu
    return [f"{len(cards)} cards ({gpu.name}, llama.cpp {gpu.backend}): layers split over them (-sm layer), "
            f"each card's blocks contiguous; {plan_handovers_s(request) * 1e6:.0f} us of hand-overs between cards a "
            f"token (assumed {CARD_HANDOVER_FIXED_S * 1e6:.0f} us each plus the hidden state over PCIe twice); "
            f"memory bandwidth {gpu.mem_bandwidth_bytes_per_s.note}; the budget holds back one block a boundary "
            "(a block is whole on one card)"] + ([
        "cards of different bandwidths: the ranking prices every GPU byte at the set's one bandwidth; an exported "
        "command's own split (its blocks and GPU experts a card) is priced by cope estimate and can differ by "
        "the share of each token's reads that lands on the slower card"] if len({
            c.mem_bandwidth_bytes_per_s.value for c in cards}) > 1 else [])
