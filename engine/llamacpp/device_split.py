"""Which card each part of a llama.cpp command sits on with two or more GPUs.

llama.cpp's rules, read at ggml-org/llama.cpp 0c1e57098bba43ac29e6e3b677cdceebdd22334f
(the commit bench/llamacpp_build.py pins):

- Devices (src/llama.cpp, llama_model_load_from_file_impl): `-dev A,B` in that order
  (common/arg.cpp parse_device_list: a name that is no device, or the CPU, is "invalid
  device"); else every GPU device the backends register, in their order. The backend
  numbers the cards it sees (CUDA_VISIBLE_DEVICES and its kin choose and order them).
  `-sm none` keeps only device `-mg` (default 0); `-sm row` and `-sm tensor` split each
  weight's rows across the cards, which COPE does not price.
- Layer split (src/llama-model.cpp, llama_model_base::load_tensors, `-sm layer`, the
  default): the proportions are `-ts` (common/arg.cpp: split on ',' and '/', read with
  std::stof; 16 or more values, llama_max_devices(), stop the parser), or each device's
  free memory when `-ts` is absent or all zero; summed and normalised in float into
  cumulative split points; with i_gpu_start = max(n_layer + 1 - ngl, 0) and act =
  min(ngl, n_layer + 1), layer il (the output layer is il = n_layer) goes to the first
  device whose split point is above float(il - i_gpu_start) / act (std::upper_bound); the
  layers before i_gpu_start stay on the CPU. The input layer is always on the CPU.
- Tensors follow their layer's device unless an `-ot` pattern names a buffer (the first
  match wins): "CUDA1" puts it on that card, whatever its layer's device.

`card_bytes` is what each card then holds; `plan_split` chooses, for an export, the
contiguous blocks of every card so that each holds what it has room for, spelled as
`-ts` layer counts (integer proportions give exact boundaries: the split point and the
layer's fraction are the same float division) and an `-ot ...=<buffer>` a card.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from engine.cost.request import AdviseRequest
from engine.hardware.gpu_backends import BACKENDS, buffer_name
from engine.hardware.gpu_set import cards_of
from engine.hardware.memory import GIB, RUNTIME_RESERVE_BYTES, SAFETY_MARGIN_FRACTION
from engine.hardware.platform import GpuSpec
from engine.llamacpp.ecma_regex import search
from engine.llamacpp.llama_args import LlamaCommand
from engine.llamacpp.tensor_overrides import GPU_BUFFER, expert_tensor_names
from engine.models.block_tensors import OUTPUT_HEAD, shared_tensors

MAX_DEVICES = 16  # src/llama.cpp llama_max_devices()
# The variables each backend's runtime reads to choose its cards (HIP also reads CUDA's).
VISIBLE_ENV = {"CUDA": ("CUDA_VISIBLE_DEVICES",), "ROCm": ("HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES",
                                                            "CUDA_VISIBLE_DEVICES"),
               "Vulkan": ("GGML_VK_VISIBLE_DEVICES",), "SYCL": ()}


@dataclass(frozen=True)
class Devices:
    """The GPU devices a command's model uses, in llama.cpp's order."""

    names: tuple[str, ...]  # buffer names: CUDA0, CUDA1 (the backend's own numbering)
    cards: tuple[GpuSpec, ...]  # the card each name is
    proportions: tuple[float, ...]  # what the layer split follows, one a device
    how: str  # "-ts 3,1", "free memory (no -ts)"
    visible: tuple[str, ...]  # every buffer name the backend registers (what -ot may name)


class NotPriced(Exception):
    """A command COPE cannot place: its message is the one-line refusal ("would not run: ...",
    "not modelled: ...")."""


def _float32_split_points(proportions: Sequence[float]) -> np.ndarray:
    splits = np.asarray(proportions, dtype=np.float32)
    total = np.float32(0)
    out = np.empty(len(splits), dtype=np.float32)
    for i, s in enumerate(splits):
        total = np.float32(total + s)
        out[i] = total
    return (out / total).astype(np.float32)


def layer_devices(n_blocks: int, n_gpu_layers: int, proportions: Sequence[float]) -> tuple[np.ndarray, int]:
    """(device of each block, -1 on the CPU; the output layer's device) by load_tensors' rule."""
    points = _float32_split_points(proportions)
    start = max(n_blocks + 1 - n_gpu_layers, 0)
    act = min(n_gpu_layers, n_blocks + 1)

    def device(il: int) -> int:
        if il < start or il - start >= act:
            return -1
        frac = np.float32(np.float32(il - start) / np.float32(act))
        return int(np.searchsorted(points, frac, side="right"))  # std::upper_bound

    return np.array([device(il) for il in range(n_blocks)], dtype=np.int64), device(n_blocks)


def _visible_cards(gpu: GpuSpec, environ: Mapping[str, str]) -> tuple[tuple[GpuSpec, ...], str]:
    """The cards the backend sees, in its order, and the variable that chose them ("" none)."""
    cards = cards_of(gpu)
    for key in VISIBLE_ENV.get(gpu.backend, ()):
        if key not in environ:
            continue
        items = [x.strip() for x in environ[key].split(",") if x.strip()]
        if not all(x.isdigit() for x in items):
            raise NotPriced(f"not modelled: {key}={environ[key]} (COPE reads device indexes, not UUIDs)")
        picked = []
        for x in items:
            if int(x) >= len(cards):
                break  # the CUDA runtime ignores an invalid index and every one after it
            picked.append(cards[int(x)])
        return tuple(picked), key
    return cards, ""


def command_devices(command: LlamaCommand, gpu: GpuSpec, environ: Mapping[str, str] | None = None) -> Devices:
    """The devices `command` uses on `gpu` (a card or a set), or NotPriced saying why not."""
    env = dict(command.visible_env) if environ is None else environ
    back = gpu.backend
    cards, chose = _visible_cards(gpu, env)
    if not cards:
        raise NotPriced(f"would not run on the GPU: {chose}={env[chose]} names none of the plan's "
                        f"{len(cards_of(gpu))} card(s)")
    visible = tuple(buffer_name(back, i) for i in range(len(cards)))
    mode = (command.split_mode or "layer").split(",")[0].strip().lower()  # llama-bench: its first test's
    if mode in ("row", "tensor"):
        raise NotPriced(f"not modelled: --split-mode {mode} splits each weight's rows across the cards "
                        "(COPE prices the layer split, llama.cpp's default)")
    if mode not in ("layer", "none"):
        raise NotPriced(f"would not run: --split-mode {command.split_mode}: llama.cpp takes none, layer, row or "
                        "tensor (common/arg.cpp)")
    for pattern, buffer, flag in command.overrides:
        m = GPU_BUFFER.fullmatch(buffer)
        if m and m.group(1) in BACKENDS and buffer not in visible:
            have = ", ".join(visible) or "none"
            raise NotPriced(f"would not run: llama.cpp stops at start-up with 'unknown buffer type' for {flag} "
                            f"{pattern}={buffer}: the plan's {back} devices are {have}"
                            + (f" ({chose}={env[chose]})" if chose else ""))
    if command.devices:
        # llama-server/cli: ',' between devices; llama-bench: '/' (its ',' separates test configurations)
        listed = command.devices.split(",")[0].split("/") if command.tool == "llama-bench" else command.devices.split(",")
        wanted = [d.strip() for d in listed if d.strip()]
        if wanted == ["none"]:
            raise NotPriced("not modelled: --device none (no device: price it with -ngl 0)")
        bad = [d for d in wanted if d not in visible]
        if bad:
            raise NotPriced(f"would not run: --device {command.devices}: invalid device {bad[0]} (the plan's "
                            f"devices are {', '.join(visible) or 'none'}; common/arg.cpp parse_device_list)")
        order = [visible.index(d) for d in wanted]
    else:
        order = list(range(len(cards)))
    if mode == "none":
        main = command.main_gpu or 0
        if main < 0:  # src/llama.cpp (llama_model_load_from_file_impl): main_gpu < 0 clears the devices
            raise NotPriced(f"not modelled: --split-mode none --main-gpu {main} uses no GPU (src/llama.cpp clears "
                            "the devices: price it with -ngl 0)")
        if main >= len(order):
            raise NotPriced(f"would not run: --main-gpu {main}: llama.cpp has {len(order)} device(s) "
                            "(src/llama.cpp: invalid value for main_gpu)")
        order = [order[main]]
    names = tuple(visible[i] for i in order)
    chosen = tuple(cards[i] for i in order)
    props, how = _proportions(command, chosen)
    return Devices(names, chosen, props, how, visible)


def _proportions(command: LlamaCommand, cards: Sequence[GpuSpec]) -> tuple[tuple[float, ...], str]:
    text = command.tensor_split
    if text:
        # llama-server/cli: ',' or '/' between devices; llama-bench: '/' or ';' between devices and
        # ',' between test configurations (its first is priced, as for its other list flags)
        if command.tool == "llama-bench":
            parts = re.split(r"[;/]+", text.split(",")[0])
        else:
            parts = re.split(r"[,/]+", text)
        if len(parts) >= MAX_DEVICES:
            raise NotPriced(f"would not run: --tensor-split {text}: {len(parts)} values, llama.cpp takes fewer "
                            f"than {MAX_DEVICES}")
        try:
            values = [float(p) if p.strip() else 0.0 for p in parts]
        except ValueError:
            raise NotPriced(f"would not run: --tensor-split {text}: not numbers (std::stof)") from None
        values = (values + [0.0] * len(cards))[:len(cards)]
        if any(v < 0 for v in values):
            raise NotPriced(f"not modelled: --tensor-split {text} has a negative share")
        if any(v > 0 for v in values):
            return tuple(values), f"--tensor-split {text}"
    free = [c.vram_free_bytes for c in cards]
    if not all(f.known for f in free):
        raise NotPriced("not modelled: no -ts, and a card's free memory (which llama.cpp splits by) is unknown")
    return tuple(float(f.value) for f in free), "each card's free memory (no -ts; a real card's free memory " \
                                                 "at load time decides)"  # type: ignore[arg-type]


def _device_of_buffer(buffer: str | None, names: Sequence[str], visible: Sequence[str]) -> int | None:
    """A GPU buffer's device index among `names` (None: not a GPU buffer of the plan; -1: a
    device the model does not use, which llama.cpp still allocates on)."""
    if buffer is None or buffer not in visible:
        return None
    return names.index(buffer) if buffer in names else -1


@dataclass(frozen=True)
class CardBytes:
    """What each device holds, bytes, and its card's memory."""

    names: tuple[str, ...]
    cards: tuple[GpuSpec, ...]
    bytes: tuple[int, ...]
    gpu_bytes_read: tuple[float, ...]  # what a decode token reads on each card (weights, KV cache)

    def problem(self) -> str | None:
        for name, card, used in zip(self.names, self.cards, self.bytes):
            if card.vram_bytes.known and used > int(card.vram_bytes.value):  # type: ignore[arg-type]
                return (f"would not run: {name} ({card.name}) needs {used / GIB:.1f} GiB of "
                        f"{int(card.vram_bytes.value) / GIB:.1f} GiB (weights, KV cache, context and buffers)")  # type: ignore[arg-type]
        return None

    def lines(self) -> list[str]:
        return [f"{name} ({card.name}): {used / GIB:.1f} GiB of "
                + (f"{int(card.vram_bytes.value) / GIB:.1f} GiB" if card.vram_bytes.known else "unknown")  # type: ignore[arg-type]
                for name, card, used in zip(self.names, self.cards, self.bytes)]


