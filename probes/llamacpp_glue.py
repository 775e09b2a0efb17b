"""The glue between the llama.cpp recorder and llama-cpp-python.

Importing llama_cpp (LlamaCppMissing, with the install hint, when the optional extra
is absent); the stable head of struct ggml_tensor and ggml's tensor functions through
ctypes, which the eval callback reads tensors with; the architecture, expert count,
top-k and name from the GGUF header (the `gguf` package); the byte stand-in tokenizer
for vocabulary-less test models; quieting llama.cpp's load chatter; whether the build
offloads to a GPU. llama_cpp is imported only inside the functions. The decode loop
that uses all this is `probes.record_llamacpp`.
"""

from __future__ import annotations

import ctypes

from engine.core.errors import CopeInputError
import pathlib

INSTALL_HINT = (
    "recording from a GGUF file needs llama-cpp-python: pip install 'cope-tui[llamacpp]' "
    "(it builds llama.cpp, a few minutes; for CUDA prefix CMAKE_ARGS=\"-DGGML_CUDA=on\")"
)


class LlamaCppMissing(CopeInputError):
    """llama-cpp-python is not installed."""


class TensorHead(ctypes.Structure):
    """The stable head of struct ggml_tensor (type, buffer, ne, nb)."""

    _fields_ = [
        ("type", ctypes.c_int),
        ("buffer", ctypes.c_void_p),
        ("ne", ctypes.c_int64 * 4),
        ("nb", ctypes.c_size_t * 4),
    ]


def import_llama_cpp():
    try:
        import llama_cpp  # type: ignore[import-not-found]
    except ImportError:
        raise LlamaCppMissing(INSTALL_HINT) from None
    return llama_cpp


def ggml_lib(llama_cpp):
    """A ctypes handle that resolves ggml_get_name, ggml_nbytes, ggml_backend_tensor_get."""
    candidates = []
    try:
        from llama_cpp import _ggml  # type: ignore[import-not-found]

        candidates.append(_ggml.libggml)
    except Exception:  # noqa: BLE001 - older llama-cpp-python has no _ggml
        pass
    libdir = pathlib.Path(llama_cpp.__file__).parent / "lib"
    for name in ("libggml-base.so", "libggml-base.dylib", "ggml-base.dll", "libggml.so", "libggml.dylib"):
        if (libdir / name).exists():
            try:
                candidates.append(ctypes.CDLL(str(libdir / name)))
            except OSError:
                pass
    candidates.append(llama_cpp.llama_cpp._lib)
    for lib in candidates:
        try:
            get_name, nbytes, tensor_get = lib.ggml_get_name, lib.ggml_nbytes, lib.ggml_backend_tensor_get
        except AttributeError:
            continue
        get_name.argtypes, get_name.restype = [ctypes.c_void_p], ctypes.c_char_p
        nbytes.argtypes, nbytes.restype = [ctypes.c_void_p], ctypes.c_size_t
        tensor_get.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t]
        tensor_get.restype = None
        return get_name, nbytes, tensor_get
    raise CopeInputError("this llama-cpp-python build does not expose ggml's tensor functions")


def gguf_facts(path: str) -> dict:
    """Architecture, expert count and top-k from the GGUF header (the `gguf` package)."""
    from gguf import GGUFReader

    try:
        reader = GGUFReader(path)
    except Exception as exc:  # noqa: BLE001 - any parse failure is a bad file
        raise CopeInputError(f"not a readable GGUF file: {exc}", path=path) from None

    def value(key: str):
        field = reader.fields.get(key)
        if field is None or not field.data:
            return None
        part = field.parts[field.data[0]]
        if field.types and field.types[0].name == "STRING":
            return bytes(part).decode("utf-8", "replace")
        return int(part[0])

    arch = value("general.architecture")
    if not arch:
        raise CopeInputError("GGUF header has no general.architecture", path=path)
    n_experts = value(f"{arch}.expert_count")
    if not n_experts:
        raise CopeInputError(f"not an MoE model ({arch} has no expert_count)", path=path)
    return {
        "arch": arch,
        "n_experts": n_experts,
        "top_k": value(f"{arch}.expert_used_count"),
        "name": value("general.name") or "",
    }


def bytes_as_token_ids(text: str, n_vocab: int) -> list[int]:
    """A vocabulary-less model's stand-in tokenizer: the text's UTF-8 bytes modulo n_vocab.

    Only for GGUF files whose tokenizer model is "none" (test models): llama_tokenize
    aborts the process on them, and they have no tokens to map text to anyway.
    """
    if n_vocab < 1:
        raise CopeInputError("the model has an empty vocabulary")
    return [b % n_vocab for b in text.encode("utf-8")]


def quiet(llama_cpp) -> None:
    """Keep llama.cpp's load chatter off stderr (errors still show)."""
    try:
        from llama_cpp import _logger  # type: ignore[import-not-found]

        _logger.set_verbose(False)
    except Exception:  # noqa: BLE001 - cosmetic only
        pass


def gpu_offload_supported(llama_cpp=None) -> bool:
    llama_cpp = llama_cpp or import_llama_cpp()
    fn = getattr(llama_cpp, "llama_supports_gpu_offload", None)
    try:
        return bool(fn()) if fn is not None else False
    except Exception:  # noqa: BLE001
        return False


__all__ = [
    "INSTALL_HINT",
    "LlamaCppMissing",
    "bytes_as_token_ids",
    "gpu_offload_supported",
    "import_llama_cpp",
]
