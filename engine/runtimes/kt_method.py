"""Which kt-kernel CPU method (`--kt-method`) runs a model's CPU experts on this CPU.

As read in kvcache-ai/ktransformers at commit 95009ea6856c0799e517e93cb12be5e8494bc7ce:
- kt-kernel/python/experts.py: the inference methods are AMXINT4, AMXINT8 (AMXMoEWrapper),
  RAWINT4, FP8, BF16, FP8_PERCHANNEL, GPTQ_INT4, SYCL_GPTQ_INT4, MXFP4, MXFP8
  (NativeMoEWrapper: the checkpoint's own experts), LLAMAFILE (LlamafileMoEWrapper: a
  GGUF's) and MOE_INT4, MOE_INT8;
- kt-kernel/python/utils/llamafile.py: LLAMAFILE raises at construction unless
  moe_intermediate_size % 256 == 0 (QK_K), and each of `--kt-threadpool-count` pools needs
  at least one of the width's 256-wide blocks; it reads `blk.N.ffn_{gate,up,down}_exps`
  from the GGUF (utils/loader.py GGUFLoader: one .gguf file, or every *.gguf of a folder);
- kt-kernel/README.md: AMXINT4/AMXINT8 need an AMX CPU (Sapphire Rapids or later) and
  weights converted by kt-kernel/scripts/convert_cpu_weights.py (--input-type fp8, fp16,
  bf16 or awq; --quant-method int4 or int8), `--kt-weight-path` then naming the converted
  folder; AMXINT4 "may cause huge accuracy drop for some models, e.g., Qwen3-30B-A3B";
  kt-kernel/python/_cpu_detect.py takes amx_tile, amx_int8 and amx_bf16 for its AMX build;
- kt-kernel/python/utils/loader.py MXFP4SafeTensorLoader reads DeepSeek-V4-Flash's expert
  layout, and kvcache-ai/sglang (commit 04653fa88f5ce4ea83632c4ad436343db6bc8324)
  python/sglang/srt/layers/moe/kt_ep_wrapper.py `create_weights` hands gpt-oss's clamped
  SwiGLU (gemm1_alpha, gemm1_clamp_limit) to kt-kernel only for MXFP4/MXFP8 and zeroes it
  for every other method, which then computes a plain SiLU: gpt-oss has no method.

COPE offers LLAMAFILE where the width allows it (it computes the GGUF COPE priced), else
AMXINT4 or AMXINT8 on a CPU with AMX (INT4 for a GGUF of at most 6 bits a weight, INT8
above), else nothing, and says why. The native methods (BF16, FP8, ...) compute the
checkpoint's own experts, several times the bytes COPE priced the CPU lane at: not offered.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.models.model import ModelSpec
from engine.runtimes.sglang_memory import FP8, Checkpoint

QK_K = 256
LLAMAFILE = "LLAMAFILE"
AMXINT4 = "AMXINT4"
AMXINT8 = "AMXINT8"
# SGLang's --kt-threadpool-count default (server_args.py) when COPE does not set it.
DEFAULT_THREADPOOLS = 2
# A GGUF of at most this many bits a weight maps to AMXINT4, above it to AMXINT8.
AMXINT4_MAX_BITS = 6.0
CONVERT_SCRIPT = "kt-kernel/scripts/convert_cpu_weights.py"


@dataclass(frozen=True)
class KtMethod:
    """kt-kernel's CPU method for a model on a CPU, or none (`name` empty) and why."""

    name: str  # LLAMAFILE | AMXINT4 | AMXINT8 | "" (none suits)
    why: str  # why this method, or why none
    cpu_expert_bytes: int = 0  # one expert on the CPU side under this method
    convert_input: str = ""  # AMX: convert_cpu_weights.py --input-type

    @property
    def runs(self) -> bool:
        return bool(self.name)

    @property
    def reads_gguf(self) -> bool:
        return self.name == LLAMAFILE

    @property
    def quant_method(self) -> str:
        """convert_cpu_weights.py's --quant-method for an AMX method."""
        return {AMXINT4: "int4", AMXINT8: "int8"}.get(self.name, "")


def llamafile_problem(model: ModelSpec, threadpools: int) -> str | None:
    """Why LLAMAFILE cannot run the model's experts, or None."""
    width = model.expert_ffn_size
    if width % QK_K:
        return (f"LLAMAFILE needs an expert width divisible by {QK_K} (kt-kernel/python/utils/llamafile.py raises "
                f"at every KT layer otherwise); {model.id}'s is {width}")
    if width // QK_K < threadpools:
        return (f"LLAMAFILE gives each of the {threadpools} thread pools (--kt-threadpool-count) at least one "
                f"{QK_K}-wide block of the expert width, and {model.id}'s {width} has {width // QK_K}")
    return None


def kt_method(model: ModelSpec, checkpoint: Checkpoint, *, amx: bool | None, amx_note: str, threadpools: int,
              gguf_expert_bytes: int) -> KtMethod:
    """The method COPE exports for `model` on a CPU whose AMX is `amx` (None: unknown)."""
    if model.arch == "gpt-oss":
        return KtMethod("", "kt-kernel has no method for gpt-oss: SGLang hands its clamped SwiGLU to kt-kernel "
                        "only for MXFP4/MXFP8 (kt_ep_wrapper.py zeroes it for the others, which compute a plain SiLU), "
                        "and kt-kernel's MXFP4 loader reads DeepSeek-V4-Flash's expert layout, not gpt-oss's")
    problem = llamafile_problem(model, threadpools)
    if problem is None:
        also = f"; this CPU also has AMX (AMXINT4/AMXINT8 after {CONVERT_SCRIPT})" if amx else ""
        return KtMethod(LLAMAFILE, f"LLAMAFILE: kt-kernel computes the GGUF's own experts on the CPU (expert width "
                        f"{model.expert_ffn_size} = {model.expert_ffn_size // QK_K} x {QK_K}){also}", gguf_expert_bytes)
    if not amx:
        known = amx_note if amx is False else f"AMX not known ({amx_note})"
        return KtMethod("", f"{problem}, and kt-kernel's AMXINT4/AMXINT8 need an AMX CPU: {known}")
    if checkpoint.quant == FP8:
        source = "fp8"
    elif not checkpoint.quant:
        source = "bf16" if checkpoint.dtype == "bfloat16" else "fp16"
    else:
        return KtMethod("", f"{problem}, and {CONVERT_SCRIPT} (for AMXINT4/AMXINT8) converts fp8, fp16, bf16 or "
                        f"awq checkpoints, not {checkpoint.quant}")
    params = model.expert_params()
    bits = gguf_expert_bytes * 8 / params
    if bits <= AMXINT4_MAX_BITS:
        return KtMethod(AMXINT4, f"AMXINT4, as {amx_note} and {problem}: 4-bit CPU experts, like the GGUF's "
                        f"{bits:.1f} bits a weight (kt-kernel's README: AMXINT4 may cost accuracy on some models; "
                        "AMXINT8 doubles the CPU experts' bytes)", params // 2, source)
    return KtMethod(AMXINT8, f"AMXINT8, as {amx_note} and {problem}: 8-bit CPU experts for the GGUF's "
                    f"{bits:.1f} bits a weight", params, source)