def card_bytes(request: AdviseRequest, command: LlamaCommand, devices: Devices, block_device: np.ndarray,
               output_device: int, *, kv_offload: bool = True, extra_buffer_bytes: float = 0.0) -> CardBytes:
    """Each device's bytes for `command`: its blocks' weights and KV cache, the experts and
    other tensors an override puts on it, the output layer, and a runtime reserve (plus the
    command's larger compute buffer) on every device that holds anything."""
    model, quant = request.model, request.quant
    n = len(devices.names)
    held = np.zeros(n)
    read = np.zeros(n)
    kv_scale = request.kv_bytes_per_element / 2.0
    attended = request.context_tokens // 2 if request.attention_tokens is None else request.attention_tokens
    typed = [o for o in command.overrides if o[2] in ("-ot", "--override-tensor")]

    def buffer_of(name: str, overrides) -> str | None:  # type: ignore[no-untyped-def]
        return next((buf for pat, buf, _ in overrides if search(pat, name)), None)

    def place(name: str, home: int, size: float, overrides, reads: float) -> None:  # type: ignore[no-untyped-def]
        buf = buffer_of(name, overrides)
        dev = home if buf is None else _device_of_buffer(buf, devices.names, devices.visible)
        if dev is None or dev < 0:
            return  # on the CPU (or on a card the model does not use: not priced here)
        held[dev] += size
        read[dev] += reads

    shared = shared_tensors(model, quant)
    for block in range(model.n_blocks):
        home = int(block_device[block])
        for t in shared[block]:
            place(t.name, home, t.bytes, typed, t.bytes)
        if home >= 0 and kv_offload:
            held[home] += model.kv_read_bytes_per_layer(block, request.context_tokens) * kv_scale
            read[home] += model.kv_read_bytes_per_layer(block, attended) * kv_scale
    per_tensor = model.n_routed_experts * model.expert_bytes(quant)
    active = model.top_k * model.expert_bytes(quant)
    for block in model.moe_blocks:
        names = expert_tensor_names(model, block)
        for name in names:
            place(name, int(block_device[block]), per_tensor / len(names), command.overrides, active / len(names))
    head = model.head_bytes(quant)
    place(OUTPUT_HEAD, output_device, head, typed, head)
    used = held > 0
    held[used] += RUNTIME_RESERVE_BYTES + extra_buffer_bytes
    return CardBytes(devices.names, devices.cards, tuple(int(x) for x in held), tuple(float(x) for x in read))


