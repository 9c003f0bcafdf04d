"""Fused operands of the indexing family: an elementwise expression computed where it is read.

An indexing kernel (``cuasync/kernels/indexing.cu``) reads its operand (the source of
``gather``, ``take_along_axis`` and ``pad``, the updates of ``scatter``) as ``x[i]``, at a
linear index into the operand's shape (C order). Where that operand is an unexecuted
elementwise expression, the kernel generated here hands the family's body an accessor
whose ``operator[]`` unravels ``i`` into one strided offset per leaf (broadcast leaves
stride 0), computes the expression (:func:`~.codegen._emit`, the elementwise kernels'
own code: same dtype rules, float16/bfloat16 rounded as there) and stores it in the
expression's dtype: one launch, no intermediate tensor. Kernels are cached per body,
expression plan, dtype and number of merged dimensions; the emulator runs the
expression's numpy twin into a host array, then the family's twin. The dynamic slices
with host starts need no indexing kernel: :meth:`Fused.window` runs the expression's
own kernel over the window (its leaves sliced), into the result or its window.

>>> f = fusable(op)                       # op: an elementwise TensorOp, or None
>>> kernel, reads, args = f.prepare(ctx, call, x_shape)
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from importlib import resources
from typing import Any, NamedTuple

import numpy as np

from .._core.context import ExecutionContext
from .._core.device import Device
from .._dtypes import DTYPES, SUPPORTED, dtype_name
from .._first_use import unprepared
from .._launch import builtin
from .._launch.kernel import Kernel
from .._tensor import Shape, Tensor
from .codegen import (
    _WEAK_C,
    CANCEL_CHECK,
    CANCEL_WORD,
    Plan,
    _emit,
    _leaves,
    _prelude,
    _store,
    ctype,
    make_plan,
    scalar_arg,
    scalar_specs,
)
from .codegen import twin as expression_twin
from .expr import Node
from .launch_plan import broadcast_strides, merge_axes
from .tensorop import TensorOp, _resolve_pending, first_uses, planned, run

__all__ = ["Call", "Fused", "fusable"]


class Call(NamedTuple):
    """An indexing kernel's body as a fused kernel calls it: the body's instantiation
    (``"ca_gather_body<unsigned int, long long>"``), the C declarations of its
    parameters with ``None`` for the operand, the C type it reads ``x[i]`` as, and the
    family's numpy twin (given the operand's bits in that slot)."""

    body: str
    params: tuple[str | None, ...]
    storage: str
    twin: Callable[..., None]


class Fused:
    """An elementwise TensorOp's expression, read by an indexing kernel."""

    __slots__ = ("dtype", "node")

    def __init__(self, node: Node) -> None:
        self.node = node
        self.dtype = node.dtype

    def first_use(self, call: Call, shape: Shape, device: Device) -> tuple[tuple[Any, Device], ...]:
        """The fused kernel for an operand of ``shape`` (planned on stand-ins for pending
        leaves, which run first: their kernels come first)."""
        standin, pending = planned(self.node)
        plan, tensors, _ = make_plan(standin)
        dims, _ = merge_axes(shape, [broadcast_strides(t, shape) for t in tensors])
        kernel = fused_kernel(call, plan, dtype_name(self.dtype), len(dims))
        return (*first_uses(pending, device), *unprepared([kernel], device))

    def prepare(
        self, ctx: ExecutionContext, call: Call, shape: Shape
    ) -> tuple[Kernel, list[Tensor], list[Any]]:
        """The fused kernel, the tensors it reads (for ``out=``'s aliasing checks) and the
        arguments that follow the body's own: the leaves' views, the scalars, the merged
        dimensions and each leaf's strides over them. Pending leaves run here, first."""
        node = _resolve_pending(self.node, ctx)
        plan, tensors, scalars = make_plan(node)
        dims, strides = merge_axes(shape, [broadcast_strides(t, shape) for t in tensors])
        views = [
            builtin.storage_view(Tensor(t.allocation, dims, t.dtype, s, t.offset))
            for t, s in zip(tensors, strides, strict=True)
        ]
        specs = scalar_specs(plan)
        args = [scalar_arg(v, spec) for v, spec in zip(scalars, specs, strict=True)]
        flat = [x for s in strides for x in s]
        kernel = fused_kernel(call, plan, dtype_name(node.dtype), len(dims))
        return kernel, tensors, [*views, *args, *dims, *flat]

    def window(
        self, ctx: ExecutionContext, window: tuple[slice, ...]
    ) -> tuple[Callable[[Tensor], None], list[Tensor]]:
        """The expression over ``window`` (host slices of its shape, as the dynamic slices
        with host starts take): a function writing it into a tensor of the window's
        shape with one elementwise kernel (each leaf sliced where it spans an axis), and
        the tensors it reads. Pending leaves run here, first."""
        node = _window(_resolve_pending(self.node, ctx), self.node.shape, window)
        _, tensors, _ = make_plan(node)

        def write(out: Tensor) -> None:
            run(ctx, node, out)

        return write, tensors


