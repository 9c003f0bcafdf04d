"""The dtypes tensors support, and turning user spellings into numpy dtypes."""

from __future__ import annotations

from typing import Any

import numpy as np

from .errors import DTypeError

_NAMES = (
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "float32",
    "float64",
    "complex64",
    "complex128",
)

SUPPORTED: dict[str, np.dtype[Any]] = {name: np.dtype(name) for name in _NAMES}
try:  # numpy has no bfloat16 of its own
    import ml_dtypes
except ImportError:  # a dependency: missing only after an install with --no-deps
    pass
else:
    SUPPORTED["bfloat16"] = np.dtype(ml_dtypes.bfloat16)

_BY_DTYPE = {dt: name for name, dt in SUPPORTED.items()}


def as_dtype(dtype: Any, argument: str = "dtype") -> np.dtype[Any]:
    """Normalize ``dtype`` (a name, a numpy type or dtype) or raise :class:`DTypeError`."""
    if isinstance(dtype, str) and dtype in SUPPORTED:
        return SUPPORTED[dtype]
    if isinstance(dtype, str) and dtype == "bfloat16":
        raise DTypeError(
            f"{argument}='bfloat16' needs ml_dtypes, a dependency of cuasync that is not "
            "installed here; install it with 'pip install ml_dtypes'"
        )
    try:
        dt = np.dtype(dtype)
    except TypeError:
        dt = None
    if dt is None or dt not in _BY_DTYPE:
        raise DTypeError(
            f"{argument}={dtype!r} is not a supported dtype; expected one of {', '.join(SUPPORTED)}"
        )
    return dt


def dtype_name(dtype: np.dtype[Any]) -> str:
    return _BY_DTYPE.get(dtype, str(dtype))
