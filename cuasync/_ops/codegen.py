"""One CUDA kernel per expression: generated C++ (compiled with NVRTC) and its numpy twin.

A tree becomes a *plan*: its structure with tensors and scalars replaced by parameter
numbers, hashable, so each plan (and number of dimensions) is compiled once per process.
The kernel is a grid-stride loop over the output's elements that unravels each linear
index into one strided offset per operand (64-bit), loads, computes the whole tree in
registers and stores once. When every operand is contiguous it skips the unravelling
and loads several elements per thread before computing (HBM wants bytes in flight):
two 16-byte vectors of each operand where all are aligned (:func:`vector_width`),
else ``UNROLL`` elements. float16 and bfloat16 are computed in float32 and rounded
after every op, as numpy (and ml_dtypes) do.

>>> plan, tensors, scalars = make_plan(node)
>>> kernel_for(plan, ndim=2)          # cached: the same Kernel for the same plan
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from importlib import resources
from typing import Any

import numpy as np

from .._backends.base import CANCEL_PARAM
from .._dtypes import DTYPES, SUPPORTED, dtype_name
from .._launch.kernel import Kernel
from .._tensor import Tensor
from .expr import UFUNCS, Node

#: Plan items: ("x", k, dtype) tensor k; ("s", k, spec) scalar k (spec "bool", "int",
#: "float" for a weak scalar, else its dtype name); ("op", name, ins, out, *children).
Plan = tuple[Any, ...]

_COMPUTE = {"float16": "float", "bfloat16": "float", "float32": "float", "float64": "double"}
_CMP = {
    "equal": "==",
    "not_equal": "!=",
    "less": "<",
    "less_equal": "<=",
    "greater": ">",
    "greater_equal": ">=",
}
_ARITH = {"add": "+", "subtract": "-", "multiply": "*"}
_WEAK_C = {"bool": "bool", "int": "long long", "float": "double", "complex": "double2"}


def make_plan(node: Node) -> tuple[Plan, list[Tensor], list[Any]]:
    """The plan of a tree whose pending leaves are already tensors, and its arguments
    (``ValueError`` for a pending leaf left)."""
    tensors: list[Tensor] = []
    scalars: list[Any] = []
    return _plan(node, tensors, scalars), tensors, scalars


def _plan(n: Node, tensors: list[Tensor], scalars: list[Any]) -> Plan:
    """``make_plan``'s walk, appending the leaves' arguments to ``tensors`` and ``scalars``.

    A module function, not a closure: a recursive closure refers to itself through its
    cell, a reference cycle that kept the tensors it saw (a ``then`` chain's intermediate
    outputs) alive until the cyclic garbage collector ran.
    """
    kind = n.kind
    if kind == "op":
        ins = _INS.get(n.ins)
        if ins is None:
            ins = _INS[n.ins] = tuple([dtype_name(d) for d in n.ins])
        out: Any = n.dtype
        return (
            "op",
            n.name,
            ins,
            dtype_name(out),
            *[_plan(c, tensors, scalars) for c in n.children],
        )
    if kind == "tensor":
        tensors.append(n.value)
        return ("x", len(tensors) - 1, dtype_name(n.value.dtype))
    if kind == "scalar":
        scalars.append(n.value)
        spec = type(n.value).__name__ if n.dtype is None else dtype_name(n.dtype)
        return ("s", len(scalars) - 1, spec)
    raise ValueError(f"make_plan: a {kind} node is left; execute it first")


#: An op node's loop dtypes by name, as plans hold them (every expression asks).
_INS: dict[tuple[Any, ...], tuple[str, ...]] = {}


def scalar_arg(value: Any, spec: str) -> Any:
    """A scalar as the kernel parameter of its spec takes it."""
    if spec in _WEAK_C:
        return value
    return float(value) if spec in ("float16", "bfloat16") else value.item()


@functools.lru_cache(maxsize=4096)
def scalar_specs(plan: Plan) -> tuple[str, ...]:
    """The spec of each scalar parameter of ``plan``, in parameter order.

    >>> scalar_specs(("op", "add", ("float32",) * 2, "float32", ("x", 0, "float32"),
    ...     ("s", 0, "float")))
    ('float',)
    """
    found: dict[int, str] = {}

    def walk(p: Any) -> None:
        if p[0] == "s":
            found[p[1]] = p[2]
        elif p[0] == "op":
            for c in p[4:]:
                walk(c)

    walk(plan)
    return tuple(found[k] for k in sorted(found))


# -- C++ ----------------------------------------------------------------------------------
def ctype(name: str) -> str:
    """The C type a value of dtype ``name`` is computed in."""
    return _COMPUTE.get(name, DTYPES[name].storage)


def _dtype_of(plan: Plan) -> str:
    """The dtype of a plan item's value (a weak scalar's spec: "bool", "int", "float")."""
    return str(plan[3] if plan[0] == "op" else plan[2])


def _convert_from(expr: str, src: str, to: str) -> str:
    """``expr``, a value of dtype ``src``, as one of ``to``; nothing to do where they are
    the same dtype (a float16 or bfloat16 value is exact already: no rounding again). A
    complex value as a bool is its truth (numpy's logical functions loop in bool)."""
    if src == to:
        return expr
    if to == "bool" and (src in _TO_COMPLEX or src == "complex"):  # (a weak complex too)
        return f"ca_znonzero({expr})"
    return _round(expr, to)


def _round(expr: str, dt: str) -> str:
    """``expr`` as a value of dtype ``dt``: float16 and bfloat16 rounded once to their
    precision (``ca_br`` is overloaded on the C type, so a double or a 64-bit integer
    rounds once, as ml_dtypes' casts), computed on in float32."""
    if dt == "float16":
        return f"ca_hr((double)({expr}))"
    if dt == "bfloat16":
        return f"ca_br({expr})"
    if dt in _TO_COMPLEX:
        return f"{_TO_COMPLEX[dt]}({expr})"
    return f"(({ctype(dt)})({expr}))"


#: The overloaded C++ function making a value of any type complex64 / complex128.
_TO_COMPLEX = {"complex64": "ca_zc64", "complex128": "ca_zc128"}

#: Complex arithmetic (kernels/elementwise.cuh, templated on float2 / double2).
_ZARITH = {
    "add": "ca_zadd",
    "subtract": "ca_zsub",
    "multiply": "ca_zmul",
    "divide": "ca_zdiv",
    "power": "ca_zpow",
}

#: Complex unary functions: the name in elementwise.cuh.
_ZUNARY = {
    "negative": "ca_zneg",
    "conj": "ca_zconj",
    "abs": "ca_zabs",
    "angle": "ca_zarg",
    "exp": "ca_zexp",
    "log": "ca_zlog",
    "sqrt": "ca_zsqrt",
    "square": "ca_zsquare",
    "reciprocal": "ca_zrecip",
    "round": "ca_zrint",
    "isfinite": "ca_zisfinite",
    "isinf": "ca_zisinf",
    "isnan": "ca_zisnan",
    "log2": "ca_zlog2",
    "log10": "ca_zlog10",
    "acos": "ca_zacos",
    "acosh": "ca_zacosh",
    "asin": "ca_zasin",
    "asinh": "ca_zasinh",
    "atan": "ca_zatan",
    "atanh": "ca_zatanh",
    "cosh": "ca_zcosh",
    "sinh": "ca_zsinh",
    "tanh": "ca_ztanh",
    "sin": "ca_zsin",
    "cos": "ca_zcos",
    "tan": "ca_ztan",
    "expm1": "ca_zexpm1",
    "log1p": "ca_zlog1p",
    "sign": "ca_zsign",
}

#: Bitwise and logical binary ops: (integers, bools). A bool is 0 or 1: ``!=`` is xor.
_BITS = {
    "bitwise_and": ("&", "&&"),
    "bitwise_or": ("|", "||"),
    "bitwise_xor": ("^", "!="),
}
_LOGICAL = {"logical_and": "&&", "logical_or": "||", "logical_xor": "!="}
#: Binary functions of <math.h> (NVRTC's device overloads), real floats only.
_MATH2 = frozenset(("atan2", "copysign", "hypot"))
#: Unary functions that give an integer or bool operand back as it is.
_INTEGRAL_SAME = frozenset(("ceil", "floor", "trunc", "round", "positive"))


def _math(name: str, a: str, dt: str) -> str:
    f = {"rsqrt": "rsqrt", "abs": "fabs"}.get(name, name)
    return f"{f}{'' if dt == 'float64' else 'f'}({a})"


def _binary(name: str, a: str, b: str, ins: tuple[str, ...], out: str) -> str:
    dt = ins[0]
    kind = DTYPES[dt].kind
    if kind == "c":  # (numpy's loops take two operands of one complex dtype)
        if name in ("equal", "not_equal"):
            return f"({'' if name == 'equal' else '!'}ca_zeq({a}, {b}))"
        if name in _LOGICAL:
            return f"(ca_znonzero({a}) {_LOGICAL[name]} ca_znonzero({b}))"
        return f"{_ZARITH[name]}({a}, {b})"
    if name in _CMP:
        sym = _CMP[name]
        k0, k1 = (DTYPES[d].kind for d in ins)
        if {k0, k1} == {"i", "u"}:  # int64 against uint64: numpy compares the values
            return f"(ca_cmp3_{k0}{k1}({a}, {b}) {sym} 0)"
        return f"({a} {sym} {b})"
    if name in _ARITH:
        sym = _ARITH[name]
        if kind == "b":
            return f"({a} || {b})" if name == "add" else f"({a} && {b})"
        if kind in "iu":  # wrap around as numpy does (signed overflow is UB in C++)
            return f"(({ctype(dt)})((ca_u64)({a}) {sym} (ca_u64)({b})))"
        return _round(f"{a} {sym} {b}", dt)
    if name == "divide":
        return _round(f"{a} / {b}", dt)
    if name in ("maximum", "minimum"):
        sym = ">=" if name == "maximum" else "<="
        if kind == "f":  # NaN propagates, as numpy's
            return f"(({a} {sym} {b} || {a} != {a}) ? {a} : {b})"
        return f"(({a} {sym} {b}) ? {a} : {b})"
    if name == "remainder":
        if kind == "f":
            return _round(f"ca_fmod_np({a}, {b})", dt)
        return f"ca_imod_np<{ctype(dt)}>({a}, {b})"
    if name == "power":
        if kind == "f":
            return _round(_math("pow", f"{a}, {b}", dt), dt)
        return f"ca_ipow<{ctype(dt)}>({a}, {b})"
    return _binary_api(name, a, b, dt, kind)


def _binary_api(name: str, a: str, b: str, dt: str, kind: str) -> str:
    """The array API's binary functions (issue 34) on real operands of loop dtype ``dt``."""
    c = ctype(dt)
    if name in _LOGICAL:
        return f"((bool)({a}) {_LOGICAL[name]} (bool)({b}))"
    if name in _BITS:
        word, logic = _BITS[name]
        return f"({a} {logic} {b})" if kind == "b" else f"(({c})(({a}) {word} ({b})))"
    if name in ("bitwise_left_shift", "bitwise_right_shift"):
        return f"ca_{'l' if name == 'bitwise_left_shift' else 'r'}shift<{c}>({a}, {b})"
    if name == "floor_divide":
        if kind == "f":
            return _round(f"ca_floordiv_np({a}, {b})", dt)
        return f"ca_ifloordiv_np<{c}>({a}, {b})"
    if name in _MATH2:
        return _round(_math(name, f"{a}, {b}", dt), dt)
    if name == "logaddexp":
        return _round(f"ca_logaddexp({a}, {b})", dt)
    if name == "nextafter":  # float16 and bfloat16: one step of their own precision
        step = {"float16": "ca_nextafter_h", "bfloat16": "ca_nextafter_bf"}.get(dt)
        return f"{step}({a}, {b})" if step else _math("nextafter", f"{a}, {b}", dt)
    raise AssertionError(name)


def _unary(name: str, a: str, dt: str) -> str:
    kind = DTYPES[dt].kind
    c = ctype(dt)
    if name == "positive":
        return a
    if kind == "c":
        if name in ("real", "imag"):
            return f"({a}).{'x' if name == 'real' else 'y'}"
        if name == "logical_not":
            return f"(!ca_znonzero({a}))"
        if name == "rsqrt":
            return f"ca_zrecip(ca_zsqrt({a}))"
        return f"{_ZUNARY[name]}({a})"
    if name in ("real", "conj"):
        return a
    if name in _INTEGRAL_SAME and kind in "biu":
        return a
    if name in ("isfinite", "isinf", "isnan"):  # an integer is finite
        return f"{name}({a})" if kind == "f" else ("true" if name == "isfinite" else "false")
    if name == "signbit":
        return f"signbit({a})"
    if name == "logical_not":
        return f"(!(bool)({a}))"
    if name == "bitwise_invert":
        return f"(!{a})" if kind == "b" else f"(({c})~({a}))"
    if name == "square":
        if kind in "iu":  # wraps, as numpy
            return f"(({c})((ca_u64)({a}) * (ca_u64)({a})))"
        return _round(f"{a} * {a}", dt)
    if name == "reciprocal":
        return _round(f"({c})1 / {a}", dt)
    if name == "round":
        return _round(_math("rint", a, dt), dt)
    if name == "imag":
        return f"(({c})0)"
    if name == "angle":  # 0, or pi for a negative value (NaN stays NaN)
        return _round(f"atan2({_zero(dt)}, {a})", dt)
    if name == "negative":
        return f"(({c})(0ULL - (ca_u64)({a})))" if kind in "iu" else f"(-{a})"
    if name == "abs":
        if kind == "i":
            return f"(({a}) < 0 ? ({c})(0ULL - (ca_u64)({a})) : ({a}))"
        return _math("abs", a, dt) if kind == "f" else a
    if name == "sign":
        if kind == "f":  # +0 for either zero (signless, as the array API says), NaN stays
            return f"(({a}) > 0 ? ({c})1 : (({a}) < 0 ? ({c})-1 : (({a}) == 0 ? ({c})0 : ({a}))))"
        return f"(({c})((({a}) > 0) - (({a}) < 0)))"
    return _round(_math(name, a, dt), dt)


def _zero(dt: str) -> str:
    return "0.0" if dt == "float64" else "0.0f"


def _strided_load(k: int) -> str:
    return f"x{k}[p{k}]"


def _emit(
    plan: Plan, lines: list[str], counter: list[int], loaded: Callable[[int], str] = _strided_load
) -> str:
    if plan[0] == "x":
        k, dt = plan[1], plan[2]
        load = loaded(k)
        if dt == "float16":
            return f"((float)ca_half_to_double({load}))"
        return f"ca_bf16_to_float({load})" if dt == "bfloat16" else load  # (reductions)
    if plan[0] == "s":
        return f"s{plan[1]}"
    _, name, ins, out, *children = plan
    if name == "vdot":  # conj(a) * b in the accumulator's type (reductions only)
        a, b = (_emit(c, lines, counter, loaded) for c in children)
        counter[0] += 1
        lines.append(f"        {ctype(out)} v{counter[0]} = {_vdot_product(a, b, out)};")
        return f"v{counter[0]}"
    args = [
        _convert_from(_emit(c, lines, counter, loaded), _dtype_of(c), dt)
        for c, dt in zip(children, ins, strict=True)
    ]
    if name == "where":
        expr = f"({args[0]} ? {args[1]} : {args[2]})"
    elif len(args) == 2:
        expr = _binary(name, args[0], args[1], ins, out)
    else:
        expr = _unary(name, args[0], ins[0])
    counter[0] += 1
    lines.append(f"        {ctype(out)} v{counter[0]} = {expr};")
    return f"v{counter[0]}"


def _vdot_product(a: str, b: str, out: str) -> str:
    """``conj(a) * b`` computed in ``out`` (complex: reduce.cuh's helpers; real: exact
    for bfloat16 operands in float32)."""
    if DTYPES[out].kind == "c":
        to = "ca_to_c64" if out == "complex64" else "ca_to_c128"
        return f"ca_cmul(ca_conj({to}({a})), {to}({b}))"
    c = ctype(out)
    mul = "__fmul_rn" if c == "float" else "__dmul_rn"
    return f"{mul}(({c})({a}), ({c})({b}))"


def _leaves(plan: Plan, found: dict[str, dict[int, str]]) -> None:
    if plan[0] in ("x", "s"):
        found[plan[0]][plan[1]] = plan[2]
    else:
        for c in plan[4:]:
            _leaves(c, found)


#: The files of ``cuasync/kernels`` each generated kernel starts with.
PRELUDE_FILES = ("cast.cuh", "elementwise.cuh", "cancel.cuh")


@functools.cache
def _prelude() -> str:
    kernels = resources.files("cuasync.kernels")
    return "\n".join((kernels / name).read_text(encoding="utf-8") for name in PRELUDE_FILES)


#: Elements per thread and loop iteration of a contiguous kernel whose operands are not
#: all aligned to a vector: all their loads are issued before any is used (more bytes in
#: flight per SM: HBM needs them).
UNROLL = 4

#: Bytes of the widest operand one vector access of an aligned contiguous kernel moves
#: (the widest load an SM issues), and vectors of each operand a thread loads before
#: using any, in blocks of VECTOR_BLOCK threads: one 16-byte vector a thread in blocks
#: of 128 was the fastest float32 and bfloat16 add of 64 and 256 MiB on an H200
#: (2026-12-03: 0.952 and 0.938 x torch, against 0.945 and 0.932 for 2 in blocks of 256).
VECTOR_BYTES = 16
VECTORS = 1
VECTOR_BLOCK = 128
#: Blocks of a vector launch at most: one pass of the grid up to 2 GiB an operand (2**20
#: blocks of 128 threads, 16 bytes each); the kernel loops over what is past that.
VECTOR_GRID = 1 << 20


@functools.cache
def vector_width(plan: Plan, out: str) -> int:
    """Elements of one vector access in the aligned contiguous kernel of ``plan``
    storing ``out``: 16 bytes of its widest operand (4 float32, 8 bfloat16, 1
    complex128), the same count for every operand.

    >>> vector_width(("op", "add", ("bfloat16",) * 2, "bfloat16", ("x", 0, "bfloat16"),
    ...     ("x", 1, "bfloat16")), "bfloat16")
    8
    """
    found: dict[str, dict[int, str]] = {"x": {}, "s": {}}
    _leaves(plan, found)
    widest = max(SUPPORTED[dt].itemsize for dt in [out, *found["x"].values()])
    return max(1, VECTOR_BYTES // widest)


def rounded(dt: str, value: str) -> str:
    """The C++ of ``value`` (a float, double or integer expression) rounded once to the
    storage type of ``dt``: what reductions, scans and sorts write.

    >>> rounded("bfloat16", "acc")
    'ca_bf16_from_float((float)(acc))'
    """
    if dt == "float16":
        return f"ca_half_from_double((double)({value}))"
    if dt == "bfloat16":
        return f"ca_bf16_from_float((float)({value}))"
    return f"({DTYPES[dt].storage})({value})"


def _store(result: str, out: str) -> str:
    if out == "float16":
        return f"ca_half_from_double((double)({result}))"
    if out == "bfloat16":  # (the value is a bfloat16 already: exact)
        return f"ca_bf16_exact((float)({result}))"
    return f"({DTYPES[out].storage})({result})"


#: Every generated kernel's last parameter, the cancel word its launches fill
#: (``cuasync/kernels/cancel.cuh``), and its check: once per block, before any work.
CANCEL_WORD = f"unsigned long long {CANCEL_PARAM}"
CANCEL_CHECK = f"    if (ca_block_cancelled({CANCEL_PARAM})) return;"


def source(plan: Plan, out: str, ndim: int) -> str:
    """The CUDA C++ of ``plan`` storing dtype ``out``, over ``ndim`` (merged) dimensions.

    ``ndim`` 0: no dimensions are left after merging, that is every operand is
    contiguous (or there is one element): the kernel indexes each operand with the
    linear index itself, ``UNROLL`` elements per thread.
    """
    found: dict[str, dict[int, str]] = {"x": {}, "s": {}}
    _leaves(plan, found)
    xs, ss = sorted(found["x"].items()), sorted(found["s"].items())
    params = [f"{DTYPES[out].storage}* out"]
    params += [f"const {DTYPES[dt].storage}* x{k}" for k, dt in xs]
    params += [f"{_WEAK_C.get(spec) or ctype(spec)} s{k}" for k, spec in ss]
    if ndim == 0:
        return _contiguous_source(plan, out, params, xs)
    params += ["long long n"] + [f"long long d{j}" for j in range(ndim)]
    for who in ["o", *(f"x{k}" for k, _ in xs)]:
        params += [f"long long {who}s{j}" for j in range(ndim)]
    offsets = ["o", *(f"p{k}" for k, _ in xs)]
    body = ["        long long r = i, c;", f"        long long {' = 0, '.join(offsets)} = 0;"]
    for j in reversed(range(ndim)):
        step = f"c = r % d{j}; r /= d{j};" if j else "c = r;"
        adds = " ".join(
            f"{p} += c * {w}s{j};"
            for p, w in zip(offsets, ["o", *(f"x{k}" for k, _ in xs)], strict=True)
        )
        body.append(f"        {step} {adds}")
    lines: list[str] = []
    result = _emit(plan, lines, [0])
    return "\n".join(
        [
            _prelude(),
            f"__global__ void ca_elementwise({', '.join([*params, CANCEL_WORD])}) {{",
            CANCEL_CHECK,
            "    for (long long i = ca_first(); i < n; i += ca_stride()) {",
            *body,
            *lines,
            f"        out[o] = {_store(result, out)};",
            "    }",
            "}",
        ]
    )


def _paired_bf16(
    plan: Plan, out: str, width: int, lines: list[str], result: str
) -> tuple[list[str], str] | None:
    """A bfloat16 root op computed in float (all its operands bfloat16): its lines
    without the root's rounding, and the float it rounds (``ca_bf16x2_rn`` rounds the
    vector's values two at a time); None for any other plan."""
    if out != "bfloat16" or plan[0] != "op" or plan[3] != "bfloat16" or width % 2 or not lines:
        return None
    if any(dt != "bfloat16" for dt in plan[2]):
        return None
    head, last = f"float {result} = ca_br(", lines[-1].strip()
    if not (last.startswith(head) and last.endswith(");")):
        return None
    return lines[:-1], last[len(head) : -2]


def _paired_body(
    paired: tuple[list[str], str], out_vec: str, width: int, j: str, u: str
) -> list[str]:
    """Store the vector ``j`` of a :func:`_paired_bf16` plan: the ``width`` floats
    computed, then rounded two at a time."""
    lines, value = paired
    return [
        "            {",
        f"                {out_vec} r;",
        f"                float f[{width}];",
        "                #pragma unroll",
        f"                for (int e = 0; e < {width}; e++) {{",
        *(f"            {line}".replace("[u].v[e]", f"[{u}].v[e]") for line in lines),
        f"                    f[e] = {value.replace('[u].v[e]', f'[{u}].v[e]')};",
        "                }",
        "                #pragma unroll",
        f"                for (int e = 0; e < {width}; e += 2) {{",
        "                    const unsigned p = ca_bf16x2_rn(f[e], f[e + 1]);",
        "                    r.v[e] = (unsigned short)p;",
        "                    r.v[e + 1] = (unsigned short)(p >> 16);",
        "                }",
        f"                (({out_vec}*)out)[{j}] = r;",
        "            }",
    ]


def _contiguous_source(plan: Plan, out: str, params: list[str], xs: list[tuple[int, str]]) -> str:
    """A kernel over contiguous operands: no index arithmetic. With ``vec`` (every
    operand aligned to :func:`vector_width` elements) each thread loads ``VECTORS``
    vectors of each input, 16 bytes of the widest dtype each and a block apart (so a
    warp's access is 512 contiguous bytes), all before any is used; the last elements
    (fewer than a vector) one a thread. Otherwise ``UNROLL`` elements a block apart,
    all loads issued before any is used."""
    width = vector_width(plan, out)
    vec = [f"ca_vec<{DTYPES[dt].storage}, {width}>" for _, dt in xs]
    out_vec = f"ca_vec<{DTYPES[out].storage}, {width}>"
    vec_lines: list[str] = []
    vec_result = _emit(plan, vec_lines, [0], lambda k: f"w{k}[u].v[e]")
    tail_lines: list[str] = []
    tail_result = _emit(plan, tail_lines, [0], lambda k: f"x{k}[i]")
    lines: list[str] = []
    result = _emit(plan, lines, [0], lambda k: f"l{k}[u]")
    loads = " ".join(f"l{k}[u] = x{k}[i];" for k, _ in xs)

    paired = _paired_bf16(plan, out, width, vec_lines, vec_result)

    def vector_body(j: str, u: str) -> list[str]:
        """Compute and store the vector ``j`` from the loaded ``w{k}[u]``."""
        if paired is not None:
            return _paired_body(paired, out_vec, width, j, u)
        stored = _store(vec_result, out)
        return [
            "            {",
            f"                {out_vec} r;",
            "                #pragma unroll",
            f"                for (int e = 0; e < {width}; e++) {{",
            *(f"            {line}".replace("[u].v[e]", f"[{u}].v[e]") for line in vec_lines),
            f"                    r.v[e] = {stored.replace('[u].v[e]', f'[{u}].v[e]')};",
            "                }",
            f"                (({out_vec}*)out)[{j}] = r;",
            "            }",
        ]

    vec_loads = " ".join(
        f"w{k}[u] = ((const {v}*)x{k})[j];" for v, (k, _) in zip(vec, xs, strict=True)
    )
    return "\n".join(
        [
            _prelude(),
            "__global__ void ca_elementwise("
            f"{', '.join([*params, 'long long n', 'int vec', CANCEL_WORD])}) {{",
            CANCEL_CHECK,
            "    if (vec) {",
            f"        const long long nv = n / {width}, bd = blockDim.x;  // whole vectors",
            f"        const long long step = (long long)gridDim.x * bd * {VECTORS};",
            f"        long long base = (long long)blockIdx.x * bd * {VECTORS} + threadIdx.x;",
            f"        for (; base + {VECTORS - 1} * bd < nv; base += step) {{",
            *(f"            {v} w{k}[{VECTORS}];" for v, (k, _) in zip(vec, xs, strict=True)),
            "            #pragma unroll",
            f"            for (int u = 0; u < {VECTORS}; u++) {{",
            "                const long long j = base + u * bd;",
            f"                {vec_loads}",
            "            }",
            "            #pragma unroll",
            f"            for (int u = 0; u < {VECTORS}; u++) {{",
            *vector_body("base + u * bd", "u"),
            "            }",
            "        }",
            "        for (; base < nv; base += bd) {  // the grid's last vectors",
            *(f"            {v} w{k}[1];" for v, (k, _) in zip(vec, xs, strict=True)),
            "            const long long j = base;",
            "            const int u = 0;",
            f"            {vec_loads}",
            *vector_body("base", "0"),
            "        }",
            f"        // the last < {width} elements, one a thread",
            f"        for (long long i = nv * {width} + ca_first(); i < n; i += ca_stride()) {{",
            *(f"    {line}" for line in tail_lines),
            f"            out[i] = {_store(tail_result, out)};",
            "        }",
            "        return;",
            "    }",
            f"    const long long step = (long long)gridDim.x * blockDim.x * {UNROLL};",
            f"    long long base = (long long)blockIdx.x * blockDim.x * {UNROLL} + threadIdx.x;",
            "    for (; base < n; base += step) {",
            *(f"        {DTYPES[dt].storage} l{k}[{UNROLL}];" for k, dt in xs),
            "        #pragma unroll",
            f"        for (int u = 0; u < {UNROLL}; u++) {{",
            "            long long i = base + (long long)u * blockDim.x;",
            f"            if (i < n) {{ {loads} }}",
            "        }",
            "        #pragma unroll",
            f"        for (int u = 0; u < {UNROLL}; u++) {{",
            "            long long i = base + (long long)u * blockDim.x;",
            "            if (i >= n) break;",
            *(f"    {line}" for line in lines),
            f"            out[i] = {_store(result, out)};",
            "        }",
            "    }",
            "}",
        ]
    )


# -- the numpy twin -----------------------------------------------------------------------
def _evaluate(plan: Plan, xs: list[np.ndarray], ss: list[Any]) -> Any:
    if plan[0] == "x":
        return xs[plan[1]]
    if plan[0] == "s":
        return ss[plan[1]]
    _, name, ins, out, *children = plan
    args = [_evaluate(c, xs, ss) for c in children]
    # the kernel converts each operand to its loop dtype; for a float loop numpy would
    # too, unless the loop is not numpy's (the default float: int32 / int32 in float32)
    args = [
        np.asarray(a).astype(SUPPORTED[dt])
        if DTYPES[dt].kind == "f" and np.result_type(a) != SUPPORTED[dt]
        else a
        for a, dt in zip(args, ins, strict=True)
    ]
    if name == "vdot":
        x, y = (np.asarray(v).astype(out) for v in args)
        return np.conj(x) * y if x.dtype.kind == "c" else x * y
    if name == "where":
        return np.where(*args)
    if name == "rsqrt":
        return np.reciprocal(np.sqrt(args[0]))
    if name == "reciprocal":
        return np.reciprocal(args[0])
    if name == "round" and DTYPES[ins[0]].kind in "biu":
        return args[0]
    if name == "power" and DTYPES[out].kind in "iu":
        return _int_power(args[0], args[1], SUPPORTED[out])
    return UFUNCS[name](*args)


def _int_power(a: Any, b: Any, dt: np.dtype[Any]) -> np.ndarray:
    """``ca_ipow`` (kernels/elementwise.cuh) in numpy: integer power wrapping as numpy's,
    where a negative exponent gives 0 (base 0 too), 1 for base 1 and ±1 for base -1;
    numpy raises for a negative exponent.

    >>> _int_power(np.array([0, 1, -1, 2, -3], "int8"), -3, np.dtype("int8"))
    array([ 0,  1, -1,  0,  0], dtype=int8)
    """
    a, b = np.asarray(a).astype(dt), np.asarray(b).astype(dt)
    negative = b < 0
    # the kernel's loop: base and result multiplied as uint64, then cast to T
    exponent = np.where(negative, 0, b).astype(np.uint64)
    value = np.power(a.astype(np.uint64), exponent).astype(dt)
    if dt.kind == "u":
        return value
    one = dt.type(1)
    small = np.where(a == 1, one, np.where(a == -one, np.where(b & 1, a, one), dt.type(0)))
    return np.where(negative, small, value).astype(dt)


def twin(plan: Plan, out: str) -> Callable[..., None]:
    """The numpy function the emulator runs for ``plan``'s kernel."""
    found: dict[str, dict[int, str]] = {"x": {}, "s": {}}
    _leaves(plan, found)
    nx, specs = len(found["x"]), [spec for _, spec in sorted(found["s"].items())]
    xdt = [SUPPORTED[dt] for _, dt in sorted(found["x"].items())]
    out_dt = SUPPORTED[out]

    def run(out_array: np.ndarray, *args: Any) -> None:
        xs = [a.view(dt) for a, dt in zip(args[:nx], xdt, strict=True)]
        ss = [
            {"bool": bool, "int": int, "float": float, "complex": complex}[spec](a.item())
            if spec in _WEAK_C
            else SUPPORTED[spec].type(a)
            for a, spec in zip(args[nx : nx + len(specs)], specs, strict=True)
        ]
        with np.errstate(all="ignore"):
            value = _evaluate(plan, xs, ss)
        out_array.view(out_dt)[...] = value

    return run


# -- the cache ----------------------------------------------------------------------------
_kernels: dict[tuple[Plan, str, int], Kernel] = {}
_lock = threading.Lock()


def kernel_for(plan: Plan, out: str, ndim: int) -> Kernel:
    """The compiled-once kernel of ``plan`` over ``ndim`` dimensions, storing ``out``."""
    key = (plan, out, ndim)
    found = _kernels.get(key)
    if found is None:
        with _lock:
            found = _kernels.get(key)
            if found is None:
                found = Kernel(source(plan, out, ndim), "ca_elementwise", emulate=twin(plan, out))
                _kernels[key] = found
    return found