def _window(n: Node, full: Shape, window: tuple[slice, ...]) -> Node:
    """``n`` (a node of an expression of shape ``full``) over ``window`` of ``full``."""
    if n.kind == "scalar":
        return n
    lead = len(full) - len(n.shape)
    cut = tuple(slice(None) if d == 1 else window[lead + j] for j, d in enumerate(n.shape))
    shape = tuple(1 if d == 1 else c.stop - c.start for d, c in zip(n.shape, cut, strict=True))
    if n.kind == "tensor":
        t = n.value[cut]
        return Node("tensor", n.name, t.shape, t.dtype, t, device=n.device)
    children = tuple(_window(c, full, window) for c in n.children)
    return Node("op", n.name, shape, n.dtype, None, children, n.ins, n.device)


def fusable(op: TensorOp) -> Fused | None:
    """``op``'s expression where it can be computed where read (an elementwise TensorOp
    writing no ``out=``), else None: it runs first."""
    node = op._node
    if node.kind != "op" or op._out is not None:
        return None
    return Fused(node)


# -- the kernel -----------------------------------------------------------------------------
def _indexing_source() -> str:
    return (resources.files("cuasync.kernels") / "indexing.cu").read_text(encoding="utf-8")


def source(call: Call, plan: Plan, dt: str, ndim: int) -> str:
    """The CUDA C++ of ``call``'s body reading ``plan`` (of dtype ``dt``) over ``ndim``
    merged dimensions: an accessor struct computing the expression at a linear index,
    and ``ca_fused_index`` calling the body with it."""
    found: dict[str, dict[int, str]] = {"x": {}, "s": {}}
    _leaves(plan, found)
    xs, ss = sorted(found["x"].items()), sorted(found["s"].items())
    fields = [f"const {DTYPES[d].storage}* x{k}" for k, d in xs]
    fields += [f"{_WEAK_C.get(spec) or ctype(spec)} s{k}" for k, spec in ss]
    fields += [f"long long d{j}" for j in range(ndim)]
    fields += [f"long long x{k}s{j}" for k, _ in xs for j in range(ndim)]
    offsets = [f"p{k}" for k, _ in xs]
    unravel = ["        long long r = i, c;", f"        long long {' = 0, '.join(offsets)} = 0;"]
    for j in reversed(range(ndim)):
        step = f"c = r % d{j}; r /= d{j};" if j else "c = r;"
        adds = " ".join(f"p{k} += c * x{k}s{j};" for k, _ in xs)
        unravel.append(f"        {step} {adds}")
    lines: list[str] = []
    result = _emit(plan, lines, [0])
    head = [p for p in call.params if p is not None]
    # the fields as the kernel's parameters, named apart from the body's (pad's x0, ...)
    params = [" ".join([*f.split()[:-1], f"f_{f.split()[-1]}"]) for f in fields]
    names = [p.split()[-1].lstrip("*") if p is not None else "a" for p in call.params]
    return "\n".join(
        [
            _prelude(),
            _indexing_source(),
            "struct ca_operand {",
            *(f"    {f};" for f in fields),
            f"    __device__ __forceinline__ {call.storage} operator[](long long i) const {{",
            *unravel,
            *lines,
            f"        return ca_bits_as<{call.storage}>({_store(result, dt)});",
            "    }",
            "};",
            f"__global__ void ca_fused_index({', '.join([*head, *params, CANCEL_WORD])}) {{",
            CANCEL_CHECK,
            f"    const ca_operand a = {{{', '.join(p.split()[-1] for p in params)}}};",
            f"    {call.body}({', '.join(names)});",
            "}",
        ]
    )


def _twin(call: Call, plan: Plan, dt: str) -> Callable[..., None]:
    """The emulator's: the expression's twin into a host array (its shape the merged
    dimensions the leaves are viewed over), then the family's twin reading its bits."""
    found: dict[str, dict[int, str]] = {"x": {}, "s": {}}
    _leaves(plan, found)
    nx, ns = len(found["x"]), len(found["s"])
    slot = call.params.index(None)
    nhead = len(call.params) - 1
    evaluate = expression_twin(plan, dt)

    def run(*args: Any) -> None:
        head, xs = list(args[:nhead]), args[nhead : nhead + nx]
        value = np.empty(xs[0].shape, SUPPORTED[dt])
        evaluate(value, *xs, *args[nhead + nx : nhead + nx + ns])
        head.insert(slot, value.reshape(-1).view(head[0].dtype))  # (the kernel's x[i] bits)
        call.twin(*head)

    return run


_kernels: dict[tuple[Any, ...], Kernel] = {}
_lock = threading.Lock()


def fused_kernel(call: Call, plan: Plan, dt: str, ndim: int) -> Kernel:
    """The compiled-once kernel of ``call``'s body reading ``plan`` over ``ndim`` dimensions."""
    key = (call.body, call.params, call.storage, plan, dt, ndim)
    found = _kernels.get(key)
    if found is None:
        with _lock:
            found = _kernels.get(key)
            if found is None:
                code = source(call, plan, dt, ndim)
                found = Kernel(code, "ca_fused_index", emulate=_twin(call, plan, dt))
                _kernels[key] = found
    return found
