"""A ModelSpec from a GGUF file, with byte sizes exact from its tensor table.

The shape comes from the architecture metadata (`general.architecture`, then
`{arch}.block_count`, `{arch}.expert_used_count`, ...) and, where the tensors say it more
surely, from the tensors themselves: MoE blocks are the blocks that hold routed-expert
tensors (`blk.N.ffn_*_exps.*`, so leading dense blocks fall out), the expert count and
width come from the expert tensors' shapes, the vocabulary and hidden size from
`token_embd`, tied embeddings from the absence of `output.weight`.

Bytes, all from the tensor table (weights are never read):
- routed experts: every `blk.N.*_exps.*` tensor (gate, up, down, merged gate_up, their
  biases and scales) of block N, divided by the expert count: one expert's bytes there;
- shared layer: everything else in block N (attention, norms, router, shared experts
  `_shexp`, a dense block's FFN);
- embedding `token_embd.weight`, head `output.weight`, the rest outside blocks;
- the multi-token-prediction (NextN) blocks a GLM-4.5 file keeps after the model's blocks
  (`{arch}.nextn_predict_layers`): llama.cpp does not load them, so they are not blocks
  of the model, only bytes of the file (`skipped_bytes`).

Blocks with `ssm_*` tensors are linear-attention (Gated DeltaNet) blocks of a hybrid model
(Qwen3-Next, Qwen3.5): their shape comes from the `{arch}.ssm.*` metadata.

A split GGUF (`NAME-00001-of-00003.gguf`) is read as one model: any shard's path finds
its siblings, the first shard holds the metadata, the tensor tables are summed.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from engine.core.errors import CopeInputError, shown
from engine.models.exact_bytes import ExactBytes
from engine.models.model import AttentionShape, LinearAttentionShape, ModelSpec, model_read
from engine.models.quant import Quantization

from cope_tui.sources.gguf_header import ArrayLength, GGUFHeader, TensorInfo, read_local_header

SPLIT_RE = re.compile(r"^(?P<stem>.*)-(?P<index>\d{5})-of-(?P<count>\d{5})\.gguf$", re.IGNORECASE)
_BLOCK_RE = re.compile(r"^blk\.([0-9]+)\.(.+)$")
# Bounds on what a GGUF's metadata and tensor table may say, checked before anything is
# sized by them: no model has 10,000 blocks, 65,536 experts or a width of 2**24.
MAX_BLOCKS = 10_000
MAX_EXPERTS = 65_536
MAX_SHAPE = 2**24
_EXPERT_RE = re.compile(r"^ffn_(?P<role>[a-z_]+?)_exps\.(?P<kind>[a-z_]+)$")
_SHARED_EXPERT_RE = re.compile(r"^ffn_[a-z_]+_shexp\.")


def split_names(filename: str) -> list[str] | None:
    """All shard names of a split GGUF given one of them, or None for a single file."""
    m = SPLIT_RE.match(filename)
    if not m:
        return None
    count = int(m["count"])
    width = len(m["index"])
    return [f"{m['stem']}-{i:0{width}d}-of-{m['count']}.gguf" for i in range(1, count + 1)]


def model_from_gguf(path: str | Path) -> ModelSpec:
    """Describe the model in a local GGUF file (or split set), with exact byte sizes."""
    p = Path(path).expanduser()
    # A command names the file as the person did (relative stays relative), but with "~"
    # expanded: a quoted "~" in a printed command is not expanded by the shell.
    given = Path(path) if not str(path).startswith("~") else p
    names = split_names(p.name)
    if names is None:
        model = model_from_gguf_headers([read_local_header(p)], where=str(path))
        return replace(model, gguf_path=str(given))
    shards = [p.with_name(n) for n in names]
    missing = [s.name for s in shards if not s.is_file()]
    if missing:
        raise CopeInputError(
            f"split GGUF is missing {len(missing)} of its {len(shards)} files: {', '.join(missing)} "
            "(expected beside it)", path=str(path))  # the path is said once, before the message
    model = model_from_gguf_headers([read_local_header(s) for s in shards], where=str(path))
    return replace(model, gguf_path=str(given.with_name(names[0])))


def model_from_gguf_headers(headers: Sequence[GGUFHeader], *, where: str) -> ModelSpec:
    """A ModelSpec from the header(s) of one GGUF model: one file, or every shard in order."""
    fields = dict(headers[0].fields)
    if len(headers) > 1:
        _check_split(headers, where)
    tensors: list[TensorInfo] = []
    seen: set[str] = set()
    for h in headers:
        for t in h.tensors:
            if t.name in seen:
                raise CopeInputError(f"tensor {shown(t.name)} appears twice across the split files", path=h.source)
            seen.add(t.name)
            tensors.append(t)
    return _build(fields, tensors, where, n_files=len(headers))


def file_quantization(model: ModelSpec) -> Quantization:
    """The quantization a GGUF model's file fixes, as a Quantization for the report.

    The bits per weight are averages computed back from the exact sizes (informative
    only: the model's byte methods use the exact sizes).
    """
    exact = model.exact_bytes
    if exact is None:
        raise ValueError("model_from_gguf models only")
    expert_params = model.expert_params() * model.n_moe_layers
    expert_bits = 8 * sum(exact.expert_bytes_per_layer) / max(expert_params, 1)
    non_expert_bits = 8 * exact.non_expert_bytes() / max(model.non_expert_params(), 1)
    return Quantization(
        name=exact.quant_name,
        expert_bits_per_weight=round(expert_bits, 4),
        non_expert_bits_per_weight=round(non_expert_bits, 4),
        source=f"exact byte sizes from the GGUF tensor table ({exact.quant_summary})",
    )


# --- building ---------------------------------------------------------------------


def _check_split(headers: Sequence[GGUFHeader], where: str) -> None:
    count = headers[0].fields.get("split.count")
    if count is not None and count != len(headers):
        raise CopeInputError(f"metadata 'split.count' says {count} files, found {len(headers)}",
                             path=headers[0].source)
    for i, h in enumerate(headers):
        index = h.fields.get("split.no")
        if index is not None and index != i:
            raise CopeInputError(f"metadata 'split.no' is {index}, expected {i} for this shard",
                                 path=h.source)


class _Meta:
    def __init__(self, fields: Mapping[str, Any], arch: str, where: str):
        self.fields = fields
        self.arch = arch
        self.where = where

    def get(self, key: str, default: Any = None) -> Any:
        return self.fields.get(key.format(arch=self.arch), default)

    def int_(self, key: str, default: int | None = None, *, reduce: Callable = max, low: int = 0,
             high: int = MAX_SHAPE) -> int | None:
        """An integer (a per-layer array reduced) within low..high, else CopeInputError."""
        full = key.format(arch=self.arch)
        value = self.fields.get(full)
        if value is None:
            return default
        if isinstance(value, (tuple, list)) and value and all(isinstance(v, int) for v in value):
            for v in value:
                self._in_range(full, v, 0, high)
            value = reduce(value)  # per-layer arrays (head_count_kv of hybrid models)
        if isinstance(value, bool) or not isinstance(value, int):
            raise CopeInputError(f"metadata {shown(full)} must be an integer, got {shown(value)}", path=self.where)
        return self._in_range(full, value, low, high)

    def _in_range(self, full: str, value: int, low: int, high: int) -> int:
        if not low <= value <= high:
            raise CopeInputError(f"metadata {shown(full)} = {value} is out of range ({low}..{high})", path=self.where)
        return value

    def required(self, key: str, what: str) -> int:
        """A positive integer that must be there."""
        value = self.int_(key, low=1)
        if value is None:
            raise CopeInputError(f"missing metadata {key.format(arch=self.arch)!r} ({what})", path=self.where)
        return value


def _build(fields: Mapping[str, Any], tensors: list[TensorInfo], where: str, *, n_files: int) -> ModelSpec:
    from gguf.constants import MODEL_ARCH_NAMES  # noqa: PLC0415

    arch = fields.get("general.architecture")
    if not isinstance(arch, str) or not arch:
        raise CopeInputError("missing metadata 'general.architecture'", path=where)
    if arch not in set(MODEL_ARCH_NAMES.values()):
        raise CopeInputError(f"unknown architecture {shown(arch)}: not one the gguf package (llama.cpp) knows",
                             path=where)
    meta = _Meta(fields, arch, where)

    by_name = {t.name: t for t in tensors}
    blocks: dict[int, list[tuple[str, TensorInfo]]] = defaultdict(list)
    outside: list[TensorInfo] = []
    for t in tensors:
        m = _BLOCK_RE.match(t.name)
        if m:
            if len(m[1]) > 5 or int(m[1]) >= MAX_BLOCKS:
                raise CopeInputError(f"tensor {shown(t.name)}: block {m[1]} is beyond {MAX_BLOCKS} blocks, more than "
                                     "any model has", path=where)
            blocks[int(m[1])].append((m[2], t))
        else:
            outside.append(t)

    expert_tensors: dict[int, list[tuple[str, str, TensorInfo]]] = defaultdict(list)
    for block, items in blocks.items():
        for rest, t in items:
            m = _EXPERT_RE.match(rest)
            if m:
                expert_tensors[block].append((m["role"], m["kind"], t))
    if not expert_tensors:
        raise CopeInputError(
            f"not an MoE model: no routed-expert tensors (blk.N.ffn_*_exps) among its {len(tensors)} tensors "
            f"(architecture {arch})", path=where)

    n_blocks = meta.int_("{arch}.block_count", high=MAX_BLOCKS) or (max(blocks) + 1 if blocks else 0)
    if blocks and max(blocks) >= n_blocks:
        raise CopeInputError(f"tensor blk.{max(blocks)}.* is beyond {arch}.block_count = {n_blocks}", path=where)
    if n_blocks > (max(blocks) + 1 if blocks else 0):
        held = max(blocks) + 1 if blocks else 0
        raise CopeInputError(f"metadata {arch}.block_count = {n_blocks}, but the tensors are of {held} "
                             f"block{'s' if held != 1 else ''}", path=where)
    nextn = meta.int_("{arch}.nextn_predict_layers", default=0) or 0
    if not 0 <= nextn < n_blocks:
        raise CopeInputError(f"metadata {arch}.nextn_predict_layers = {nextn} with {n_blocks} blocks", path=where)
    n_blocks -= nextn
    skipped_bytes = 0
    for b in [b for b in blocks if b >= n_blocks]:
        skipped_bytes += sum(t.n_bytes for _, t in blocks.pop(b))
    for b in [b for b in expert_tensors if b >= n_blocks]:
        del expert_tensors[b]
    moe_blocks = tuple(sorted(expert_tensors))
    if not moe_blocks:
        raise CopeInputError("not an MoE model: routed-expert tensors only in its NextN blocks", path=where)

    # Routed experts: count and width from the weights' shapes (ne0 = input, ne1 = output, ne2 = experts).
    weights = {(b, role): t for b, items in expert_tensors.items() for role, kind, t in items if kind == "weight"}
    first = moe_blocks[0]
    sample = next((t for (b, _), t in weights.items() if b == first), None)
    n_experts = meta.int_("{arch}.expert_count")
    if sample is not None and len(sample.shape) == 3:
        if n_experts is not None and n_experts != sample.shape[2]:
            raise CopeInputError(f"metadata {arch}.expert_count = {n_experts}, but tensor {shown(sample.name)} "
                                 f"holds {sample.shape[2]} experts", path=where)
        n_experts = sample.shape[2]
    if not n_experts or n_experts < 2:
        raise CopeInputError(f"not an MoE model: {arch}.expert_count is {n_experts}", path=where)
    if n_experts > MAX_EXPERTS:
        raise CopeInputError(f"{n_experts} experts per layer: more than any model has ({MAX_EXPERTS})", path=where)
    top_k = meta.required("{arch}.expert_used_count", "routed experts per token")
    if top_k > n_experts:
        raise CopeInputError(f"metadata {arch}.expert_used_count = {top_k}, more than the {n_experts} experts",
                             path=where)
    expert_ffn, gated = _expert_width(weights, first, meta)

    embd = by_name.get("token_embd.weight")
    hidden = meta.int_("{arch}.embedding_length") or (embd.shape[0] if embd else None)
    if not hidden:
        raise CopeInputError(f"missing metadata '{arch}.embedding_length'", path=where)
    vocab = embd.shape[1] if embd is not None and len(embd.shape) == 2 else None
    if vocab is None:
        tokens = fields.get("tokenizer.ggml.tokens")
        vocab = meta.int_("{arch}.vocab_size") or (
            tokens.length if isinstance(tokens, ArrayLength) else len(tokens or ()))
    tied = "output.weight" not in by_name

    shexp = [t for b in moe_blocks for rest, t in blocks[b] if _SHARED_EXPERT_RE.match(rest)]
    n_shared = meta.int_("{arch}.expert_shared_count", default=1 if shexp else 0)
    shared_ffn = 0
    up_sh = [t for rest, t in blocks[first] if rest == "ffn_up_shexp.weight"]
    if up_sh and len(up_sh[0].shape) >= 2:
        shared_ffn = up_sh[0].shape[1]
    elif n_shared:
        shared_ffn = n_shared * (meta.int_("{arch}.expert_shared_feed_forward_length") or expert_ffn)
    dense_blocks = [b for b in range(n_blocks) if b not in expert_tensors]
    dense_ffn = 0
    if dense_blocks:
        up = by_name.get(f"blk.{dense_blocks[0]}.ffn_up.weight")
        dense_ffn = up.shape[1] if up is not None and len(up.shape) >= 2 else (
            meta.int_("{arch}.feed_forward_length") or 0)

    exact = _exact_bytes(blocks, expert_tensors, outside, moe_blocks, n_blocks, n_experts, fields, where,
                         n_files=n_files, skipped_bytes=skipped_bytes)
    linear_blocks = tuple(b for b in range(n_blocks) if any(rest.startswith("ssm_") for rest, _ in blocks.get(b, [])))
    name = fields.get("general.name")
    stem = Path(where).name
    m = SPLIT_RE.match(stem)
    stem = m["stem"] if m else stem.removesuffix(".gguf").removesuffix(".GGUF")
    if not isinstance(name, str) or not name.strip():
        name = stem
    files = f" and its {n_files - 1} sibling shards" if n_files > 1 else ""
    return model_read(
        where, n_blocks, moe_blocks, n_experts, top_k, n_shared, hidden, expert_ffn, shared_ffn, dense_ffn, vocab,
        id=stem,
        name=name.strip(),
        arch=arch,
        tied_embeddings=tied,
        attention=_attention(meta, hidden, blocks),
        source=f"GGUF: {where}{files} (byte sizes exact from the tensor table)",
        gated_experts=gated,
        default_quant=exact.quant_name,
        exact_bytes=exact,
        linear_blocks=linear_blocks,
        linear_attention=_linear_attention(meta) if linear_blocks else None,
        nextn_blocks=nextn,
        context_length=_context_length(meta),
        merged_gate_up=any(role == "gate_up" for _, role in weights),
    )


def _context_length(meta: _Meta) -> int | None:
    """`<arch>.context_length`, llama.cpp's n_ctx_train (what -c 0 uses); None when absent
    or unreadable (nothing else depends on it)."""
    try:
        return meta.int_("{arch}.context_length", high=2**31 - 1) or None
    except CopeInputError:
        return None


def _expert_width(weights: Mapping[tuple[int, str], TensorInfo], block: int, meta: _Meta) -> tuple[int, bool]:
    """(one expert's FFN width, gated?) from the first MoE block's expert weights."""
    roles = {role: t for (b, role), t in weights.items() if b == block}
    gated = "gate" in roles or "gate_up" in roles
    if "up" in roles and len(roles["up"].shape) >= 2:
        return roles["up"].shape[1], gated
    if "gate_up" in roles and len(roles["gate_up"].shape) >= 2:
        return roles["gate_up"].shape[1] // 2, gated
    if "down" in roles and len(roles["down"].shape) >= 2:
        return roles["down"].shape[0], gated
    width = meta.int_("{arch}.expert_feed_forward_length")
    if not width:
        raise CopeInputError(f"cannot tell the expert width: no ffn_up_exps/ffn_down_exps weight in blk.{block} "
                             f"and no {meta.arch}.expert_feed_forward_length", path=meta.where)
    return width, gated


def _linear_attention(meta: _Meta) -> LinearAttentionShape:
    """Gated DeltaNet from llama.cpp's ssm metadata (convert_hf_to_gguf.py Qwen3NextModel):
    state_size = linear_key_head_dim, group_count = linear_num_key_heads, time_step_rank =
    linear_num_value_heads, inner_size = value heads x value head dim."""
    value_heads = meta.required("{arch}.ssm.time_step_rank", "linear-attention value heads")
    inner = meta.required("{arch}.ssm.inner_size", "linear-attention value width")
    return LinearAttentionShape(
        n_key_heads=meta.required("{arch}.ssm.group_count", "linear-attention key heads"),
        n_value_heads=value_heads,
        key_head_dim=meta.required("{arch}.ssm.state_size", "linear-attention key head size"),
        value_head_dim=inner // value_heads,
        conv_kernel=meta.required("{arch}.ssm.conv_kernel", "linear-attention convolution"),
    )


def _attention(meta: _Meta, hidden: int, blocks: Mapping[int, list[tuple[str, TensorInfo]]]) -> AttentionShape:
    heads = meta.required("{arch}.attention.head_count", "attention heads")
    kv_heads = meta.int_("{arch}.attention.head_count_kv", default=heads) or heads
    kv_lora = meta.int_("{arch}.attention.kv_lora_rank")
    if kv_lora:
        rope = meta.required("{arch}.rope.dimension_count", "rope dimensions of MLA")
        key = meta.int_("{arch}.attention.key_length_mla") or meta.required(
            "{arch}.attention.key_length", "MLA key length")
        value = meta.int_("{arch}.attention.value_length_mla") or meta.required(
            "{arch}.attention.value_length", "MLA value length")
        return AttentionShape(kind="mla", n_heads=heads, n_kv_heads=heads, head_dim=key,
                              q_lora_rank=meta.int_("{arch}.attention.q_lora_rank", default=0) or 0,
                              kv_lora_rank=kv_lora, qk_nope_head_dim=key - rope, qk_rope_head_dim=rope,
                              v_head_dim=value)
    head_dim = meta.int_("{arch}.attention.key_length") or hidden // heads
    # Gated attention (Qwen3-Next, Qwen3.5): attn_q also yields the output gate, twice as wide.
    q_rows = {t.shape[1] for items in blocks.values() for rest, t in items
              if rest == "attn_q.weight" and len(t.shape) >= 2}
    gate = q_rows == {2 * heads * head_dim}
    window = meta.int_("{arch}.attention.sliding_window", default=0) or 0
    every = 0
    if meta.arch == "llama4":
        # llama.cpp's llama4: chunked attention over 8192 tokens, every 4th block full (NoPE).
        window, every = window or 8192, 4
    elif window:
        pattern = meta.get("{arch}.attention.sliding_window_pattern")
        if meta.arch == "gpt-oss":
            every = 2  # llama.cpp: blocks alternate sliding and full attention
        elif isinstance(pattern, int) and not isinstance(pattern, bool) and pattern > 0:
            every = pattern  # llama.cpp's swa pattern: every n-th block is full attention
        else:
            window = 0  # an unknown pattern: plan for full attention everywhere (the safe size)
    return AttentionShape(kind="gqa", n_heads=heads, n_kv_heads=kv_heads, head_dim=head_dim,
                          sliding_window_tokens=window, sliding_window_every=every, output_gate=gate)


def _exact_bytes(blocks: Mapping[int, list[tuple[str, TensorInfo]]],
                 expert_tensors: Mapping[int, list[tuple[str, str, TensorInfo]]],
                 outside: list[TensorInfo], moe_blocks: tuple[int, ...], n_blocks: int, n_experts: int,
                 fields: Mapping[str, Any], where: str, *, n_files: int, skipped_bytes: int = 0) -> ExactBytes:
    per_expert = []
    for b in moe_blocks:
        total = 0
        for _role, _kind, t in expert_tensors[b]:
            if not t.shape or t.shape[-1] != n_experts:
                raise CopeInputError(f"tensor {shown(t.name)} has shape {list(t.shape)}; expected "
                                     f"{n_experts} experts in its last dimension", path=where)
            total += t.n_bytes
        # Each expert's rows are whole quantization blocks, so this divides exactly.
        per_expert.append(-(-total // n_experts))
    shared = []
    shared_experts = []
    for b in range(n_blocks):
        items = blocks.get(b, [])
        shared.append(sum(t.n_bytes for rest, t in items if not _EXPERT_RE.match(rest)))
        shared_experts.append(sum(t.n_bytes for rest, t in items if _SHARED_EXPERT_RE.match(rest)))
    named = {t.name: t for t in outside}
    embedding = named["token_embd.weight"].n_bytes if "token_embd.weight" in named else 0
    head = named["output.weight"].n_bytes if "output.weight" in named else 0
    other = sum(t.n_bytes for t in outside) - embedding - head
    return ExactBytes(
        expert_bytes_per_layer=tuple(per_expert),
        shared_layer_bytes=tuple(shared),
        shared_expert_bytes=tuple(shared_experts),
        embedding_bytes=embedding,
        head_bytes=head,
        other_bytes=other,
        quant_name=_file_type_name(fields),
        quant_summary=quant_summary(expert_tensors, blocks, outside, moe_blocks),
        source=where + (f" ({n_files} files)" if n_files > 1 else ""),
        skipped_bytes=skipped_bytes,
    )


def _file_type_name(fields: Mapping[str, Any]) -> str:
    from gguf.constants import LlamaFileType  # noqa: PLC0415

    ftype = fields.get("general.file_type")
    if isinstance(ftype, int):
        try:
            name = LlamaFileType(ftype).name
        except ValueError:
            return f"GGUF file type {ftype}"
        name = name.removeprefix("MOSTLY_")
        return {"MXFP4_MOE": "MXFP4", "ALL_F32": "F32"}.get(name, name)
    return "GGUF (mixed)"


def quant_summary(expert_tensors: Mapping[int, list[tuple[str, str, TensorInfo]]],
                  blocks: Mapping[int, list[tuple[str, TensorInfo]]], outside: list[TensorInfo],
                  moe_blocks: tuple[int, ...]) -> str:
    """The tensor types actually used, e.g. "experts: Q4_K (gate, up) / Q6_K (down, 24 of 48 layers)"."""
    n = len(moe_blocks)
    # type -> role -> number of MoE layers where that role's weight has that type
    usage: dict[str, Counter] = defaultdict(Counter)
    for b in moe_blocks:
        for role, kind, t in expert_tensors[b]:
            if kind == "weight":
                usage[t.type_name][role] += 1
    order = {"gate": 0, "up": 1, "gate_up": 2, "down": 3}
    parts = []
    for type_name, roles in sorted(usage.items(), key=lambda kv: -sum(kv[1].values())):
        full = [r for r in sorted(roles, key=lambda r: order.get(r, 9)) if roles[r] == n]
        some = [f"{r}, {roles[r]} of {n} layers" for r in sorted(roles, key=lambda r: order.get(r, 9))
                if roles[r] != n]
        parts.append(f"{type_name} ({'; '.join(([', '.join(full)] if full else []) + some)})")
    rest: Counter = Counter()
    for items in blocks.values():
        for rest_name, t in items:
            if not _EXPERT_RE.match(rest_name):
                rest[t.type_name] += t.n_bytes
    for t in outside:
        rest[t.type_name] += t.n_bytes
    total = sum(rest.values()) or 1
    others = ", ".join(f"{k} {100 * v / total:.0f}%" for k, v in rest.most_common())
    return f"experts: {' / '.join(parts)}; non-expert by bytes: {others}"
