"""The built-in kernels' source files and the one dtype table they share with Python.

The CUDA source is package data (``cuasync/kernels``); the tests here need neither a GPU
nor NVRTC (test_builtin_kernels_nvrtc.py compiles every instantiation).
"""

from __future__ import annotations

import hashlib
import re
from importlib import resources
from typing import Any

import numpy as np
import pytest

from cuasync._dtypes import DTYPES, ML_DTYPES, SUPPORTED
from cuasync._launch import builtin as _builtin
from cuasync._launch import guard as _guard
from cuasync._launch import signature as _signature
from cuasync._ops import codegen, reduce_codegen, tiled_gemm
from cuasync._ops import indexing as _indexing
from cuasync._ops import joins as _joins

#: sha256 of the built-in kernels' translation unit. The source is part of every kernel
#: cache key, and the cubins are only checked on a GPU: changing it is deliberate.
SOURCE_SHA256 = "4c55d973bfaa3a074364ec95b01184143ed357f9201b36ebc33034fa0fac3126"


def test_the_source_is_the_one_the_kernels_were_checked_with() -> None:
    digest = hashlib.sha256(_builtin.source().encode()).hexdigest()
    assert digest == SOURCE_SHA256, (
        "the built-in CUDA source changed: run the built-in kernels' tests on a GPU, then "
        "update SOURCE_SHA256 (cached cubins of the old source are no longer used)"
    )


def test_every_kernels_file_is_in_the_translation_unit() -> None:
    shipped = {
        f.name
        for f in resources.files("cuasync.kernels").iterdir()
        if f.name.endswith((".cu", ".cuh"))
    }
    # ... or in the generated elementwise and reduction kernels (cuasync/_ops/), or in
    # take and tril/triu (cuasync/_ops/joins.py), in the indexing family (cuasync/_ops/indexing.py),
    # or in the tiled matrix products (cuasync/_ops/tiled_gemm.py), or a guarded region's
    # kernel (cuasync/_launch/guard.py)
    generated = {
        *_guard.FILES,
        *codegen.PRELUDE_FILES,
        *reduce_codegen.PRELUDE_FILES,
        *_joins.FILES,
        *_indexing.FILES,
        *tiled_gemm.FILES,
    }
    assert shipped == set(_builtin._FILES) | generated
    # NVRTC gets the source alone: a file cannot #include another.
    assert not re.search(r"^\s*#\s*include", _builtin.source(), re.MULTILINE)


def test_every_kernel_uses_the_one_source() -> None:
    kernels = _builtin.builtin_kernels()
    assert {k.source for k in kernels} == {_builtin.source()}
    assert len({k.name for k in kernels}) == len(kernels)


def test_the_dtype_codes_match_the_cuda_source() -> None:
    # cast.cuh lists them in a comment: "//   0 bool  1 int8  2 int16 ..."
    cast = (resources.files("cuasync.kernels") / "cast.cuh").read_text()
    block = cast[cast.index("// dtype codes") :].split("\n\n")[0]
    listed = {name: int(code) for code, name in re.findall(r"(\d+) (\w+)", block)}
    assert listed == {name: d.code for name, d in DTYPES.items()}
    assert [d.code for d in DTYPES.values()] == list(range(len(DTYPES)))


@pytest.mark.parametrize("name", sorted(SUPPORTED))
def test_the_dtype_table_agrees_with_numpy(name: str) -> None:
    d, dt = DTYPES[name], SUPPORTED[name]
    ml = name in ML_DTYPES  # numpy's kind of these is "V" (or "f")
    assert d.kind == ("f" if ml else dt.kind)
    assert d.arithmetic == (name not in ("float8_e4m3fn", "float8_e5m2"))
    if d.kind == "f":
        finfo = np.finfo if not ml else pytest.importorskip("ml_dtypes").finfo
        assert d.significand == finfo(dt).nmant + 1
    else:
        assert d.significand == 0
    # the storage type is one the signature parser knows, of the same size
    assert SUPPORTED[_signature._C_TYPES[d.storage]].itemsize == dt.itemsize
    assert all(_signature._C_TYPES[ctype] == name for ctype in d.ctypes)


def test_fill_has_an_instantiation_per_element_size() -> None:
    sizes = {dt.itemsize for dt in SUPPORTED.values()}
    assert set(_builtin.FILL_DTYPES) == sizes
    for size, name in _builtin.FILL_DTYPES.items():
        assert SUPPORTED[name].itemsize == size


@pytest.mark.parametrize(
    "shape, view",
    [
        ((1024,), None),
        ((32, 32), None),
        ((2, 3, 4, 5, 6), None),  # five dense dimensions: still one chunk
        ((), None),
        ((7, 1, 3), None),
        ((8, 6), (slice(None), slice(0, 4))),  # strided: rows of 4 in rows of 6
        ((2, 3, 4, 5, 6), (slice(None), slice(None), slice(None), slice(0, 3))),
        ((3, 3, 3, 3, 4), (slice(None, None, 2),) * 5),  # five dimensions that do not merge
    ],
)
def test_chunks_cover_every_element_once(shape: tuple[int, ...], view: Any) -> None:
    """What the strided kernels get from ``chunks``: sub-views of at most four merged
    dimensions whose elements, at their ``[s0, s1, s2, s3]`` strides over ``[d1, d2, d3]``,
    are each element of the view exactly once and in order (a dense view is one line)."""
    import cuasync

    base = cuasync.empty(shape).sync()
    t = base if view is None else base[view]
    want = np.arange(base.size).reshape(shape)
    want = want if view is None else want[view]
    got: list[int] = []
    for sub, dims, strides, first in _builtin.chunks(t):
        assert first == len(got) and len(dims) == 3 and len(strides) == 4
        size = sub.size
        for i in range(size):
            rest, index = i, 0
            for d, s in zip([size, *dims][::-1], strides[::-1], strict=True):
                index += (rest % d) * s
                rest //= d
            got.append(sub.offset + index)
    assert got == want.ravel().tolist()
    if t.is_contiguous and t.size:
        assert len(_builtin.chunks(t)) == 1
    if view is not None and len(shape) == 5 and view[0].step:
        assert len(_builtin.chunks(t)) == 2  # (the outer dimension split)
