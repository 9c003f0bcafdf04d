"""Opening NVIDIA's shared libraries (cuBLAS, cuBLASLt) for the CUDA backend.

From the library's wheel (``nvidia-cublas``: ``nvidia/cu13/lib``, which PyTorch's CUDA
13 builds install too) through ``cuda.pathfinder``, a dependency of ``cuda-bindings``;
else from the system's loader path.

>>> lib = open_nvidia("cublasLt")
"""

from __future__ import annotations

import ctypes

__all__ = ["open_nvidia"]


def open_nvidia(name: str) -> ctypes.CDLL:
    """NVIDIA's library ``lib{name}`` (``cublas``, ``cublasLt``): from its wheel through
    ``cuda.pathfinder``, else the system's loader path (CUDA 13, then 12); OSError
    listing every attempt where none loads."""
    problems = []
    try:
        from cuda.pathfinder import load_nvidia_dynamic_lib

        return ctypes.CDLL(load_nvidia_dynamic_lib(name).abs_path)
    except Exception as exc:  # not installed as a wheel: try the system's loader path
        problems.append(f"cuda.pathfinder: {type(exc).__name__}: {exc}")
    for soname in (f"lib{name}.so.13", f"lib{name}.so.12", f"lib{name}.so"):
        try:
            return ctypes.CDLL(soname)
        except OSError as exc:
            problems.append(str(exc))
    raise OSError("; ".join(problems))
