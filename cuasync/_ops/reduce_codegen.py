"""Reduction kernels: a fused elementwise expression feeding a block-level tree reduction.

The input (an expression plan over tensors broadcast to one shape) is seen as ``M``
output rows of ``K`` reduced elements: the kept axes first, then the reduced axes in
their logical order (so an argmax index is numpy's), each group merged where the
layout allows. One generated ``__global__`` has up to three layouts and two phases:

* ``mode 0`` (rows): a block per (row, split) strides over the row's elements, eight
  loads in flight per thread, and combines with warp shuffles and shared memory;
* ``mode 1`` (columns, when the kept axis is the contiguous one, or rows of at most
  32 elements): a block is 32 rows (consecutive threads: a warp's loads are
  coalesced) by 8 groups of threads, each group a part of the split ``blockIdx.y``
  of the reduced elements, combined in shared memory (so a split holds 8 times the
  rows, and a first-axis reduction of (8192, 8192) has 8 partials a column, not 64);
* ``mode 2`` (a whole contiguous array of one operand, 16-byte aligned: the kernels
  of no kept and one reduced dimension, :func:`row_vector_width`): mode 0 with each
  thread's loads 16-byte vectors, four in flight;
* ``phase 1`` combines the per-split partials (a second launch, only when a row was
  split across blocks) and stores the result.

float32 sum/mean/prod/max/min of one tensor have two more kernels, templates of
``reduce.cuh`` around an ``Op`` struct (:func:`float4_kernel`), each one launch: the
first axis with contiguous columns (``ca_cols4``: float4 across 128 columns a block, the
rows in splits, the last block of a column strip combining the partials) and max/min of
a whole aligned array (``ca_whole4``: 8 float4 loads in flight, 8 blocks an SM).

>>> k = kernel_for(plan, ReduceSpec("sum", "float32", "float32"), nk=1, nr=1)
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Sequence
from importlib import resources
from typing import Any, NamedTuple

import numpy as np

from .._dtypes import DTYPES, SUPPORTED
from .._launch.kernel import Kernel
from .codegen import (
    _WEAK_C,
    CANCEL_CHECK,
    CANCEL_WORD,
    Plan,
    _emit,
    _evaluate,
    _leaves,
    _prelude,
    ctype,
    rounded,
)

#: Ops whose result carries the index of an element instead of a value.
ARG_OPS = frozenset({"argmax", "argmin"})


class ReduceSpec(NamedTuple):
    """What a reduction computes: ``op``, the dtype it accumulates in, the result dtype.

    ``op`` is one of sum, prod, max, min, mean, argmax, argmin, or norm (the square
    root of the sum of squares). A named tuple: hashed and compared in C, as it is on
    every launch of a seen reduction (part of its plan's key).
    """

    op: str
    acc: str
    out: str


def _inf(acc: str, negative: bool) -> str:
    """-inf or inf of a float (or a complex part) in C."""
    if acc in ("float64", "complex128"):
        bits = "0xfff0000000000000LL" if negative else "0x7ff0000000000000LL"
        return f"__longlong_as_double({bits})"
    return f"__int_as_float({'0xff800000' if negative else '0x7f800000'})"


def _ident(op: str, acc: str) -> str:
    d, c = DTYPES[acc], ctype(acc)
    low = op in ("max", "argmax")
    if d.kind == "c":  # (0, 0), (1, 0), or (-inf, -inf) / (inf, inf): below / above all
        make = "make_float2" if acc == "complex64" else "make_double2"
        if op in ("sum", "mean"):
            return f"{make}(0, 0)"
        if op == "prod":
            return f"{make}(1, 0)"
        inf = _inf(acc, low)
        return f"{make}({inf}, {inf})"
    if op in ("sum", "mean", "norm"):
        return f"(({c})0)"
    if op == "prod":
        return f"(({c})1)"
    if d.kind == "b":
        return "false" if low else "true"
    if d.kind == "f":
        return _inf(acc, low)
    info = np.iinfo(acc)
    if low:
        return "(-9223372036854775807LL - 1)" if acc == "int64" else f"(({c})({info.min}LL))"
    return f"(({c})({info.max}ULL))"


def _combine(op: str, acc: str) -> str:
    """The body of ``combine(a, b)``, returning a ``ca_acc``."""
    kind, c = DTYPES[acc].kind, ctype(acc)
    if kind == "c":
        return _combine_complex(op)
    if op in ("sum", "mean", "norm", "prod"):
        sym = "*" if op == "prod" else "+"
        if kind == "b":
            v = f"a.v {'&&' if op == 'prod' else '||'} b.v"
        elif kind in "iu":  # wrap around as numpy does (signed overflow is UB in C++)
            v = f"({c})((ca_u64)a.v {sym} (ca_u64)b.v)"
        else:
            v = f"a.v {sym} b.v"
        return f"ca_acc r; r.v = {v}; r.i = 0; return r;"
    if op in ("max", "min"):
        sym = ">=" if op == "max" else "<="
        nan = " || a.v != a.v" if kind == "f" else ""  # NaN propagates, as numpy's
        return f"return (a.v {sym} b.v{nan}) ? a : b;"
    sym = ">" if op == "argmax" else "<"
    body = ""
    if kind == "f":  # the first NaN wins, as numpy's
        body = (
            "bool an = a.v != a.v, bn = b.v != b.v; "
            "if (an || bn) return (an && (!bn || a.i < b.i)) ? a : b; "
        )
    return body + f"return (a.v {sym} b.v || (a.v == b.v && a.i < b.i)) ? a : b;"


def _combine_complex(op: str) -> str:
    """``combine`` of complex accumulators. max, min, argmax and argmin order complex
    numbers as numpy does: by real part, then imaginary part; a NaN in either part wins
    (the first one, for the arg ops)."""
    if op in ("sum", "mean", "prod"):
        fn = "ca_cmul" if op == "prod" else "ca_cadd"
        return f"ca_acc r; r.v = {fn}(a.v, b.v); r.i = 0; return r;"
    nan = "bool an = ca_cnan(a.v), bn = ca_cnan(b.v); "
    if op in ("max", "min"):
        sym = ">" if op == "max" else "<"
        return (
            nan + "if (an || bn) return an ? a : b; "
            f"return (a.v.x {sym} b.v.x || (a.v.x == b.v.x && a.v.y {sym}= b.v.y)) ? a : b;"
        )
    sym = ">" if op == "argmax" else "<"
    return (
        nan + "if (an || bn) return (an && (!bn || a.i < b.i)) ? a : b; "
        f"bool first = a.v.x {sym} b.v.x || (a.v.x == b.v.x && a.v.y {sym} b.v.y); "
        "bool tie = a.v.x == b.v.x && a.v.y == b.v.y; "
        "return (first || (tie && a.i < b.i)) ? a : b;"
    )


#: Elements each thread loads before combining them: independent loads in flight are
#: what keeps HBM busy.
UNROLL = 8


#: Vectors of 16 bytes each thread of ``mode 2`` loads before combining them.
VECTORS = 4


def row_vector_width(plan: Plan, nk: int, nr: int) -> int:
    """Elements of one 16-byte load in ``mode 2`` (a whole array read in vectors) of
    ``plan`` with ``nk`` kept and ``nr`` reduced merged dimensions; 0 where it has no
    ``mode 2``: an expression of several operands, kept or several reduced dimensions
    (the code would cost every layout's kernel registers: a first-axis max's 32 became
    40, 6 blocks an SM instead of 8).

    >>> row_vector_width(("x", 0, "float32"), 0, 1)
    4
    """
    if plan[0] != "x" or nk != 0 or nr != 1:
        return 0
    return max(1, 16 // SUPPORTED[plan[2]].itemsize)


def _tree(names: list[str]) -> str:
    """``comb`` over ``names`` as a balanced tree (no chain of dependent combines)."""
    if len(names) == 1:
        return names[0]
    half = len(names) // 2
    return f"comb({_tree(names[:half])}, {_tree(names[half:])})"


def _final(spec: ReduceSpec) -> str:
    """The value stored for an accumulator ``a`` (``K`` reduced elements)."""
    kind = DTYPES[spec.acc].kind
    if spec.op in ARG_OPS:
        value = "a.i"
    elif spec.op == "mean" and kind == "c":
        value = "ca_cdivr(a.v, K)"
    elif spec.op == "mean":
        value = f"a.v / ({ctype(spec.acc)})K" if kind == "f" else "(double)a.v / (double)K"
    elif spec.op == "norm":
        value = f"sqrt{'' if spec.acc == 'float64' else 'f'}(a.v)"
    else:
        value = "a.v"
    return rounded(spec.out, value)  # (bfloat16: once, from the float32 accumulator)


def _plan_dtype(plan: Plan) -> str:
    """The dtype of the value a plan computes (a leaf's, or its root op's)."""
    return str(plan[2] if plan[0] in ("x", "s") else plan[3])


def _element(plan: Plan, spec: ReduceSpec, result: str) -> str:
    """The statements setting ``e.v`` from an element's value ``result``."""
    acc, value = spec.acc, _plan_dtype(plan)
    if spec.op == "norm" and DTYPES.get(value) is not None and DTYPES[value].kind == "c":
        return f"e.v = ca_abs2({result});"  # |x|^2, real
    if DTYPES[acc].kind == "c":
        return f"e.v = {'ca_to_c64' if acc == 'complex64' else 'ca_to_c128'}({result});"
    square = " e.v = e.v * e.v;" if spec.op == "norm" else ""
    return f"e.v = ({ctype(acc)})({result});{square}"


def source(plan: Plan, spec: ReduceSpec, nk: int, nr: int) -> str:
    """The CUDA C++ of ``ca_reduce``: ``nk`` kept and ``nr`` reduced (merged) dimensions."""
    return "\n".join([prelude(), body(plan, spec, nk, nr)])


def body(plan: Plan, spec: ReduceSpec, nk: int, nr: int) -> str:
    """:func:`source` without the shared :func:`prelude` (so that a test can compile many
    in one translation unit, each in a namespace of its own)."""
    found: dict[str, dict[int, str]] = {"x": {}, "s": {}}
    _leaves(plan, found)
    xs, ss = sorted(found["x"]), sorted(found["s"].items())
    acc = ctype(spec.acc)
    arg = spec.op in ARG_OPS
    params = [f"{DTYPES[spec.out].storage}* out", f"{acc}* wsv"]
    params += ["long long* wsi"] if arg else []
    params += [f"const {DTYPES[found['x'][k]].storage}* x{k}" for k in xs]
    params += [f"{_WEAK_C.get(s) or ctype(s)} s{k}" for k, s in ss]
    params += ["long long M", "long long K", "long long splits", "long long chunk"]
    params += ["int phase", "int mode"]
    params += [f"long long da{j}" for j in range(nk)] + [f"long long db{j}" for j in range(nr)]
    params += [f"long long os{j}" for j in range(nk)]
    for k in xs:
        params += [f"long long x{k}a{j}" for j in range(nk)]
        params += [f"long long x{k}b{j}" for j in range(nr)]
    qs = [f"q{k}" for k in xs]
    q_refs = ", ".join(f"long long& {q}" for q in qs)
    q_args = ", ".join(qs)
    qa = ", " + q_args if qs else ""
    q_decl = "".join(f", long long {q}" for q in qs)

    rows = [f"        long long r = m, c; po = 0; {' '.join(f'{q} = 0;' for q in qs)}"]
    for j in reversed(range(nk)):
        step = f"c = r % da{j}; r /= da{j};" if j else "c = r;"
        adds = " ".join([f"po += c * os{j};", *(f"q{k} += c * x{k}a{j};" for k in xs)])
        rows.append(f"        {step} {adds}")
    elem = [
        f"        long long r = k, c; {' '.join(f'long long p{k} = q{k};' for k in xs)}",
    ]
    for j in reversed(range(nr)):
        step = f"c = r % db{j}; r /= db{j};" if j else "c = r;"
        elem.append(f"        {step} {' '.join(f'p{k} += c * x{k}b{j};' for k in xs)}")
    lines: list[str] = []
    result = _emit(plan, lines, [0])
    wsi_load = "wsi[w]" if arg else "0"
    index = "k" if arg else "0"
    vector_pick = f"mode == 2 ? vspan(lo, hi{qa}) : " if row_vector_width(plan, nk, nr) else ""
    wsi_store = " wsi[w] = a.i;" if arg else ""
    return "\n".join(
        [
            f"struct ca_acc {{ {acc} v; long long i; }};",
            "struct ca_combine {",
            "    __device__ __forceinline__ ca_acc operator()(ca_acc a, ca_acc b) const {",
            f"        {_combine(spec.op, spec.acc)}",
            "    }",
            "};",
            f"__global__ void ca_reduce({', '.join([*params, CANCEL_WORD])}) {{",
            CANCEL_CHECK,
            "    const ca_combine comb;",
            f"    ca_acc ident; ident.v = {_ident(spec.op, spec.acc)}; "
            "ident.i = 9223372036854775807LL;",
            f"    auto rows = [&](long long m, long long& po{', ' if qs else ''}{q_refs}) {{",
            *rows,
            "    };",
            f"    auto elem = [&](long long k{', ' if qs else ''}"
            f"{', '.join(f'long long {q}' for q in qs)}) -> ca_acc {{",
            *elem,
            *lines,
            # (only the arg ops carry an index: a constant 0 costs no registers)
            f"        ca_acc e; {_element(plan, spec, result)} e.i = {index}; return e;",
            "    };",
            f"    auto store = [&](long long po, ca_acc a) {{ out[po] = {_final(spec)}; }};",
            f"    auto keep = [&](long long w, ca_acc a) {{ wsv[w] = a.v;{wsi_store} }};",
            f"    long long po{qa};",
            f"    auto span = [&](long long k, long long st, long long hi{q_decl}) -> ca_acc {{",
            "        ca_acc a = ident;",
            f"        for (; k + {UNROLL - 1} * st < hi; k += {UNROLL} * st) {{",
            *(f"            ca_acc e{u} = elem(k + {u} * st{qa});" for u in range(UNROLL)),
            f"            a = comb(a, {_tree([f'e{u}' for u in range(UNROLL)])});",
            "        }",
            f"        for (; k < hi; k += st) a = comb(a, elem(k{qa}));",
            "        return a;",
            "    };",
            "    const long long bs = blockDim.x, tid = threadIdx.x;",
            *_vector_span(plan, spec, nk, nr, qa),
            "    if (mode == 1) {",
            "        // a block is cols rows (tid % cols: consecutive threads, coalesced loads",
            "        // where the kept axis is the contiguous one) by groups, each a part of",
            "        // the split blockIdx.y (phase 0) or of the partials (phase 1).",
            "        const long long cols = bs < 32 ? bs : 32, groups = bs / cols;",
            "        const long long tx = tid % cols, ty = tid / cols;",
            "        const long long sub = (chunk + groups - 1) / groups;",
            "        const long long top = ca_min_ll(K, (blockIdx.y + 1) * chunk);",
            "        for (long long base = blockIdx.x * cols; base < M;"
            " base += (long long)gridDim.x * cols) {",
            "            const long long m = base + tx;",
            "            ca_acc a = ident;",
            "            if (m < M) {",
            f"                rows(m, po{qa});",
            "                if (phase) {",
            "                    for (long long s = ty; s < splits; s += groups) {",
            f"                        long long w = s * M + m; ca_acc b; b.v = wsv[w];"
            f" b.i = {wsi_load}; a = comb(a, b);",
            "                    }",
            "                } else {",
            "                    long long lo = blockIdx.y * chunk + ty * sub;",
            f"                    a = span(lo, 1, ca_min_ll(top, lo + sub){qa});",
            "                }",
            "            }",
            "            a = ca_group_reduce(a, comb, (int)cols, (int)groups);",
            "            if (ty != 0 || m >= M) continue;",
            "            if (!phase && splits > 1) keep(blockIdx.y * M + m, a);",
            "            else store(po, a);",
            "        }",
            "        return;",
            "    }",
            "    // mode 0: a block per (row, split), or per row in phase 1 (its partials);",
            "    // mode 2: the same, each thread's loads 16-byte vectors of the row",
            "    const long long items = phase ? M : M * splits;",
            "    for (long long it = blockIdx.x; it < items; it += gridDim.x) {",
            "        long long m = phase ? it : it / splits;",
            "        long long sp = it - m * splits;",
            f"        rows(m, po{qa});",
            "        ca_acc a = ident;",
            "        if (phase) {  // (UNROLL partials in flight a thread)",
            "            const long long w0 = m * splits;",
            "            long long s = tid;",
            f"            for (; s + {UNROLL - 1} * bs < splits; s += {UNROLL} * bs) {{",
            *(
                f"                ca_acc b{u}; b{u}.v = wsv[w0 + s + {u} * bs];"
                f" b{u}.i = {wsi_load.replace('[w]', f'[w0 + s + {u} * bs]')};"
                for u in range(UNROLL)
            ),
            f"                a = comb(a, {_tree([f'b{u}' for u in range(UNROLL)])});",
            "            }",
            "            for (; s < splits; s += bs) {",
            "                long long w = w0 + s;",
            f"                ca_acc b; b.v = wsv[w]; b.i = {wsi_load}; a = comb(a, b);",
            "            }",
            "        } else {",
            "            long long lo = sp * chunk, hi = ca_min_ll(K, lo + chunk);",
            f"            a = {vector_pick}span(lo + tid, bs, hi{qa});",
            "        }",
            "        a = ca_block_reduce(a, ident, comb);",
            "        if (tid != 0) continue;",
            "        if (!phase && splits > 1) keep(it, a);",
            "        else store(po, a);",
            "    }",
            "}",
        ]
    )


def _vector_span(plan: Plan, spec: ReduceSpec, nk: int, nr: int, qa: str) -> list[str]:
    """``vspan(lo, hi, q0)`` of ``mode 2``: the elements ``lo`` to ``hi`` of a row
    starting at element ``q0`` of ``x0`` (contiguous, ``lo`` and ``x0 + q0`` aligned to
    a vector), ``VECTORS`` vectors a block apart in flight per thread, then the elements
    past the last whole vector one a thread; none where the plan has no ``mode 2``."""
    width = row_vector_width(plan, nk, nr)
    if not width:
        return []
    vec = f"ca_vec<{DTYPES[plan[2]].storage}, {width}>"
    lines: list[str] = []
    value = _emit(plan, lines, [0], lambda k: "w.v[u]")
    ws = [f"w{u}" for u in range(VECTORS)]
    picks = [f"lanes(w{u}, k + {u} * st)" for u in range(VECTORS)]
    return [
        f"    auto lanes = [&](const {vec}& w, long long k) -> ca_acc {{",
        "        ca_acc a = ident;",
        "        #pragma unroll",
        f"        for (int u = 0; u < {width}; u++) {{",
        *(f"    {line}" for line in lines),
        f"            ca_acc e; {_element(plan, spec, value)}"
        f" e.i = {'k + u' if spec.op in ARG_OPS else '0'}; a = comb(a, e);",
        "        }",
        "        return a;",
        "    };",
        "    auto vspan = [&](long long lo, long long hi, long long q0) -> ca_acc {",
        f"        const {vec}* row = (const {vec}*)(x0 + q0);",
        f"        const long long st = bs * {width};",
        f"        long long k = lo + tid * {width};",
        "        ca_acc a = ident;",
        f"        for (; k + {VECTORS - 1} * st + {width} <= hi; k += {VECTORS} * st) {{",
        *(
            f"            const {vec} {w} = row[(k + {u} * st) / {width}];"
            for u, w in enumerate(ws)
        ),
        f"            a = comb(a, {_tree(picks)});",
        "        }",
        f"        for (; k + {width} <= hi; k += st) a = comb(a, lanes(row[k / {width}], k));",
        f"        long long t = lo + (hi - lo) / {width} * {width} + tid;",
        f"        if (t < hi) a = comb(a, elem(t{qa}));",
        "        return a;",
        "    };",
    ]


#: The file of ``cuasync/kernels`` each reduction kernel has after the elementwise prelude.
PRELUDE_FILES = ("reduce.cuh",)


@functools.cache
def prelude() -> str:
    """The shared code every reduction kernel starts with."""
    files = resources.files("cuasync.kernels")
    own = [(files / name).read_text(encoding="utf-8") for name in PRELUDE_FILES]
    return "\n".join([_prelude(), *own])


# -- the numpy twin -----------------------------------------------------------------------
_NP_REDUCE = {
    "sum": np.add,
    "mean": np.add,
    "norm": np.add,
    "prod": np.multiply,
    "max": np.maximum,
    "min": np.minimum,
}


def _part(op: str, block: np.ndarray, first: int) -> tuple[np.ndarray, np.ndarray]:
    """Per row of ``block``: the accumulator value and (arg ops) the element's index."""
    if op in ARG_OPS:
        idx = (np.argmax if op == "argmax" else np.argmin)(block, axis=1)
        return block[np.arange(block.shape[0]), idx], idx + first
    return _NP_REDUCE[op].reduce(block, axis=1, dtype=block.dtype), np.zeros(len(block), np.int64)


def _finish(spec: ReduceSpec, v: np.ndarray, i: np.ndarray, k: int) -> np.ndarray:
    if spec.op in ARG_OPS:
        return i.astype(np.int64)
    if spec.op == "mean" and v.dtype.kind == "c":  # both parts divided, as the kernel does
        part = v.real.dtype.type(k)
        mean = np.empty(v.shape, v.dtype)
        mean.real, mean.imag = v.real / part, v.imag / part
        return mean.astype(spec.out)
    if spec.op == "mean":
        v = v / v.dtype.type(k) if v.dtype.kind == "f" else v.astype(np.float64) / k
    elif spec.op == "norm":
        v = np.sqrt(v)
    return v.astype(spec.out)


def _extent(dims: Sequence[int], strides: Sequence[int]) -> tuple[int, int]:
    """The elements a view of ``dims`` and ``strides`` (elements, from its first) reaches:
    how far below and above its first element (a view inside another reaches neither
    further below nor further above)."""
    low = sum(s * (d - 1) for d, s in zip(dims, strides, strict=True) if s < 0)
    high = sum(s * (d - 1) for d, s in zip(dims, strides, strict=True) if s > 0)
    return -low, high


def twin(plan: Plan, spec: ReduceSpec, nk: int, nr: int) -> Callable[..., None]:
    """The numpy function the emulator runs for ``ca_reduce`` of ``plan`` and ``spec`` over
    ``nk`` kept and ``nr`` reduced dims. As the kernel does, it reads each operand and
    writes the output through the dims and strides it is passed (from the pointer: the
    array's own shape is not the kernel's view)."""
    found: dict[str, dict[int, str]] = {"x": {}, "s": {}}
    _leaves(plan, found)
    xdt = [np.dtype(dt) for _, dt in sorted(found["x"].items())]
    specs = [s for _, s in sorted(found["s"].items())]
    acc, arg = np.dtype(spec.acc), spec.op in ARG_OPS
    nd = nk + nr

    def viewed(a: np.ndarray, dims: list[int], strides: list[int]) -> np.ndarray:
        """``a`` (a tensor's elements) seen through ``dims`` and ``strides`` (elements), a
        view that must stay inside them: the emulator resolved ``a`` to the tensor's
        own memory, which ``as_strided`` does not check."""
        low, high = _extent(dims, strides)
        own_low, own_high = _extent(a.shape, [s // a.itemsize for s in a.strides])
        if all(dims) and (low > own_low or high > own_high):
            raise IndexError(
                f"ca_reduce reads past its operand: dims {dims}, strides {strides} of an "
                f"array of shape {a.shape}, strides {a.strides}"
            )
        size = a.itemsize
        return np.lib.stride_tricks.as_strided(
            a, dims, [st * size for st in strides], writeable=True
        )

    def run(out_array: np.ndarray, wsv: Any, *args: Any) -> None:
        wsi, args = (args[0], args[1:]) if arg else (None, args)
        nx, ns = len(xdt), len(specs)
        geometry = [int(a) for a in args[nx + ns + 6 :]]
        dims, strides = geometry[:nd], geometry[nd + nk :]
        kept = dims[:nk]
        out = viewed(out_array.view(np.dtype(spec.out)), kept, geometry[nd : nd + nk])
        xs = [
            viewed(a.view(dt), dims, strides[i * nd : (i + 1) * nd])
            for i, (a, dt) in enumerate(zip(args[:nx], xdt, strict=True))
        ]
        ss = [
            {"bool": bool, "int": int, "float": float}[s](a.item())
            if s in _WEAK_C
            else np.dtype(s).type(a)
            for a, s in zip(args[nx : nx + ns], specs, strict=True)
        ]
        m, k, splits, chunk, phase, mode = (int(a) for a in args[nx + ns :][:6])
        with np.errstate(all="ignore"):
            if phase == 1:
                shape = (m, splits) if mode != 1 else (splits, m)
                v = wsv.reshape(shape)
                i = wsi.reshape(shape) if wsi is not None else np.zeros(shape, np.int64)
                v, i = (v, i) if mode != 1 else (v.T, i.T)
                if arg:  # each partial is the first best of its split, in order
                    pick = (np.argmax if spec.op == "argmax" else np.argmin)(v, axis=1)
                    best, idx = v[np.arange(m), pick], i[np.arange(m), pick]
                else:
                    best, idx = _part(spec.op, v, 0)
                out[...] = _finish(spec, best, idx, k).reshape(kept)
                return
            value = np.asarray(np.broadcast_to(_evaluate(plan, xs, ss), dims))
            value = value.reshape(m, k)
            if spec.op == "norm" and value.dtype.kind == "c":  # |x|^2, real
                re, im = value.real.astype(acc), value.imag.astype(acc)
                v2 = re * re + im * im
            else:
                v2 = value.astype(acc)
                if spec.op == "norm":
                    v2 = v2 * v2
            if splits == 1:
                v, i = _part(spec.op, v2, 0)
                out[...] = _finish(spec, v, i, k).reshape(kept)
                return
            parts = [
                _part(spec.op, v2[:, s * chunk : (s + 1) * chunk], s * chunk) for s in range(splits)
            ]
            vs = np.stack([p[0] for p in parts], axis=1)
            ids = np.stack([p[1] for p in parts], axis=1)
            if mode == 1:
                vs, ids = vs.T, ids.T
            wsv.view(acc)[...] = vs.reshape(-1)
            if wsi is not None:
                wsi[...] = ids.reshape(-1)

    return run


# -- float32 read in float4: the first axis (ca_cols4) and whole arrays (ca_whole4) ------
#: The ops of :func:`float4_kernel`, and the C++ of their ``Op`` struct's functions
#: (ident, comb, fin); max and min keep the first NaN and the first of equal values,
#: as :func:`_combine`'s.
FLOAT4_OPS = {
    "sum": ("0.0f", "a + b", "a"),
    "mean": ("0.0f", "a + b", "a / (float)K"),
    "prod": ("1.0f", "a * b", "a"),
    "max": (_inf("float32", True), "(a >= b || a != a) ? a : b", "a"),
    "min": (_inf("float32", False), "(a <= b || a != a) ? a : b", "a"),
}
#: float4 loads in flight a thread of ``ca_whole4``.
WHOLE_LOADS = 8


def float4_source(op: str) -> str:
    """The CUDA C++ of ``ca_cols4<ca_op4>`` and ``ca_whole4<ca_op4, L>`` for ``op``."""
    return "\n".join([prelude(), op4_struct(op)])


def op4_struct(op: str) -> str:
    """``struct ca_op4`` of ``op``: the ``Op`` of ``ca_cols4`` and ``ca_whole4``.

    >>> "a + b" in op4_struct("sum")
    True
    """
    ident, comb, fin = FLOAT4_OPS[op]
    return "\n".join(
        [
            "struct ca_op4 {",
            f"    static __device__ __forceinline__ float ident() {{ return {ident}; }}",
            "    static __device__ __forceinline__ float comb(float a, float b) {",
            f"        return {comb};",
            "    }",
            "    static __device__ __forceinline__ float fin(float a, long long K) {",
            f"        return {fin};",
            "    }",
            "};",
        ]
    )


def _float4_twin(op: str, whole: bool) -> Callable[..., None]:
    """The numpy function the emulator runs for ``ca_cols4`` (``whole``: ``ca_whole4``)
    of ``op``: partials of each split, combined in split order."""
    ufunc = _NP_REDUCE[op]

    def run(out: np.ndarray, part: Any, count: Any, x: np.ndarray, *args: Any) -> None:
        with np.errstate(all="ignore"):
            if whole:
                v = ufunc.reduce(x.reshape(-1), dtype=np.float32)
                k = x.size
            else:
                k, _, _, rows, splits = (int(a) for a in args)
                parts = [
                    ufunc.reduce(x[s * rows : (s + 1) * rows], axis=0, dtype=np.float32)
                    for s in range(splits)
                ]
                v = ufunc.reduce(np.stack(parts), axis=0, dtype=np.float32)
            if op == "mean":
                v = v / np.float32(k)
            out.view(np.float32)[...] = np.asarray(v, np.float32).reshape(out.shape)

    return run


_float4_kernels: dict[tuple[str, bool], Kernel] = {}


def float4_kernel(op: str, whole: bool) -> Kernel:
    """The compiled-once ``ca_cols4`` (first axis) or, ``whole``, ``ca_whole4`` (all of
    a contiguous array) of float32 ``op`` (a key of :data:`FLOAT4_OPS`).

    >>> k = float4_kernel("max", whole=True)
    """
    key = (op, whole)
    found = _float4_kernels.get(key)
    if found is None:
        with _lock:
            found = _float4_kernels.get(key)
            if found is None:
                name = f"ca_whole4<ca_op4, {WHOLE_LOADS}>" if whole else "ca_cols4<ca_op4>"
                twin_fn = _float4_twin(op, whole)
                found = Kernel(float4_source(op), name, emulate=twin_fn)
                _float4_kernels[key] = found
    return found


# -- the cache ----------------------------------------------------------------------------
_kernels: dict[tuple[Plan, ReduceSpec, int, int], Kernel] = {}
_lock = threading.Lock()


def kernel_for(plan: Plan, spec: ReduceSpec, nk: int, nr: int) -> Kernel:
    """The compiled-once ``ca_reduce`` of ``plan`` and ``spec`` over ``nk`` + ``nr`` dims."""
    key = (plan, spec, nk, nr)
    found = _kernels.get(key)
    if found is None:
        with _lock:
            found = _kernels.get(key)
            if found is None:
                found = Kernel(
                    source(plan, spec, nk, nr), "ca_reduce", emulate=twin(plan, spec, nk, nr)
                )
                _kernels[key] = found
    return found
