"""Kernel parameters as the CUDA driver takes them: a ``void*[]`` and the slots it points to.

>>> block = ParamBlock(parse_params('__global__ void k(float* x, int n)', "k"))
>>> params = block.pack([x, 256])  # x: a tensor (its .ptr is packed) or an int address
>>> driver.cuLaunchKernel(function, 1, 1, 1, 256, 1, 1, 0, stream, params, 0)
"""

from __future__ import annotations

import ctypes
import struct
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .._dtypes import SUPPORTED, dtype_name
from .._launch.twins import host_cast

if TYPE_CHECKING:
    from .._launch.signature import Param

__all__ = ["ParamBlock", "bfloat16_bits", "fp8_bits"]

#: struct codes of scalar parameters (half types travel as their bit patterns).
_STRUCT: dict[str, str] = {
    "bool": "?",
    "int8": "b",
    "uint8": "B",
    "int16": "h",
    "uint16": "H",
    "int32": "i",
    "uint32": "I",
    "int64": "q",
    "uint64": "Q",
    "float32": "f",
    "float64": "d",
    "float16": "e",
    "bfloat16": "H",
    "complex64": "ff",
    "complex128": "dd",
    "float8_e4m3fn": "B",
    "float8_e5m2": "B",
}


def bfloat16_bits(value: float) -> int:
    """The bits of ``value`` as a bfloat16, rounded once to nearest even (as ml_dtypes 0.7
    and cuasync's CUDA code do); a NaN becomes the quiet NaN.

    >>> hex(bfloat16_bits(1.0))
    '0x3f80'
    """
    return _narrow_bits(value, "bfloat16")


def fp8_bits(value: float, name: str) -> int:
    """The bits of ``value`` as the FP8 dtype ``name`` (``"float8_e4m3fn"`` or
    ``"float8_e5m2"``), rounded once to nearest even, as ml_dtypes 0.7 (and cuasync's CUDA
    code) convert; float8_e4m3fn makes an overflow NaN.

    >>> hex(fp8_bits(1.0, "float8_e4m3fn")), hex(fp8_bits(1.0, "float8_e5m2"))
    ('0x38', '0x3c')
    """
    return _narrow_bits(value, name)


def _narrow_bits(value: float, name: str) -> int:
    import numpy as np

    dt = SUPPORTED[name]
    narrow = host_cast(np.array([value], np.float64), dt)
    return int(narrow.view(f"u{dt.itemsize}")[0])


#: Scalar parameter dtypes that arrive as floats and travel as their bits.
_BITS = {
    "bfloat16": bfloat16_bits,
    "float8_e4m3fn": lambda v: fp8_bits(v, "float8_e4m3fn"),
    "float8_e5m2": lambda v: fp8_bits(v, "float8_e5m2"),
}


#: struct codes the native module packs itself (``_reactor.launch_packed``); "Q" is a
#: pointer ("P" there: an int address or an object with ``.ptr``).
_NATIVE_CODES = frozenset("?bBhHiIqQfd")
#: Limits of ``launch_packed``: parameters, and bytes of the block they are packed into.
_LAYOUT_COUNT_MAX = 256
_LAYOUT_BYTES_MAX = 4096


def _layout(codes: Sequence[str], pointers: Sequence[int]) -> bytes | None:
    """The ``launch_packed`` layout of parameters with these struct codes: per parameter,
    its code and its 16-byte-aligned offset; None where the native module cannot pack
    one of them (half types, complex values, an unknown type) or they do not fit.
    ``pointers``: the positions of pointer parameters (code "P").

    >>> _layout(["Q", "i"], [0])[8:9], _layout(["e"], [])
    (b'i', None)
    """
    records = []
    offset = 0
    for i, code in enumerate(codes):
        native = "P" if i in pointers else code
        if native not in _NATIVE_CODES and native != "P":
            return None
        offset = -(-offset // 16) * 16
        records.append(struct.pack("<c3xI", native.encode(), offset))
        offset += struct.calcsize("<" + code)
    if offset > _LAYOUT_BYTES_MAX:
        return None
    return b"".join(records)


class ParamBlock:
    """The ``void*[]`` of a kernel's launches and the argument slots it points to.

    One buffer per prepared kernel: the pointer array at its start (written once) and a
    16-byte-aligned slot per parameter after it. A launch packs its values into the
    slots with one ``struct.pack_into``; ``cuLaunchKernel`` copies them before it
    returns (graph capture copies them too), and launches are enqueued under the
    execution lock, so the buffer is reused by every launch.
    """

    def __init__(self, params: Sequence[Param]) -> None:
        n = len(params)
        codes: list[str] = []
        offsets: list[int] = []
        fmt = "<"
        pos = 8 * n
        start = pos
        for p in params:
            code = (
                "Q"
                if p.pointer
                else _STRUCT.get(dtype_name(p.dtype), "")
                if p.dtype is not None
                else ""
            )
            aligned = -(-pos // 16) * 16
            if aligned > pos:
                fmt += f"{aligned - pos}x"
            fmt += code or "8x"
            offsets.append(aligned)
            codes.append(code)
            pos = aligned + (struct.calcsize("<" + code) if code else 8)
        self.fmt = fmt
        self.start = start
        self.pointers = tuple(i for i, p in enumerate(params) if p.pointer)
        self.complex = {i for i, c in enumerate(codes) if len(c) == 2}
        # bfloat16 and FP8 values arrive as floats and travel as their bits
        self.bits = {
            i: _BITS[dtype_name(p.dtype)]
            for i, p in enumerate(params)
            if not p.pointer and p.dtype is not None and dtype_name(p.dtype) in _BITS
        }
        #: The parameters' layout for ``_reactor.launch_packed``, or None where values
        #: need converting in Python first (complex, bfloat16, FP8) or _layout says so.
        self.layout = (
            None
            if self.complex or self.bits or n > _LAYOUT_COUNT_MAX
            else _layout(codes, self.pointers)
        )
        self.buffer = ctypes.create_string_buffer(max(pos, 8))
        self.address = ctypes.addressof(self.buffer)
        struct.pack_into(f"<{n}Q", self.buffer, 0, *(self.address + o for o in offsets))

    def pack(self, args: Sequence[Any]) -> int:
        """Write ``args`` into the slots; returns the address of the pointer array.

        A pointer argument is an int address or has one as ``.ptr`` (a DeviceArray).
        """
        values = list(args)
        for i in self.pointers:
            a = values[i]
            if not isinstance(a, int):
                values[i] = a.ptr
        if self.complex or self.bits:
            flat: list[Any] = []
            for i, v in enumerate(values):
                if i in self.complex:
                    flat += (v.real, v.imag)
                elif i in self.bits:
                    flat.append(self.bits[i](v))
                else:
                    flat.append(v)
            values = flat
        struct.pack_into(self.fmt, self.buffer, self.start, *values)
        return self.address
