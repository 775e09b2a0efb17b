"""llama.cpp's GPU backends as a plan needs them: the names of their devices' buffers,
the variable that chooses which cards a backend sees, and what they do differently.

From ggml-org/llama.cpp at 0c1e57098bba43ac29e6e3b677cdceebdd22334f (the commit COPE's
real-binary tests build, bench/llamacpp_build.py SOURCE_COMMIT):

- Buffer names, which `-ot PATTERN=BUFFER` looks up exactly (common/arg.cpp,
  parse_tensor_buffer_overrides: every device's `ggml_backend_buft_name`): the backend's
  name and the device's index. ggml/include/ggml-cuda.h defines GGML_CUDA_NAME "CUDA",
  "ROCm" when built for HIP (GGML_USE_HIP), "MUSA" for Moore Threads; ggml-cuda.cu names
  each buffer type `GGML_CUDA_NAME + std::to_string(i)`. ggml/include/ggml-vulkan.h
  GGML_VK_NAME "Vulkan" (ggml-vulkan.cpp: `ctx->name = GGML_VK_NAME + std::to_string(idx)`);
  ggml/include/ggml-sycl.h GGML_SYCL_NAME "SYCL" (ggml-sycl.cpp: `GGML_SYCL_NAME +
  std::to_string(i)`).
- Graph replay: ggml-cuda/common.cuh defines USE_CUDA_GRAPH when GGML_CUDA_USE_GRAPHS or
  GGML_HIP_GRAPHS is defined. The top-level CMakeLists.txt sets GGML_CUDA_GRAPHS_DEFAULT ON
  (so GGML_CUDA_GRAPHS, ggml/CMakeLists.txt, is on for llama.cpp's own builds) and
  ggml/CMakeLists.txt has `option(GGML_HIP_GRAPHS ... ON)`: a ROCm build of this commit
  replays decode's kernels as graphs just as a CUDA build does. The Vulkan backend has no
  such graphs (it records command buffers itself); SYCL's graphs (GGML_SYCL_GRAPH, on) need
  the oneAPI async-allocation extension (ggml-sycl.cpp `#if defined(GGML_SYCL_GRAPH) &&
  SYCL_EXT_ONEAPI_ASYNC_MEMORY_ALLOC`), so COPE does not count on them.
- Op offload (a CPU weight's op run on the GPU at large batches) is the same rule in the
  three: `get_op_batch_size(op) >= op_offload_min_batch_size` (ggml-cuda.cu,
  ggml-vulkan.cpp, ggml-sycl.cpp `*_device_offload_op`).
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.core.errors import CopeInputError


@dataclass(frozen=True)
class Backend:
    name: str  # as ggml names it: the prefix of its buffers
    visible_env: str  # the variable that chooses the cards it sees
    graphs: bool  # decode's kernels replayed as graphs at the pinned commit (see above)
    graphs_why: str


BACKENDS: dict[str, Backend] = {b.name: b for b in (
    Backend("CUDA", "CUDA_VISIBLE_DEVICES", True, "CUDA graphs (GGML_CUDA_GRAPHS, on in llama.cpp's builds)"),
    Backend("ROCm", "HIP_VISIBLE_DEVICES", True, "HIP graphs (GGML_HIP_GRAPHS, on by default in ggml/CMakeLists.txt)"),
    Backend("Vulkan", "GGML_VK_VISIBLE_DEVICES", False,
            "no CUDA graphs in the Vulkan backend: each block's kernels priced as CUDA's launched one by one "
            "(assumed: Vulkan's own dispatch cost is not measured here)"),
    Backend("SYCL", "ONEAPI_DEVICE_SELECTOR", False,
            "SYCL graphs need the oneAPI async-allocation extension: priced without them (assumed)"),
)}


def backend(name: str) -> Backend:
    """A backend by its name, any case ("vulkan" -> Vulkan); a one-line error otherwise."""
    for b in BACKENDS.values():
        if b.name.lower() == name.strip().lower():
            return b
    raise CopeInputError(f"--gpu ...@{name}: unknown llama.cpp backend; one of {', '.join(BACKENDS)}")


def buffer_name(backend_name: str, index: int) -> str:
    """The buffer of device `index` of a backend, as `-ot` names it: CUDA0, ROCm1, Vulkan0."""
    return f"{backend(backend_name).name}{index}"


def uses_graphs(backend_name: str) -> bool:
    return backend(backend_name).graphs
