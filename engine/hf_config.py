"""A ModelSpec from a Hugging Face `config.json` (read with the standard library's json).

Every MoE family names its fields its own way. The reader looks each quantity up under
the names the families in use give it, places the MoE blocks by the family's rule, and
refuses, with one line that names the file, what it cannot describe honestly:
encoder-decoder models (Switch Transformers, NLLB-MoE), configs without routed experts,
experts of different widths, missing or malformed fields.

Some families only fit the ModelSpec through an equivalent shape with the same weight
count; `source` then says so after the path:
- JetMoE's attention is itself a mixture (one query and one output projection per
  attention expert, shared key/value): it is written as grouped-query attention with
  `n_experts x n_kv_heads` query heads, which holds every expert's projections.
- OpenMoE's FFNs have a gate projection twice as wide as the FFN (4 h f weights): its
  experts are written as ungated with width 2 f, and its dense FFNs (the dense blocks'
  and the extra one after each MoE layer, held as a shared expert) as gated with width
  4 f / 3.
Two families load with non-expert weights the ModelSpec cannot hold, and say so:
Jamba (most blocks are Mamba mixers, not attention) and Yuan 2.0 (localized-filtering
convolutions beside attention).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from engine.errors import CopeInputError
from engine.model import AttentionShape, ModelSpec

# Hugging Face model_type -> llama.cpp architecture (GGUF general.architecture).
LLAMA_CPP_ARCH = {
    "mixtral": "llama",  # llama.cpp loads Mixtral as llama with expert tensors
    "qwen2_moe": "qwen2moe",
    "qwen3_moe": "qwen3moe",
    "olmoe": "olmoe",
    "deepseek": "deepseek",
    "deepseek_v2": "deepseek2",
    "deepseek_v3": "deepseek2",
    "phimoe": "phimoe",
    "granitemoe": "granitemoe",
    "jamba": "jamba",
    "minicpm": "minicpm",
    "gpt_oss": "gpt-oss",
    "dbrx": "dbrx",
}
UNKNOWN_ARCH = "unknown"

# For configs without a model_type (MiniCPM-MoE's, for one): architectures[0] -> model_type.
_MODEL_TYPE_BY_ARCHITECTURE = {
    "MixtralForCausalLM": "mixtral",
    "Qwen2MoeForCausalLM": "qwen2_moe",
    "Qwen3MoeForCausalLM": "qwen3_moe",
    "OlmoeForCausalLM": "olmoe",
    "DeepseekForCausalLM": "deepseek",
    "DeepseekV2ForCausalLM": "deepseek_v2",
    "DeepseekV3ForCausalLM": "deepseek_v3",
    "PhiMoEForCausalLM": "phimoe",
    "GraniteMoeForCausalLM": "granitemoe",
    "JambaForCausalLM": "jamba",
    "MiniCPMForCausalLM": "minicpm",
    "GptOssForCausalLM": "gpt_oss",
    "DbrxForCausalLM": "dbrx",
    "JetMoEForCausalLM": "jetmoe",
    "JetMoeForCausalLM": "jetmoe",
    "XverseForCausalLM": "xverse",
    "YuanForCausalLM": "yuan",
    "LlamaMoEForCausalLM": "llama_moe",
    "HFOpenMoeForCausalLM": "openmoe",
    "GRIN-MoE": "grinmoe",
    "SwitchTransformersForConditionalGeneration": "switch_transformers",
    "NllbMoeModel": "nllb-moe",
    "NllbMoeForConditionalGeneration": "nllb-moe",
}

_ENCODER_DECODER_TYPES = {"switch_transformers", "nllb-moe", "nllb_moe", "t5", "bart", "mt5"}
_ENCODER_DECODER_FIELDS = ("num_decoder_layers", "decoder_layers", "encoder_layers",
                           "num_sparse_encoder_layers", "encoder_sparse_step")

# Nested blocks some families keep their MoE or attention fields in (Yuan, DBRX).
_NESTED = ("moe_config", "ffn_config", "attn_config")

_EXPERT_COUNT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts")
_TOP_K_KEYS = ("num_experts_per_tok", "experts_per_token", "moe_top_k", "num_selected_experts",
               "num_selects", "router_topk", "moe_k", "top_k")
_HIDDEN_KEYS = ("hidden_size", "n_embd", "d_model")
_LAYER_KEYS = ("num_hidden_layers", "num_layers", "n_layer", "n_layers")
_HEAD_KEYS = ("num_attention_heads", "n_head", "n_heads", "num_heads")
_KV_HEAD_KEYS = ("num_key_value_heads", "n_kv_heads", "num_kv_heads", "kv_n_heads",
                 "multi_query_group_num")
_EXPERT_FFN_KEYS = ("moe_intermediate_size", "expert_intermediate_size", "ffn_hidden_size",
                    "intermediate_size")


class _Fields:
    """Field look-up over a config dict, with errors that name the file and the field."""

    def __init__(self, data: dict[str, Any], path: str):
        self.data = data
        self.path = path

    def _raw(self, key: str) -> Any:
        if key in self.data:
            return self.data[key]
        for nest in _NESTED:
            block = self.data.get(nest)
            if isinstance(block, dict) and key in block:
                return block[key]
        return None

    def has(self, key: str) -> bool:
        return self._raw(key) is not None

    def find(self, keys: tuple[str, ...]) -> tuple[str, Any] | tuple[None, None]:
        """The first of `keys` that is set (not absent, not null), and its value."""
        for key in keys:
            value = self._raw(key)
            if value is not None:
                return key, value
        return None, None

    def to_int(self, key: str, value: Any, *, minimum: int = 1) -> int:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise CopeInputError(f"field {key!r} must be an integer, got {value!r}", path=self.path)
        if isinstance(value, float) and not value.is_integer():
            raise CopeInputError(f"field {key!r} must be an integer, got {value!r}", path=self.path)
        number = int(value)
        if number < minimum:
            raise CopeInputError(f"field {key!r} must be at least {minimum}, got {number}",
                                 path=self.path)
        return number

    def int_of(self, keys: tuple[str, ...], *, default: int | None = None, minimum: int = 1) -> int:
        key, value = self.find(keys)
        if key is None:
            if default is not None:
                return default
            also = f" (also looked for {', '.join(keys[1:])})" if len(keys) > 1 else ""
            raise CopeInputError(f"missing field {keys[0]!r}{also}", path=self.path)
        return self.to_int(key, value, minimum=minimum)

    def optional_int(self, keys: tuple[str, ...], *, minimum: int = 0) -> int | None:
        key, value = self.find(keys)
        return None if key is None else self.to_int(key, value, minimum=minimum)


def model_from_hf_config(path: str | Path) -> ModelSpec:
    """Read one Hugging Face `config.json` and describe the model it configures."""
    where = str(path)
    data = _read_json_object(Path(path), where)
    data = _text_config(data)
    fields = _Fields(data, where)
    model_type = _model_type(data)

    if _is_encoder_decoder(data, model_type):
        raise CopeInputError(
            f"not a decoder-only MoE model: {model_type or 'this model'} is an encoder-decoder "
            "(seq2seq) model; COPE sizes decoder-only models that llama.cpp runs",
            path=where,
        )

    key, n_experts = fields.find(_EXPERT_COUNT_KEYS)
    if key is None or n_experts in (0, 1):
        raise CopeInputError(
            "not an MoE config: no routed-expert count above 1 (looked for "
            + ", ".join(_EXPERT_COUNT_KEYS) + ")",
            path=where,
        )
    n_experts = fields.to_int(key, n_experts, minimum=2)
    if fields.data.get("use_attn_moe") is True:
        raise CopeInputError("attention experts (use_attn_moe) are not supported", path=where)

    hidden = fields.int_of(_HIDDEN_KEYS)
    n_blocks = fields.int_of(_LAYER_KEYS)
    vocab = fields.int_of(("vocab_size",))
    top_k = fields.int_of(_TOP_K_KEYS)

    notes: list[str] = []
    expert_ffn, gated = _expert_ffn(fields, model_type, n_experts)
    moe_blocks = _moe_blocks(fields, model_type, n_blocks)
    n_shared, shared_ffn = _shared_experts(fields, model_type, expert_ffn)
    dense_ffn = 0
    if len(moe_blocks) < n_blocks:
        dense_ffn = fields.int_of(("intermediate_size",))
    if model_type == "openmoe":
        # Every OpenMoE FFN holds gate (h x 2f), up (h x f) and down (f x h): 4 h f weights.
        width = expert_ffn // 2
        if dense_ffn:
            dense_ffn = round(4 * width / 3)
        notes.append(
            "OpenMoE FFNs have a double-width gate (4 h f weights): experts written as "
            "ungated with width 2 f, dense and extra FFNs as gated with width 4 f / 3"
        )
    attention = _attention(fields, model_type, hidden, n_experts)
    if model_type == "jetmoe":
        notes.append(
            "JetMoE's mixture-of-attention experts written as grouped-query attention with "
            "n_experts x n_kv_heads query heads (same weights; a token uses top_k of them)"
        )
    if model_type == "jamba":
        notes.append(
            "Jamba's Mamba mixer blocks are counted as attention blocks: non-expert weights "
            "are underestimated and the KV cache overestimated"
        )
    if model_type == "yuan":
        notes.append("Yuan's localized-filtering convolutions (2 h^2 weights per block, 0.5% of the "
                     "model) are not counted")

    model_id, name, hf_repo = _identity(Path(path), data)
    source = f"config.json: {where}"
    if notes:
        source += " (" + "; ".join(notes) + ")"
    try:
        return ModelSpec(
            id=model_id,
            name=name,
            arch=_llama_cpp_arch(data, model_type),
            n_blocks=n_blocks,
            moe_blocks=moe_blocks,
            n_routed_experts=n_experts,
            top_k=top_k,
            n_shared_experts=n_shared,
            hidden_size=hidden,
            expert_ffn_size=expert_ffn,
            shared_expert_ffn_size=shared_ffn,
            dense_ffn_size=dense_ffn,
            vocab_size=vocab,
            tied_embeddings=bool(data.get("tie_word_embeddings", True)),  # HF's default
            attention=attention,
            source=source,
            gated_experts=gated,
            hf_repo=hf_repo,
            default_quant="MXFP4" if model_type == "gpt_oss" else "Q4_K_M",
        )
    except CopeInputError as exc:
        raise CopeInputError(str(exc), path=where) from None


# --- reading ---------------------------------------------------------------------


def _read_json_object(path: Path, where: str) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CopeInputError("file not found", path=where) from None
    except IsADirectoryError:
        raise CopeInputError("is a folder, not a config.json file", path=where) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise CopeInputError(f"cannot read the file: {exc}", path=where) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CopeInputError(f"not valid JSON: {exc.msg} (column {exc.colno})",
                             path=where, line=exc.lineno) from None
    if not isinstance(data, dict):
        raise CopeInputError(
            f"a config.json holds one JSON object; this file holds a {type(data).__name__}",
            path=where,
        )
    return data


def _text_config(data: dict[str, Any]) -> dict[str, Any]:
    """Multimodal configs keep the language model's fields in `text_config`."""
    inner = data.get("text_config")
    if isinstance(inner, dict) and not any(k in data for k in _EXPERT_COUNT_KEYS):
        merged = dict(inner)
        for key in ("_name_or_path", "architectures", "tie_word_embeddings"):
            if key in data and key not in merged:
                merged[key] = data[key]
        if "model_type" not in merged and "model_type" in data:
            merged["model_type"] = data["model_type"]
        return merged
    return data