# --- an export's split ----------------------------------------------------------------------


@dataclass(frozen=True)
class PlannedSplit:
    """The cards' blocks for an export: `-ts` layer counts and the experts each card holds."""

    names: tuple[str, ...]
    layer_counts: tuple[int, ...]  # -ts: layers of each device (the output layer counted where it goes)
    expert_blocks: tuple[tuple[int, ...], ...]  # the MoE blocks whose experts each device holds
    card_bytes: tuple[int, ...]

    @property
    def tensor_split(self) -> str:
        return ",".join(str(c) for c in self.layer_counts)


def _block_gpu_bytes(request: AdviseRequest, block: int, experts_on_gpu: bool) -> float:
    model, quant = request.model, request.quant
    kv = model.kv_read_bytes_per_layer(block, request.context_tokens) * request.kv_bytes_per_element / 2.0
    experts = model.n_routed_experts * model.expert_bytes(quant) if experts_on_gpu else 0
    return model.shared_layer_bytes(quant, block) + kv + experts


def split_rounding_bytes(request: AdviseRequest) -> int:
    """What the plan holds back for a set of cards: each boundary between cards may leave
    up to one block's bytes unused on the card before it (blocks are whole on one card)."""
    gpu = request.platform.gpu
    if len(cards_of(gpu)) < 2:
        return 0
    model = request.model
    largest = max(_block_gpu_bytes(request, b, b in model.moe_blocks) for b in range(model.n_blocks))
    return int((len(cards_of(gpu)) - 1) * largest)


