"""cuasync as an array API namespace (the standard's 2024.12 revision; issue 34): its
version, ``__array_namespace_info__``, the constants and the dtype objects.

Generic array code asks an array for its namespace and calls the standard's functions
there; on cuasync each returns an awaitable op, so the code awaits results:

>>> xp = x.__array_namespace__()               # the cuasync module
>>> y = await xp.sqrt(xp.sum(x * x))
>>> xp.__array_namespace_info__().default_dtypes()["real floating"]
dtype('float32')
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ._core.device import Device, device_count, get_default_device
from ._dtypes import DEFAULT_COMPLEX, DEFAULT_FLOAT, DEFAULT_INT, DTYPES, SUPPORTED
from ._ops.dtype_functions import isdtype
from .errors import ArgumentError

__all__ = [
    "SUPPORTED_VERSIONS",
    "__array_api_version__",
    "__array_namespace_info__",
    "bool",
    "complex64",
    "complex128",
    "e",
    "float16",
    "float32",
    "float64",
    "inf",
    "int8",
    "int16",
    "int32",
    "int64",
    "nan",
    "newaxis",
    "pi",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
]

#: The revision of the array API standard cuasync implements.
__array_api_version__ = "2024.12"
#: The revisions ``__array_namespace__(api_version=...)`` accepts (2024.12 is a
#: superset of 2023.12 for what cuasync implements).
SUPPORTED_VERSIONS = ("2023.12", "2024.12")


def check_api_version(api_version: str | None) -> None:
    """Refuse an ``api_version`` cuasync does not implement (the standard's ValueError:
    :class:`~cuasync.errors.ArgumentError` is one)."""
    if api_version is not None and api_version not in SUPPORTED_VERSIONS:
        raise ArgumentError(
            f"__array_namespace__: api_version={api_version!r} is not supported; cuasync "
            f"implements the array API {', '.join(SUPPORTED_VERSIONS)} (or pass None)"
        )


_KIND_ORDER = (
    "bool",
    "signed integer",
    "unsigned integer",
    "integral",
    "real floating",
    "complex floating",
    "numeric",
)


class Info:
    """What ``cuasync.__array_namespace_info__()`` returns: the namespace's capabilities,
    devices and dtypes, as the array API's inspection functions.

    >>> info = cuasync.__array_namespace_info__()
    >>> info.capabilities()["data-dependent shapes"]
    False
    """

    __slots__ = ()

    def capabilities(self) -> dict[str, Any]:
        """What the namespace supports: no boolean-mask indexing and no functions whose
        output shape depends on data (a lazy op knows its shape when it is built); 64
        dimensions at most.

        >>> cuasync.__array_namespace_info__().capabilities()["boolean indexing"]
        False
        """
        return {"boolean indexing": False, "data-dependent shapes": False, "max dimensions": 64}

    def default_device(self) -> Device:
        """The device new tensors go to (:func:`cuasync.get_default_device`).

        >>> cuasync.__array_namespace_info__().default_device().ordinal
        0
        """
        return get_default_device()

    def devices(self) -> list[Device]:
        """Every device cuasync can use, by ordinal.

        >>> [d.ordinal for d in cuasync.__array_namespace_info__().devices()]
        [0]
        """
        return [Device(i) for i in range(device_count())]

    def default_dtypes(self, *, device: Device | None = None) -> dict[str, np.dtype[Any]]:
        """The dtypes results take when nothing gives them one: float32 for a float
        (cuasync's one default float dtype: ``from_host(0.5)``, ``int / int``, creation
        ops), complex64, and int64 for integers and indices; the same on every device.

        >>> cuasync.__array_namespace_info__().default_dtypes()["real floating"]
        dtype('float32')
        """
        return {
            "real floating": SUPPORTED[DEFAULT_FLOAT],
            "complex floating": SUPPORTED[DEFAULT_COMPLEX],
            "integral": SUPPORTED[DEFAULT_INT],
            "indexing": SUPPORTED["int64"],
        }

    def dtypes(
        self, *, device: Device | None = None, kind: str | tuple[str, ...] | None = None
    ) -> dict[str, np.dtype[Any]]:
        """The dtypes tensors compute in, by name (float16 and bfloat16 too, beyond the
        standard's; not FP8, which is for storage): all, or those of ``kind`` (as
        :func:`cuasync.isdtype` takes it).

        >>> sorted(cuasync.__array_namespace_info__().dtypes(kind="signed integer"))
        ['int16', 'int32', 'int64', 'int8']
        """

        found = {}
        for name, d in DTYPES.items():
            if d.arithmetic and name in SUPPORTED:
                dt = SUPPORTED[name]
                if kind is None or isdtype(dt, kind):
                    found[name] = dt
        return found


def __array_namespace_info__() -> Info:
    """The array API's inspection object of the cuasync namespace.

    >>> cuasync.__array_namespace_info__().default_dtypes()["integral"]
    dtype('int64')
    """
    return Info()


#: Euler's number, the standard's constant (a Python float).
e = math.e
#: pi, the standard's constant (a Python float).
pi = math.pi
#: Positive infinity (a Python float).
inf = math.inf
#: Not a number (a Python float).
nan = math.nan
#: None: ``x[:, newaxis]`` adds an axis of length 1.
newaxis = None

#: The dtype objects: numpy dtypes, as ``Tensor.dtype`` is (``x.dtype == cuasync.int8``).
#: ``cuasync.bfloat16`` (ml_dtypes', imported at first use) comes from ``cuasync.__getattr__``.
bool = SUPPORTED["bool"]
int8 = SUPPORTED["int8"]
int16 = SUPPORTED["int16"]
int32 = SUPPORTED["int32"]
int64 = SUPPORTED["int64"]
uint8 = SUPPORTED["uint8"]
uint16 = SUPPORTED["uint16"]
uint32 = SUPPORTED["uint32"]
uint64 = SUPPORTED["uint64"]
float16 = SUPPORTED["float16"]
float32 = SUPPORTED["float32"]
float64 = SUPPORTED["float64"]
complex64 = SUPPORTED["complex64"]
complex128 = SUPPORTED["complex128"]