def _model_type(data: dict[str, Any]) -> str:
    model_type = data.get("model_type")
    if isinstance(model_type, str) and model_type:
        return model_type
    architectures = data.get("architectures")
    if isinstance(architectures, list) and architectures and isinstance(architectures[0], str):
        return _MODEL_TYPE_BY_ARCHITECTURE.get(architectures[0], "")
    return ""


def _is_encoder_decoder(data: dict[str, Any], model_type: str) -> bool:
    if data.get("is_encoder_decoder") is True or model_type in _ENCODER_DECODER_TYPES:
        return True
    return any(data.get(key) for key in _ENCODER_DECODER_FIELDS)


# --- shape -------------------------------------------------------------------------


def _expert_ffn(fields: _Fields, model_type: str, n_experts: int) -> tuple[int, bool]:
    """Width of one routed expert's FFN, and whether it is gated (3 matrices)."""
    if model_type == "llama_moe":
        sizes = fields.data.get("size_experts")
        if sizes is not None:
            flat = [s for layer in sizes for s in layer] if all(
                isinstance(layer, list) for layer in sizes) else list(sizes)
            if not flat or len(set(flat)) != 1:
                raise CopeInputError(
                    "field 'size_experts': experts of different widths are not supported",
                    path=fields.path)
            return fields.to_int("size_experts", flat[0]), True
        total = fields.int_of(("intermediate_size",))
        if total % n_experts:
            raise CopeInputError(
                f"field 'intermediate_size' ({total}) does not split evenly into {n_experts} experts",
                path=fields.path)
        return total // n_experts, True
    if model_type == "openmoe":
        return 2 * fields.int_of(("intermediate_size",)), False
    width = fields.int_of(_EXPERT_FFN_KEYS)
    gated = not any(fields._raw(k) is False
                    for k in ("glu", "gated_linear_unit", "is_gated_act", "mlp_gated"))
    return width, gated


