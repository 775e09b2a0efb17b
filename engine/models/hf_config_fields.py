"""How the MoE families name their `config.json` fields, and a checked look-up over them.

The tables map each quantity a ModelSpec needs to the names the families in use give
it (the first one set wins), a Hugging Face model_type to llama.cpp's architecture,
and an `architectures` entry to a model_type for configs that lack one. `ConfigFields`
looks a name up at the top level or in the nested blocks some families use, and
turns what it finds into an integer or one CopeInputError line naming the file and
the field. The rules that place and size the blocks are in `engine.models.hf_config_shape`;
`engine.models.hf_config` reads the file and assembles the ModelSpec.
"""

from __future__ import annotations

from typing import Any

from engine.core.errors import CopeInputError

# Hugging Face model_type -> llama.cpp architecture (GGUF general.architecture).
LLAMA_CPP_ARCH = {
    "mixtral": "llama",  # llama.cpp loads Mixtral as llama with expert tensors
    "qwen2_moe": "qwen2moe",
    "qwen3_moe": "qwen3moe",
    "olmoe": "olmoe",
    "deepseek": "deepseek",
    "deepseek_v2": "deepseek2",
    "deepseek_v3": "deepseek2",
    "kimi_k2": "deepseek2",  # moonshotai/Kimi-K2: DeepSeek-V3's architecture (llama.cpp converts it as deepseek2)
    "phimoe": "phimoe",
    "granitemoe": "granitemoe",
    "jamba": "jamba",
    "minicpm": "minicpm",
    "gpt_oss": "gpt-oss",
    "dbrx": "dbrx",
    "qwen3_next": "qwen3next",
    "qwen3_5_moe": "qwen35moe",
    "qwen3_5_moe_text": "qwen35moe",
    "glm4_moe": "glm4moe",
    "glm4_moe_lite": "deepseek2",  # llama.cpp converts GLM-4.7-Flash as DeepSeek-V2
    "llama4": "llama4",
    "llama4_text": "llama4",
    "ernie4_5_moe": "ernie4_5-moe",
}
UNKNOWN_ARCH = "unknown"

# For configs without a model_type (MiniCPM-MoE's, for one): architectures[0] -> model_type.
MODEL_TYPE_BY_ARCHITECTURE = {
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
    "Qwen3NextForCausalLM": "qwen3_next",
    "Qwen3_5MoeForConditionalGeneration": "qwen3_5_moe",
    "Glm4MoeForCausalLM": "glm4_moe",
    "Glm4MoeLiteForCausalLM": "glm4_moe_lite",
    "Llama4ForConditionalGeneration": "llama4",
    "Llama4ForCausalLM": "llama4_text",
    "Ernie4_5_MoeForCausalLM": "ernie4_5_moe",
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

ENCODER_DECODER_TYPES = {"switch_transformers", "nllb-moe", "nllb_moe", "t5", "bart", "mt5"}
ENCODER_DECODER_FIELDS = ("num_decoder_layers", "decoder_layers", "encoder_layers",
                           "num_sparse_encoder_layers", "encoder_sparse_step")

# Nested blocks some families keep their MoE or attention fields in (Yuan, DBRX).
_NESTED = ("moe_config", "ffn_config", "attn_config")

EXPERT_COUNT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts")
TOP_K_KEYS = ("num_experts_per_tok", "experts_per_token", "moe_top_k", "num_selected_experts",
               "num_selects", "router_topk", "moe_k", "top_k")
HIDDEN_KEYS = ("hidden_size", "n_embd", "d_model")
LAYER_KEYS = ("num_hidden_layers", "num_layers", "n_layer", "n_layers")
HEAD_KEYS = ("num_attention_heads", "n_head", "n_heads", "num_heads")
KV_HEAD_KEYS = ("num_key_value_heads", "n_kv_heads", "num_kv_heads", "kv_n_heads",
                 "multi_query_group_num")
EXPERT_FFN_KEYS = ("moe_intermediate_size", "expert_intermediate_size", "ffn_hidden_size",
                    "intermediate_size")


class ConfigFields:
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

