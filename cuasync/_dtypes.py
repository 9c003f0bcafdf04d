"""The dtypes tensors support: one table, and turning user spellings into numpy dtypes.

Every other dtype table derives from :data:`DTYPES`: the numpy dtypes (:data:`SUPPORTED`),
the C types of kernel signatures (``cuasync._launch.signature``) and the codes and storage types
of the built-in CUDA kernels (``cuasync/kernels/cast.cuh``).

>>> DTYPES["bfloat16"].storage                 # its bits, in the built-in kernels
'unsigned short'
>>> as_dtype("float16") is SUPPORTED["float16"]
True
>>> DTYPES["float8_e4m3fn"].arithmetic          # FP8 is for storage and conversion
False
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._native import PROCESS
from .errors import DTypeError

#: A dtype as users spell one: a name (``"float32"``), a numpy dtype or scalar type
#: (``cuasync.float32``, ``np.int8``), or None where the function picks one.
DTypeLike = str | np.dtype[Any] | type[Any] | None


@dataclass(frozen=True)
class DType:
    """One supported dtype, as numpy, kernel signatures and the built-in kernels see it."""

    name: str
    #: Its code in the built-in CUDA kernels (their ``K`` template argument).
    code: int
    #: The C type the built-in kernels store it as: float16 and bfloat16 as their bits.
    storage: str
    #: How a kernel signature may spell it.
    ctypes: tuple[str, ...]
    #: ``"b"``, ``"i"``, ``"u"``, ``"f"`` or ``"c"`` (numpy's kind; bfloat16 is ``"f"`` too).
    kind: str
    #: Floats: the significand's bits, the implicit one included; 0 otherwise.
    significand: int = 0
    #: Whether elementwise ops and reductions take it. The FP8 dtypes do not: they are
    #: for storage and conversion (``astype`` them to float16/bfloat16/float32 first).
    arithmetic: bool = True


DTYPES: dict[str, DType] = {
    d.name: d
    for d in (
        DType("bool", 0, "bool", ("bool",), "b"),
        DType("int8", 1, "signed char", ("char", "signed char", "int8_t"), "i"),
        DType("int16", 2, "short", ("short", "int16_t"), "i"),
        DType("int32", 3, "int", ("int", "int32_t"), "i"),
        DType("int64", 4, "long long", ("long", "long long", "int64_t"), "i"),
        DType("uint8", 5, "unsigned char", ("unsigned char", "uint8_t"), "u"),
        DType("uint16", 6, "unsigned short", ("unsigned short", "uint16_t"), "u"),
        DType("uint32", 7, "unsigned int", ("unsigned", "unsigned int", "uint32_t"), "u"),
        DType(
            "uint64",
            8,
            "unsigned long long",
            ("unsigned long", "unsigned long long", "uint64_t", "size_t"),
            "u",
        ),
        DType("float16", 9, "unsigned short", ("__half", "half"), "f", 11),
        DType("bfloat16", 10, "unsigned short", ("__nv_bfloat16",), "f", 8),
        DType("float32", 11, "float", ("float",), "f", 24),
        DType("float64", 12, "double", ("double",), "f", 53),
        DType("complex64", 13, "float2", ("float2", "cuFloatComplex"), "c"),
        DType("complex128", 14, "double2", ("double2", "cuDoubleComplex"), "c"),
        # FP8 (OCP formats, as ml_dtypes and CUDA's cuda_fp8.h name them): bits only.
        DType("float8_e4m3fn", 15, "unsigned char", ("__nv_fp8_e4m3",), "f", 4, False),
        DType("float8_e5m2", 16, "unsigned char", ("__nv_fp8_e5m2",), "f", 3, False),
    )
}


#: The dtypes numpy has no type of its own for: ml_dtypes provides them.
ML_DTYPES = ("bfloat16", "float8_e4m3fn", "float8_e5m2")

#: The dtypes that are stored and converted but take no arithmetic (FP8).
STORAGE_ONLY = tuple(name for name, d in DTYPES.items() if not d.arithmetic)


#: The dtype a float result takes when nothing gives it one: a Python float
#: (``from_host(0.5)``, ``full(s, 0.5)``), ``arange`` of floats, integer ``/`` integer,
#: ``mean`` of integers. float32, as every creation op's ``dtype`` default (the array API
#: allows it where float64 is slow, as on most GPUs); pass ``dtype=`` for float64.
DEFAULT_FLOAT = "float32"
#: Its complex counterpart (a Python complex's dtype).
DEFAULT_COMPLEX = "complex64"
#: The dtype of a Python int with no dtype given (``full(s, 7)``), as numpy's.
DEFAULT_INT = "int64"


class _Supported(Mapping[str, "np.dtype[Any]"]):
    """:data:`SUPPORTED`: the numpy dtype of each supported name, bfloat16 and FP8 added
    at their first use (importing ml_dtypes, which provides them, takes 1-2 s: most of
    what ``import cuasync`` took when it was imported eagerly).

    A lookup of a numpy dtype's name is a dict lookup; one of an ml_dtypes name, and
    listing the table, import ml_dtypes first. Where ml_dtypes is not installed, its
    names are missing, as before.
    """

    def __init__(self) -> None:
        self._table: dict[str, np.dtype[Any]] = {
            name: np.dtype(name) for name in DTYPES if name not in ML_DTYPES
        }

    def __getitem__(self, name: str) -> np.dtype[Any]:
        try:
            return self._table[name]
        except KeyError:
            if name in ML_DTYPES and load_ml_dtypes():
                return self._table[name]
            raise

    def __contains__(self, name: object) -> bool:
        return name in self._table or (name in ML_DTYPES and load_ml_dtypes())

    def __iter__(self) -> Iterator[str]:
        load_ml_dtypes()
        return iter([name for name in DTYPES if name in self._table])  # the table's order

    def __len__(self) -> int:
        load_ml_dtypes()
        return len(self._table)


#: The numpy dtype of each supported name (bfloat16 and FP8 where ml_dtypes imports).
SUPPORTED = _Supported()

#: The name of each supported numpy dtype (bfloat16 and FP8 once :data:`SUPPORTED` has
#: them). The native upload builder reads this dict: it is only ever added to.
_BY_DTYPE: dict[np.dtype[Any], str] = {dt: name for name, dt in SUPPORTED._table.items()}
# (what from_host's native build takes: an ndarray exactly, of a dtype of this dict)
PROCESS.ndarray, PROCESS.dtypes = np.ndarray, _BY_DTYPE

_ml_lock = threading.Lock()
_ml_loaded: bool | None = None  # None: not tried yet


def load_ml_dtypes() -> bool:
    """Import ml_dtypes and add bfloat16 and FP8 to the tables, once; whether they are
    there (ml_dtypes is a dependency: missing only after an install with --no-deps)."""
    global _ml_loaded
    if _ml_loaded is None:
        with _ml_lock:
            if _ml_loaded is None:
                try:
                    import ml_dtypes
                except ImportError:
                    _ml_loaded = False
                else:
                    for name in ML_DTYPES:
                        dt = np.dtype(getattr(ml_dtypes, name))
                        SUPPORTED._table[name] = dt
                        _BY_DTYPE[dt] = name
                    _ml_loaded = True
    return _ml_loaded


def _name_of(dtype: Any) -> str | None:
    """The supported name of the numpy dtype ``dtype``, or None."""
    name = _BY_DTYPE.get(dtype)
    if name is None and getattr(dtype, "name", None) in ML_DTYPES and load_ml_dtypes():
        name = _BY_DTYPE.get(dtype)  # (one of ml_dtypes', met before cuasync used them)
    return name


def as_dtype(dtype: Any, argument: str = "dtype") -> np.dtype[Any]:
    """Normalize ``dtype`` (a name, a numpy type or dtype; None is the default float
    dtype, float32, where numpy's None is float64) or raise :class:`DTypeError`."""
    if dtype is None:
        dtype = DEFAULT_FLOAT
    if isinstance(dtype, str):
        found = SUPPORTED._table.get(dtype)  # (the common case: one dict lookup)
        if found is not None:
            return found
        if dtype in ML_DTYPES and load_ml_dtypes():
            return SUPPORTED._table[dtype]
    if isinstance(dtype, str) and dtype in ML_DTYPES:
        raise DTypeError(
            f"{argument}={dtype!r} needs ml_dtypes, a dependency of cuasync that is not "
            "installed here; install it with 'pip install ml_dtypes'"
        )
    try:
        dt = np.dtype(dtype)
    except TypeError:
        dt = None
    if dt is None or _name_of(dt) is None:
        hint = ""
        if dt is not None and not dt.isnative and _name_of(dt.newbyteorder("=")) is not None:
            native = dt.newbyteorder("=")
            order = "big" if dt.byteorder == ">" else "little"
            hint = (
                f" (it is {_name_of(native)} in {order}-endian byte order; use "
                f"{native.str!r}: array.astype({native.str!r}) converts an array)"
            )
        raise DTypeError(
            f"{argument}={dtype!r} is not a supported dtype; expected one of "
            f"{', '.join(SUPPORTED)}{hint}"
        )
    return dt


def dtype_name(dtype: np.dtype[Any]) -> str:
    name = _BY_DTYPE.get(dtype)
    return name if name is not None else str(dtype)  # (str of a dtype is slow: not eagerly)


def storage_only_message(argument: str, dtype: np.dtype[Any], what: str) -> str:
    """Why ``what`` refuses an FP8 ``argument``, and what to do instead."""
    name = dtype_name(dtype)
    return (
        f"{argument} has dtype {name}, a storage-only dtype: {what} do not compute in FP8; "
        f"convert it first, e.g. {argument}.astype('float32') (or 'bfloat16', 'float16'), "
        f"and back with .astype('{name}')"
    )


def dtype_info(dtype: np.dtype[Any]) -> DType:
    """The table's row for a supported numpy dtype.

    >>> dtype_info(np.dtype("uint8")).storage
    'unsigned char'
    """
    name = _name_of(dtype)
    if name is None:
        raise KeyError(dtype)
    return DTYPES[name]


def default_dtype(value: Any) -> np.dtype[Any]:
    """The dtype a Python scalar picks when none is given: bool, :data:`DEFAULT_INT`,
    :data:`DEFAULT_FLOAT` or :data:`DEFAULT_COMPLEX`; a numpy scalar keeps its own.

    >>> default_dtype(True), default_dtype(7), default_dtype(0.5)
    (dtype('bool'), dtype('int64'), dtype('float32'))
    """
    if isinstance(value, (np.generic, np.ndarray)):
        return as_dtype(value.dtype, "value")
    if isinstance(value, bool):
        return SUPPORTED["bool"]
    if isinstance(value, int):
        return SUPPORTED[DEFAULT_INT]
    if isinstance(value, float):
        return SUPPORTED[DEFAULT_FLOAT]
    if isinstance(value, complex):
        return SUPPORTED[DEFAULT_COMPLEX]
    raise DTypeError(f"value={value!r} has no dtype to pick; pass dtype="[:200])