def _moe_blocks(fields: _Fields, model_type: str, n_blocks: int) -> tuple[int, ...]:
    """Indices of the blocks that hold routed experts, by the family's placement rule."""
    data = fields.data
    blocks = list(range(n_blocks))

    period = fields.optional_int(("expert_layer_period",), minimum=1)
    if model_type == "jamba" or period is not None:
        # Jamba: block i holds experts when i % expert_layer_period == expert_layer_offset.
        period = period or 2  # JambaConfig's defaults: period 2, offset 1
        offset = fields.optional_int(("expert_layer_offset",))
        if offset is None:
            offset = 1 if model_type == "jamba" else 0
        blocks = [i for i in blocks if i % period == offset]

    interval = fields.optional_int(("moe_layer_interval",), minimum=1)
    if interval is not None:
        # OpenMoE (and ERNIE): every interval-th block, counted from 1.
        blocks = [i for i in blocks if (i + 1) % interval == 0]
        start = fields.optional_int(("moe_layer_start_index",))
        end = fields.optional_int(("moe_layer_end_index",), minimum=-1)
        if start is not None:
            blocks = [i for i in blocks if i >= start]
        if end is not None and end >= 0:
            blocks = [i for i in blocks if i <= end]

    first_dense = fields.optional_int(("first_k_dense_replace",))
    if first_dense:
        # DeepSeek: the first k blocks keep a dense FFN.
        blocks = [i for i in blocks if i >= first_dense]

    freq = data.get("moe_layer_freq")
    if isinstance(freq, list):
        if len(freq) != n_blocks:
            raise CopeInputError(
                f"field 'moe_layer_freq' lists {len(freq)} blocks, the model has {n_blocks}",
                path=fields.path)
        blocks = [i for i in blocks if freq[i]]
    elif freq is not None:
        # DeepSeek: block i holds experts when i % moe_layer_freq == 0.
        step = fields.to_int("moe_layer_freq", freq)
        blocks = [i for i in blocks if i % step == 0]

    step = fields.optional_int(("decoder_sparse_step",), minimum=0)
    if step:
        # Qwen-MoE: block i holds experts when (i + 1) % decoder_sparse_step == 0 ...
        blocks = [i for i in blocks if (i + 1) % step == 0]
    dense_only = data.get("mlp_only_layers")
    if dense_only:
        # ... and i is not in mlp_only_layers.
        if not isinstance(dense_only, list) or not all(
                isinstance(i, int) and not isinstance(i, bool) for i in dense_only):
            raise CopeInputError(f"field 'mlp_only_layers' must list block indices, got {dense_only!r}",
                                 path=fields.path)
        blocks = [i for i in blocks if i not in set(dense_only)]

    if not blocks:
        raise CopeInputError("no block holds routed experts under this config's layer rules",
                             path=fields.path)
    return tuple(blocks)


