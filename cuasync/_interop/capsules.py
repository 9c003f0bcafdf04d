"""DLPack capsules made and read: the four primitives :mod:`.dlpack` builds on.

:func:`pack` makes a capsule viewing CUDA memory, :func:`unpack` reads a producer's,
:func:`take` marks one consumed and :func:`delete` calls a consumed tensor's deleter.
The native module does each in one C call (``reactor/python/dlpack.c``). Nothing here checks
what a capsule says: :mod:`.dlpack` does, and words the errors.

>>> capsule = pack(release, alloc, ptr, 0, (4,), (1,), 2, 32, 0, True)
>>> unpack(capsule)[5] == ptr
True
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

from .._native import NATIVE

__all__ = ["Fields", "delete", "name_of", "pack", "take", "unpack"]

#: What :func:`unpack` returns: ``(address, versioned, major, minor, flags, data,
#: device_type, device_id, ndim, shape, strides, code, bits, lanes, has_deleter,
#: nbytes)``; ``data`` includes the byte offset, ``shape`` is None where the capsule has
#: none to read (ndim out of 0..64, a NULL array), ``strides`` None where NULL
#: (compact), ``nbytes`` the bytes the layout spans from ``data`` where the common checks
#: of :func:`.foreign.foreign_extent` pass, else -1: the caller checks it then.
Fields = tuple[
    int, bool, int, int, int, int, int, int, int,
    "tuple[int, ...] | None", "tuple[int, ...] | None", int, int, int, bool, int,
]  # fmt: skip

_api = ctypes.pythonapi
_api.PyCapsule_GetName.restype = ctypes.c_char_p
_api.PyCapsule_GetName.argtypes = [ctypes.py_object]


def name_of(capsule: Any) -> bytes | None:
    """The capsule's name (None for another object): for wording what it is."""
    if type(capsule).__name__ != "PyCapsule":
        return None
    name: bytes | None = _api.PyCapsule_GetName(capsule)
    return name


#: ``pack(release, arg, data, device_id, shape, strides, code, bits, flags, versioned)``:
#: a capsule of CUDA memory at ``data``; ``release(arg)`` is called once when it is
#: released (a function and its argument: no bound method or closure made per capsule).
pack: Callable[..., Any] = NATIVE.dlpack_pack
#: ``unpack(capsule)``: the capsule's :data:`Fields`, or None if it is no unconsumed one.
unpack: Callable[[Any], Fields | None] = NATIVE.dlpack_unpack
#: ``take(capsule, versioned)``: the capsule is consumed (renamed ``used_...``).
take: Callable[[Any, bool], None] = NATIVE.dlpack_take
#: ``delete(address, versioned)``: the deleter of a consumed managed tensor, called.
delete: Callable[[int, bool], None] = NATIVE.dlpack_delete
