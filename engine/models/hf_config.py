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

The per-family field names and the checked look-up live in `engine.models.hf_config_fields`,
the rules that place and size the blocks in `engine.models.hf_config_shape` (and, for the
hybrid linear-attention, Llama 4 and GLM NextN layouts, `engine.models.hf_config_layers`); this
module reads the file and assembles the ModelSpec.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engine.core.errors import CopeInputError
from engine.core.input_limits import CONFIG_JSON_MAX_BYTES, check_model_shape, read_json
from engine.core.user_paths import input_kind
from engine.models.hf_config_fields import (
    ENCODER_DECODER_FIELDS,
    ENCODER_DECODER_TYPES,
    EXPERT_COUNT_KEYS,
    HIDDEN_KEYS,
    LAYER_KEYS,
    MODEL_TYPE_BY_ARCHITECTURE,
    TOP_K_KEYS,
    ConfigFields,
)
from engine.models.hf_config_layers import LLAMA4_TYPES, linear_attention, llama4_shared_and_dense, nextn_blocks
from engine.models.hf_config_shape import (
    attention_shape,
    expert_ffn_of,
    llama_cpp_arch,
    moe_blocks_of,
    shared_experts_of,
)
from engine.models.model import ModelSpec, model_read


def model_from_hf_config(path: str | Path) -> ModelSpec:
    """Read one Hugging Face `config.json` and describe the model it configures."""
    where = str(path)
    raw = _read_json_object(Path(path), where)
    data = _text_config(raw)
    fields = ConfigFields(data, where)
    model_type = _model_type(data)

    if _is_encoder_decoder(data, model_type):
        raise CopeInputError(
            f"not a decoder-only MoE model: {model_type or 'this model'} is an encoder-decoder "
            "(seq2seq) model; COPE sizes decoder-only models that llama.cpp runs",
            path=where,
        )

    key, n_experts = fields.find(EXPERT_COUNT_KEYS)
    if key is None or n_experts in (0, 1):
        raise CopeInputError(
            "not an MoE config: no routed-expert count above 1 (looked for "
            + ", ".join(EXPERT_COUNT_KEYS) + ")",
            path=where,
        )
    n_experts = fields.to_int(key, n_experts, minimum=2)
    if fields.data.get("use_attn_moe") is True:
        raise CopeInputError("attention experts (use_attn_moe) are not supported", path=where)

    hidden = fields.int_of(HIDDEN_KEYS)
    n_blocks = fields.int_of(LAYER_KEYS)
    vocab = fields.int_of(("vocab_size",))
    top_k = fields.int_of(TOP_K_KEYS)
    check_model_shape(n_blocks, 0, n_experts, where, top_k)  # before anything is sized by them

    notes: list[str] = []
    expert_ffn, gated = expert_ffn_of(fields, model_type, n_experts)
    moe_blocks = moe_blocks_of(fields, model_type, n_blocks)
    check_model_shape(n_blocks, len(moe_blocks), n_experts, where)
    n_shared, shared_ffn = shared_experts_of(fields, model_type, expert_ffn)
    dense_ffn = 0
    if model_type in LLAMA4_TYPES:
        n_shared, shared_ffn, dense_ffn = llama4_shared_and_dense(fields, expert_ffn)
        dense_ffn = dense_ffn if len(moe_blocks) < n_blocks else 0
    elif len(moe_blocks) < n_blocks:
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
    attention = attention_shape(fields, model_type, hidden, n_experts)
    linear_blocks, linear = linear_attention(fields, model_type, n_blocks)
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
    return model_read(
        where, n_blocks, moe_blocks, n_experts, top_k, n_shared, hidden, expert_ffn, shared_ffn, dense_ffn, vocab,
        id=model_id,
        name=name,
        arch=llama_cpp_arch(data, model_type),
        tied_embeddings=bool(data.get("tie_word_embeddings", True)),  # HF's default
        attention=attention,
        source=source,
        caveats=tuple(notes),
        gated_experts=gated,
        hf_repo=hf_repo,
        default_quant="MXFP4" if model_type == "gpt_oss" else "Q4_K_M",
        linear_blocks=linear_blocks,
        linear_attention=linear,
        nextn_blocks=nextn_blocks(fields, model_type),
        native_expert_type="MXFP4" if model_type == "gpt_oss" else "",
        context_length=_context_length(data),
        checkpoint_dtype=_checkpoint_dtype(raw, data),
        checkpoint_quant=_checkpoint_quant(raw, data),
    )


def _checkpoint_dtype(raw: dict, data: dict) -> str:
    """config.json's `dtype` (transformers 5) or `torch_dtype`, top level or the text model's; "" when absent."""
    for source in (raw, data):
        for key in ("dtype", "torch_dtype"):
            if isinstance(source.get(key), str) and source[key]:
                return str(source[key])
    return ""


def _checkpoint_quant(raw: dict, data: dict) -> str:
    """`quantization_config.quant_method` ("fp8", "mxfp4", ...); "" for plain float weights."""
    for source in (raw, data):
        config = source.get("quantization_config")
        if isinstance(config, dict) and isinstance(config.get("quant_method"), str):
            return config["quant_method"].lower()
    return ""


def _context_length(data: dict) -> int | None:
    """max_position_embeddings: the context llama.cpp's converter writes as
    `<arch>.context_length` (n_ctx_train, what -c 0 uses); None when absent or not a count."""
    value = data.get("max_position_embeddings")
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 < value < 2**31 else None


# --- reading ---------------------------------------------------------------------


def _read_json_object(path: Path, where: str) -> dict[str, Any]:
    kind = input_kind(path, what="config.json file")  # a FIFO or a device: refused unopened
    if kind is None:
        raise CopeInputError("file not found", path=where)
    if kind == "folder":
        raise CopeInputError("is a folder, not a config.json file", path=where)
    data = read_json(path, what="config.json", cap=CONFIG_JSON_MAX_BYTES)
    if not isinstance(data, dict):
        raise CopeInputError(
            f"a config.json holds one JSON object; this file holds a {type(data).__name__}",
            path=where,
        )
    return data


def _text_config(data: dict[str, Any]) -> dict[str, Any]:
    """Multimodal configs keep the language model's fields in `text_config`."""
    inner = data.get("text_config")
    if isinstance(inner, dict) and not any(k in data for k in EXPERT_COUNT_KEYS):
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
        return MODEL_TYPE_BY_ARCHITECTURE.get(architectures[0], "")
    return ""


def _is_encoder_decoder(data: dict[str, Any], model_type: str) -> bool:
    if data.get("is_encoder_decoder") is True or model_type in ENCODER_DECODER_TYPES:
        return True
    return any(data.get(key) for key in ENCODER_DECODER_FIELDS)


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