def plan_split(request: AdviseRequest, cpu_layers: np.ndarray) -> PlannedSplit:
    """Contiguous blocks a card, filled in device order up to each card's room (its memory
    less the runtime reserve and the plan's safety margin); the output layer after the last
    block (with its card where it has room: later cards then get 0 in -ts).
    `cpu_layers` ([L] bool): the MoE layers whose experts stay on the CPU."""
    model = request.model
    cards = cards_of(request.platform.gpu)
    names = tuple(buffer_name(request.platform.gpu.backend, i) for i in range(len(cards)))
    room = [int(c.vram_bytes.value) * (1 - SAFETY_MARGIN_FRACTION) - RUNTIME_RESERVE_BYTES for c in cards]  # type: ignore[arg-type]
    gpu_expert = {model.moe_blocks[i] for i in np.flatnonzero(~np.asarray(cpu_layers, dtype=bool))}
    need = [_block_gpu_bytes(request, b, b in gpu_expert) for b in range(model.n_blocks)]
    head = float(model.head_bytes(request.quant))
    counts = [0] * len(cards)
    used = [0.0] * len(cards)
    experts: list[list[int]] = [[] for _ in cards]
    card = 0
    for block in range(model.n_blocks):
        # move on when this block does not fit, keeping room on the last card for the output layer
        while card < len(cards) - 1 and used[card] + need[block] > room[card]:
            card += 1
        counts[card] += 1
        used[card] += need[block]
        if block in gpu_expert:
            experts[card].append(block)
    # the output layer (il = n_layer) with the last block, or on the next card when it has no room
    if used[card] + head > room[card] and card < len(cards) - 1:
        card += 1
    counts[card] += 1
    used[card] += head
    held = tuple(int(u + RUNTIME_RESERVE_BYTES) if u else 0 for u in used)
    return PlannedSplit(names, tuple(counts), tuple(tuple(e) for e in experts), held)