def _shared_experts(fields: _Fields, model_type: str, expert_ffn: int) -> tuple[int, int]:
    """(number of shared experts, their total FFN width) in an MoE block."""
    if model_type == "openmoe":
        # The extra dense FFN after each MoE layer: every token passes through it.
        return 1, round(4 * (expert_ffn // 2) / 3)
    width = fields.optional_int(("shared_expert_intermediate_size",))
    if width is not None:  # Qwen-MoE: one shared expert of this width
        return (1, width) if width else (0, 0)
    width = fields.optional_int(("intermediate_size_residual",))
    if width is not None:  # LLaMA-MoE v2: a residual FFN every token passes through
        return (1, width) if width else (0, 0)
    count = fields.optional_int(("n_shared_experts", "num_shared_experts", "moe_num_shared_experts"))
    if count:  # DeepSeek, XVERSE, ERNIE: count x the routed expert's width
        return count, count * expert_ffn
    return 0, 0


def _attention(fields: _Fields, model_type: str, hidden: int, n_experts: int) -> AttentionShape:
    data = fields.data
    if data.get("kv_lora_rank") is not None:  # DeepSeek-V2/V3 multi-head latent attention
        n_heads = fields.int_of(_HEAD_KEYS)
        nope = fields.int_of(("qk_nope_head_dim",))
        rope = fields.int_of(("qk_rope_head_dim",))
        return AttentionShape(
            kind="mla",
            n_heads=n_heads,
            n_kv_heads=n_heads,
            head_dim=nope + rope,
            q_lora_rank=fields.optional_int(("q_lora_rank",)) or 0,
            kv_lora_rank=fields.int_of(("kv_lora_rank",)),
            qk_nope_head_dim=nope,
            qk_rope_head_dim=rope,
            v_head_dim=fields.int_of(("v_head_dim",)),
        )
    if model_type == "jetmoe":
        n_kv = fields.int_of(_KV_HEAD_KEYS)
        head_dim = fields.int_of(("kv_channels",))
        return AttentionShape(kind="gqa", n_heads=n_experts * n_kv, n_kv_heads=n_kv, head_dim=head_dim)

    n_heads = fields.int_of(_HEAD_KEYS)
    n_kv = fields.int_of(_KV_HEAD_KEYS, default=n_heads)
    head_dim = fields.optional_int(("head_dim", "kv_channels"), minimum=1)
    projection = fields.optional_int(("attention_projection_size",), minimum=1)
    if head_dim is None and projection is not None:
        # Yuan 2.0: q, k, v and o project to attention_projection_size, not hidden_size.
        if projection % n_heads:
            raise CopeInputError(
                f"field 'attention_projection_size' ({projection}) is not a multiple of "
                f"{n_heads} heads", path=fields.path)
        head_dim = projection // n_heads
    if head_dim is None:
        if hidden % n_heads:
            raise CopeInputError(
                f"missing field 'head_dim' (hidden size {hidden} is not a multiple of "
                f"{n_heads} heads)", path=fields.path)
        head_dim = hidden // n_heads
    window, every = _sliding_window(fields)
    return AttentionShape(kind="gqa", n_heads=n_heads, n_kv_heads=n_kv, head_dim=head_dim,
                          sliding_window_tokens=window, sliding_window_every=every)


def _sliding_window(fields: _Fields) -> tuple[int, int]:
    """Sliding-window layers, only where `layer_types` says which blocks slide (GPT-OSS).

    Elsewhere every block is taken as full attention: llama.cpp keeps a full-size KV
    cache for those families, so that is the safe size to plan for.
    """
    layer_types = fields.data.get("layer_types")
    window = fields.data.get("sliding_window")
    if not isinstance(layer_types, list) or not isinstance(window, int) or window <= 0:
        return 0, 0
    full = [i for i, kind in enumerate(layer_types) if kind == "full_attention"]
    if not full:
        return window, 0
    every = full[0] + 1
    if full == list(range(every - 1, len(layer_types), every)):
        return window, every
    return 0, 0  # an irregular pattern: plan for full attention everywhere


def _llama_cpp_arch(data: dict[str, Any], model_type: str) -> str:
    if model_type == "mixtral" and (
        data.get("intermediate_size_residual") or data.get("scale_factor") not in (None, 1, 1.0)
    ):
        # LLaMA-MoE v2 reuses Mixtral's config with a residual FFN and an output scale
        # that llama.cpp's Mixtral (llama) path does not have.
        return UNKNOWN_ARCH
    return LLAMA_CPP_ARCH.get(model_type, UNKNOWN_ARCH)


def _identity(path: Path, data: dict[str, Any]) -> tuple[str, str, str]:
    """(id, name, hf_repo) from the file's name, or where the file lies.

    `x.config.json` is model `x`. A plain `config.json` takes its Hub repo from the
    Hugging Face cache folder it lies in (`models--org--name/snapshots/...`), else its
    name from `_name_or_path`, else from its folder. `_name_or_path` records where the
    checkpoint was loaded from when it was saved (MiniCPM-MoE-8x2B's says openbmb/CPM-2B),
    so it never sets hf_repo.
    """
    stem = path.name
    for suffix in (".json", ".config"):
        if stem.endswith(suffix):
            stem = stem[: -len(suffix)]
    if stem not in ("", "config"):
        return stem, stem, ""
    for part in reversed(path.resolve().parts):
        pieces = part.split("--", 2)
        if len(pieces) == 3 and pieces[0] == "models" and pieces[1] and pieces[2]:
            return pieces[2], pieces[2], f"{pieces[1]}/{pieces[2]}"
    name_or_path = data.get("_name_or_path")
    if isinstance(name_or_path, str) and name_or_path.strip("/"):
        stem = name_or_path.rstrip("/").split("/")[-1]
    else:
        stem = path.resolve().parent.name or "config"
    return stem, stem, ""
