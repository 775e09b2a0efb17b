"""Two or more GPUs: `--gpu rtx-3090,rtx-3090` or `--gpu '2x rtx-3090'`, and the one
GpuSpec the planner sees for them.

The set keeps each card (`GpuSpec.cards`, in llama.cpp's device order: CUDA0 first) and
stands for them all where a plan needs one figure:

- VRAM: the cards' sum, less one runtime reserve (a context and compute buffers,
  engine.hardware.memory.RUNTIME_RESERVE_BYTES) for every card past the first, since the
  memory plan counts one; the layer split's rounding to whole blocks a card is held back
  where the plan is made (engine.cost.multi_gpu).
- Memory bandwidth: decode runs the layers one card after the other (llama.cpp's default
  `-sm layer`), so a token's time on the GPUs is the sum of each card's bytes over its own
  bandwidth. With the work split in proportion to each card's memory (what `-ts` by memory
  does), that is the total bytes over the VRAM-weighted harmonic mean of the bandwidths:
  exact for identical cards.
- Host link: each card copies its own misses; the same weighting of the cards' links.

A backend may be named after the cards (`--gpu rx-7900-xtx@vulkan`); without one a card
plans with its preset's default backend (ROCm for AMD, SYCL for Intel, CUDA for NVIDIA).
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Callable, Sequence

from engine.core.errors import CopeInputError
from engine.hardware.gpu_backends import backend
from engine.hardware.memory import GIB, RUNTIME_RESERVE_BYTES
from engine.hardware.platform import Fact, GpuSpec

MAX_GPUS = 16  # llama.cpp's llama_max_devices() (src/llama.cpp) and GGML_CUDA_MAX_DEVICES
_COUNT = re.compile(r"^\s*(\d+)\s*[x×]\s+(.+)$", re.IGNORECASE)


def split_gpu_names(text: str) -> tuple[list[str], str | None]:
    """(the card names in device order, the backend named after '@' or None):
    "2x rtx-3090" -> (["rtx-3090", "rtx-3090"], None); "rtx-3090,rtx-4090" -> both;
    "rx-7900-xtx@vulkan" -> (["rx-7900-xtx"], "Vulkan")."""
    body, at, wanted = text.partition("@")
    chosen = backend(wanted).name if at else None
    names: list[str] = []
    for part in body.split(","):
        part = part.strip()
        if not part:
            raise CopeInputError(f"--gpu {text!r}: an empty card name (write 'A,B' or '2x A')")
        m = _COUNT.match(part)
        n, name = (int(m.group(1)), m.group(2).strip()) if m else (1, part)
        if n < 1:
            raise CopeInputError(f"--gpu {text!r}: {n} cards of {name}: at least one")
        names += [name] * n
        if len(names) > MAX_GPUS:
            raise CopeInputError(f"--gpu {text!r}: more than {MAX_GPUS} GPUs (llama.cpp's most devices)")
    return names, chosen


def gpu_choice(text: str, preset: Callable[[str], GpuSpec]) -> GpuSpec:
    """The GPU (or set of GPUs) `--gpu text` names, each card found by `preset`."""
    names, chosen = split_gpu_names(text)
    cards = [with_backend(preset(name), chosen, text) for name in names]
    return cards[0] if len(cards) == 1 else gpu_set(cards)


def with_backend(card: GpuSpec, chosen: str | None, text: str = "") -> GpuSpec:
    """`card` planned with backend `chosen` (None: its own)."""
    if chosen is None or chosen == card.backend:
        return card
    if chosen not in card.backends:
        raise CopeInputError(f"--gpu {text!r}: the {card.name} does not run on llama.cpp's {chosen} backend "
                             f"(it runs on {', '.join(card.backends)})")
    return replace(card, backend=chosen)


def _weighted_harmonic(cards: Sequence[GpuSpec], figure: str, weights: Sequence[float]) -> Fact:
    facts = [getattr(c, figure) for c in cards]
    unknown = [f for f in facts if not f.known]
    if unknown:
        return Fact.unknown(f"not known for every card: {unknown[0].note}")
    value = sum(weights) / sum(w / float(f.value) for w, f in zip(weights, facts))  # type: ignore[arg-type]
    shown = " + ".join(f"{float(f.value) / 1e9:.0f}" for f in facts)  # type: ignore[arg-type]
    basis = "preset" if all(f.basis == "preset" for f in facts) else "assumed"
    note = (f"{len(cards)} cards ({shown} GB/s): the harmonic mean weighted by each card's memory, as decode "
            f"reads the cards one after another with the work split by memory")
    return Fact.preset(value, note) if basis == "preset" else Fact.assumed(value, note)


def gpu_set(cards: Sequence[GpuSpec]) -> GpuSpec:
    """The planner's one GpuSpec for `cards` (two or more; see the module's note)."""
    if len(cards) < 2:
        raise ValueError("a GPU set has two or more cards")
    backends = {c.backend for c in cards}
    if len(backends) > 1:
        raise CopeInputError(f"--gpu: cards on different llama.cpp backends ({', '.join(sorted(backends))}) in one "
                             "process are not modelled; name one backend after the cards, e.g. '...@vulkan'")
    vram = [c.vram_bytes for c in cards]
    if not all(f.known for f in vram):
        raise CopeInputError("--gpu: a card of the set has no known memory")
    weights = [float(f.value) for f in vram]  # type: ignore[arg-type]
    reserve = (len(cards) - 1) * RUNTIME_RESERVE_BYTES
    total = int(sum(weights)) - reserve
    shown = " + ".join(f"{w / GIB:.0f}" for w in weights)
    vram_note = (f"{len(cards)} cards ({shown} GiB), less {reserve / GIB:.0f} GiB: a context and compute buffers "
                 "on each card past the first (the memory plan counts one)")
    free = [c.vram_free_bytes for c in cards]
    free_total = (Fact(int(sum(float(f.value) for f in free)) - reserve, "assumed",  # type: ignore[arg-type]
                       f"the cards' free memory summed, less {reserve / GIB:.0f} GiB as above")
                  if all(f.known for f in free) else Fact.unknown("free memory not known for every card"))
    names = [c.name for c in cards]
    same = len(set(names)) == 1
    name = f"{len(cards)}x {names[0]}" if same else " + ".join(names)
    ids = {c.preset_id or c.matched_preset_id for c in cards}
    first = cards[0]
    return replace(
        first,
        name=name,
        preset_id=None,
        matched_preset_id=next(iter(ids)) if same and len(ids) == 1 else None,
        vram_bytes=Fact.preset(total, vram_note) if all(f.basis == "preset" for f in vram)
        else Fact.assumed(total, vram_note),
        vram_free_bytes=free_total,
        mem_bandwidth_bytes_per_s=_weighted_harmonic(cards, "mem_bandwidth_bytes_per_s", weights),
        h2d_bytes_per_s=_weighted_harmonic(cards, "h2d_bytes_per_s", weights),
        device_names=(),
        cards=tuple(cards),
        pci_address=None,
        cuda_problem=next((c.cuda_problem for c in cards if c.cuda_problem is not None), None),
    )


def cards_of(gpu: GpuSpec) -> tuple[GpuSpec, ...]:
    """Each card of `gpu` in device order: the set's cards, or the one card."""
    return gpu.cards or (gpu,)
