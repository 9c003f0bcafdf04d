"""``TensorOp``: a lazy op whose output is a tensor of a shape, dtype and device known now.

An elementwise TensorOp carries an expression tree. Used as an operand of another
elementwise op it is absorbed (consumed, never executed on its own), so a whole
expression runs as one generated kernel; executed, it allocates its output (or writes
``out=``) and launches that kernel once.

>>> y = await (a * b + 1.0)              # one kernel, one allocation
>>> z = await cuasync.exp(a * b + c)     # one kernel too
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator, Sequence
from typing import TYPE_CHECKING, Any, Never, NoReturn

import numpy as np

from .._cancel_var import SCOPE, detached
from .._core import express
from .._core.completion import Completion
from .._core.context import ExecutionContext
from .._core.device import Device, Stream
from .._core.op import DeviceFuture, DeviceOp, device_op
from .._core.output import Output
from .._dtypes import DTypeLike, as_dtype, dtype_name
from .._first_use import unprepared
from .._launch import builtin
from .._native import NATIVE, TensorOpCore
from .._tensor import Shape, Tensor, contiguous_strides, resolve_shape, viewing_strides
from .._tensor import methods as tensor_methods
from .._transfers.device_copy import copy_kernel, new_tensor
from ..errors import ArgumentError, ShapeError
from . import operators
from .codegen import UNROLL, VECTOR_BLOCK, VECTOR_GRID, VECTORS, scalar_arg, scalar_specs
from .expr import Node, check_dtype, is_ml_scalar
from .launch_plan import LAUNCHES, Layout, express_launch, layout, merge_axes, vector_access
from .operators import TensorOperators
from .standin import node_output, will_output

__all__ = [
    "Operand",
    "ShapeLike",
    "TensorOp",
    "first_uses",
    "leaf",
    "merge_axes",
    "planned",
    "tensor_op",
    "vector_access",
]


def _resolve_pending(node: Node, ctx: ExecutionContext) -> Node:
    """``node`` with every pending op executed (in ``ctx``) and replaced by its tensor."""
    if node.kind == "pending":
        t = node.value._enqueue(ctx).get()
        return Node("tensor", node.name, t.shape, t.dtype, t, device=t.device)
    if node.kind != "op":
        return node
    children = tuple(_resolve_pending(c, ctx) for c in node.children)
    return Node("op", node.name, node.shape, node.dtype, None, children, node.ins, node.device)


def planned(node: Node) -> tuple[Node, list[Any]]:
    """``node`` with each pending leaf standing for the tensor its op will output (for
    :func:`layout` to name the kernel before anything runs), and those ops: its ``out=``
    view, a view op's view, else a new contiguous tensor
    (:func:`~cuasync._ops.standin.node_output`).

    An op that outputs another layout than it declares makes the kernel chosen here a
    guess: the one :func:`run` needs is then prepared when it is enqueued.
    """
    if node.kind == "pending":  # (its declared layout: an out= view's, a view op's)
        t = node_output(node, node.device)
        return Node("tensor", node.name, node.shape, node.dtype, t, device=node.device), [
            node.value
        ]
    if node.kind != "op":
        return node, []
    pending: list[Any] = []
    children = []
    for child in node.children:
        standin, ops = planned(child)
        children.append(standin)
        pending += ops
    if not pending:
        return node, []
    kids = tuple(children)
    return Node("op", node.name, node.shape, node.dtype, None, kids, node.ins, node.device), pending


def first_uses(ops: Sequence[Any], device: Device) -> list[tuple[Any, Device]]:
    """The first uses of ``ops`` (:func:`planned`'s pending ops) on ``device``; an op that
    names no kernels (an upload) has none."""
    found: list[tuple[Any, Device]] = []
    for op in ops:
        first_use = getattr(op, "_first_use", None)
        if first_use is not None:
            found += first_use(device)
    return found


def run(
    ctx: ExecutionContext, node: Node, out: Tensor | None, planned: Layout | None = None
) -> Tensor:
    """Enqueue ``node`` (an op node) as one kernel writing ``out`` or a new tensor
    (``planned``: its layout, made before for that output by :meth:`TensorOp._first_use`)."""
    node = _resolve_pending(node, ctx)
    dtype: Any = node.dtype
    result = out if out is not None else new_tensor(ctx, node.shape, dtype, node.name)
    if result.size == 0:
        return result
    lay = planned or layout(node, result.shape, result.strides)
    scoped = out is None  # a new tensor: skipped in a cancelled scope (out=: always runs)
    views = [
        builtin.storage_view(Tensor(t.allocation, lay.dims, t.dtype, s, t.offset))
        for t, s in zip([result, *lay.tensors], lay.strides, strict=True)
    ]
    specs = scalar_specs(lay.plan)
    args = [scalar_arg(v, spec) for v, spec in zip(lay.scalars, specs, strict=True)]
    n = math.prod(lay.dims)
    if lay.contiguous:
        # 16-byte accesses where every operand is aligned to them, else one element each
        vec = vector_access(views, lay.width)
        if vec:  # a vector a thread, one pass of the grid (up to 2**20 blocks)
            work = -(-n // (lay.width * VECTORS))
            tail = (*args, n, 1)
            builtin.launch(
                ctx,
                lay.kernel,
                work,
                *views,
                *tail,
                block=VECTOR_BLOCK,
                most=VECTOR_GRID,
                scoped=scoped,
            )
            return result
        builtin.launch(ctx, lay.kernel, -(-n // UNROLL), *views, *args, n, 0, scoped=scoped)
        return result
    flat_strides = [x for s in lay.strides for x in s]
    builtin.launch(ctx, lay.kernel, n, *views, *args, n, *lay.dims, *flat_strides, scoped=scoped)
    return result


def _no_launch(op: TensorOp, stream: Stream) -> None:
    """An op that is not a seen expression, handed to asyncio as a future: no raw launch
    (it is submitted with ``_start``)."""


class TensorOp(TensorOperators, DeviceOp[Tensor], TensorOpCore):
    """A :class:`DeviceOp` producing a tensor whose ``shape``, ``dtype`` and ``device``
    are known when the op is built; operators on it build bigger (fused) expressions.

    >>> op = a * 2.0 + b                 # nothing runs yet
    >>> op.shape, op.dtype
    ((1024,), dtype('float32'))
    >>> y = await op
    """

    # _node, _out, _planned, _absorbed, dtype and shape: the native base's (``TensorOpCore``)
    __slots__ = ()

    _public_name = "TensorOp"

    def __init__(self, node: Node, out: Tensor | None = None) -> None:
        super().__init__(node.device)
        self._node = node
        self._out = out
        self._planned: Layout | None = None
        self.shape: Shape = out.shape if out is not None else node.shape
        assert node.dtype is not None
        self.dtype = node.dtype

    def _trace_name(self) -> str:
        return self._node.name  # the creating op's name, or the expression's root op

    @property
    def ndim(self) -> int:
        """The number of axes of the output."""
        return len(self.shape)

    @property
    def size(self) -> int:
        """The number of elements of the output."""
        return math.prod(self.shape)

    def __getitem__(self, item: Never) -> NoReturn:
        """Refused with :class:`~cuasync.errors.NotAwaitedError`: the tensor does not
        exist until the op runs (a forgotten await?). To mypy no index fits (``Never``),
        so ``op[0]`` fails type-checking too; index the result: ``(await op)[0]``."""
        super().__getitem__(item)  # (DeviceOp's: raises)
        raise AssertionError("unreachable")

    def __repr__(self) -> str:
        consumed = " (consumed)" if self._consumed else ""
        return (
            f"<cuasync.TensorOp {self._node.name} shape={self.shape} "
            f"dtype={dtype_name(self.dtype)}{consumed}>"
        )

    # -- execution: a seen expression as a raw launch (launch_plan.express_launch: the
    # launch op, or None for the long way), else the long way --
    # An op writing a tensor given to it (``out=``) inside a cancel scope is executed
    # outside the scope: it carries no word and always runs, so that a tensor others may
    # read is never left half written by a cancelled scope (docs/cancellation.md). Each
    # way of executing it goes through :meth:`_execute`, which checks it.

    def _start(self, stream: Stream, notify: bool) -> Completion:
        result: Completion = self._execute("_start", DeviceOp._start, stream, notify)
        return result

    def _express_launch(self, stream: Stream) -> Any:
        """Handed to asyncio as a future: its raw launch (a seen expression), or None."""
        return self._execute("_express_launch", _no_launch, stream)

    def _sync(self, stream: Stream) -> Tensor:
        result: Tensor = self._execute("_sync", DeviceOp._sync, stream)
        return result

    def _execute(self, how: str, long_way: Callable[..., Any], stream: Stream, *args: Any) -> Any:
        """Execute it by ``how`` (``_start``, ``_sync``, ``_express_launch``) on
        ``stream``: that method of its raw launch op where it is a seen expression, else
        ``long_way(self, stream, *args)``; outside the cancel scope where it writes a
        tensor given to it (see above)."""
        if self._out is not None and SCOPE.get() is not None:
            with detached():
                return self._execute_now(how, long_way, stream, *args)
        return self._execute_now(how, long_way, stream, *args)

    def _execute_now(
        self, how: str, long_way: Callable[..., Any], stream: Stream, *args: Any
    ) -> Any:
        launch = express_launch(self, stream)
        if launch is None:
            return long_way(self, stream, *args)
        launch._consumed = True
        return getattr(launch, how)(stream, *args)

    #: See :meth:`DeviceOp.__await__`: native (``LaunchAwait``, ``reactor/python/express.c``):
    #: the preamble, then the op's raw launch on the chosen stream
    #: (:func:`~.launch_plan.express_launch`), launched by the core as a raw launch's
    #: await is; the long way (:meth:`_await_on`) where it has none, and
    #: ``DeviceOp.__await__`` for an op writing ``out=`` inside a cancel scope.
    if TYPE_CHECKING:

        def __await__(self) -> Generator[Any, Any, Tensor]: ...

    else:
        __await__ = express.launch_awaiter(DeviceOp.__await__, express_launch)
        #: Handed to asyncio as a future: its await's ``hand_over`` (a seen expression's
        #: raw launch, taken in C; see :class:`~cuasync._core.op_future.AsyncioFuture`).
        _hand_over = __await__.hand_over

    def _await_on(self, stream: Stream, adapter: Any) -> Generator[Any, Any, Tensor]:
        # (not a generator itself: no frame more on the await of every op)
        if self._out is not None and SCOPE.get() is not None:  # (see above)
            return self._await_detached(stream, adapter)
        return self._await_now(stream, adapter)

    def _await_detached(self, stream: Stream, adapter: Any) -> Generator[Any, Any, Tensor]:
        token = SCOPE.set(None)  # (the task's own context: no other task's code sees it)
        try:
            return (yield from self._await_now(stream, adapter))
        finally:
            SCOPE.reset(token)

    def _await_now(self, stream: Stream, adapter: Any) -> Generator[Any, Any, Tensor]:
        launch = express_launch(self, stream)
        if launch is None:
            return (yield from DeviceOp._await_on(self, stream, adapter))
        launch._consumed = True  # the raw launch's await: the core's submission and spin
        return (yield from express._submit_await(launch, stream, adapter, None))

    def submit(self) -> DeviceFuture[Tensor]:
        """See :meth:`DeviceOp.submit`."""
        if self._consumed:
            self._take()  # raises
        return self.submit_on(self._pick_stream())

    def _submit_on(self, stream: Stream) -> DeviceFuture[Tensor]:
        """:meth:`submit_on` where the native one hands it over: an op already taken or
        not a stream (raises), and inside a cancel scope (a future is never skipped:
        others may await it, so it is built outside the scope, natively again)."""
        if self._consumed or not isinstance(stream, Stream) or SCOPE.get() is None:
            return DeviceOp.submit_on(self, stream)  # raises (the native one's other cases)
        with detached():
            return self.submit_on(stream)

    def _submit_generic(self, stream: Stream) -> DeviceFuture[Tensor]:
        """The op, with no raw launch, taken and submitted the generic way."""
        self._consumed = True
        return DeviceFuture(DeviceOp._start(self, stream, True))

    if TYPE_CHECKING:

        def submit_on(self, stream: Stream) -> DeviceFuture[Tensor]: ...

    else:
        #: See :meth:`DeviceOp.submit_on`: native (``TensorSubmit``,
        #: ``reactor/python/launches.c``): a seen expression's raw launch, submitted by the
        #: core as a future in one call; else :meth:`_submit_on`.
        submit_on = NATIVE.TensorSubmit(
            LAUNCHES, _submit_on, _submit_generic, express.generic_future, SCOPE
        )

    def _enqueue(self, ctx: ExecutionContext) -> Output[Tensor]:
        if self._out is not None and SCOPE.get() is not None:  # (see above)
            with detached():
                return self._enqueue_now(ctx)
        return self._enqueue_now(ctx)

    def _enqueue_now(self, ctx: ExecutionContext) -> Output[Tensor]:
        if self._node.kind == "pending":  # a wrapped op (creation, copy, reshape)
            return self._node.value._enqueue(ctx)
        return Output.ready(run(ctx, self._node, self._out, self._planned))

    def _first_use(self, device: Device) -> Sequence[tuple[Any, Device]]:
        """The expression's kernel where it is not yet prepared for ``device`` (its
        layout, kept for :meth:`_enqueue`), after those of its pending operands (ops that
        run first; the kernel is chosen for the new contiguous tensors they make:
        :func:`planned`)."""
        node = self._node
        if node.kind == "pending":  # a wrapped op, or an upload (no kernel: no method)
            first_use = getattr(node.value, "_first_use", None)
            return () if first_use is None else first_use(device)
        out = self._out
        shape = node.shape if out is None else out.shape
        if math.prod(shape) == 0:
            return ()
        strides = contiguous_strides(shape) if out is None else out.strides
        try:
            lay = self._planned = layout(node, shape, strides)
        except ValueError:  # pending operands: planned on stand-ins, only to name the kernel
            standin, pending = planned(node)
            try:
                lay = layout(standin, shape, strides)
            except ValueError:
                return ()
            return (*first_uses(pending, device), *unprepared([lay.kernel], device))
        return unprepared([lay.kernel], device)

    def reshape(self, shape: ShapeLike) -> TensorOp:
        """The output in another shape (-1 infers): a view of it (:meth:`Tensor.reshape`'s
        rule), or, where its strides do not allow one (an ``out=`` view, a view op's
        output), a copy made in the same submission.

        The shape is checked now; the view is taken when the op runs.

        >>> m = await cuasync.arange(12, dtype="float32").reshape((4, -1))  # shape (4, 3)
        """
        new = resolve_shape(self.size, shape)
        fresh = self._out is None and self._node.kind != "pending"  # (a new tensor: views)
        out = None if fresh else will_output(self, self.device)  # (an out= or a view may not)
        strides = new if out is None else viewing_strides(out.shape, out.strides, new)

        def reshaped(t: Tensor) -> TensorOp:
            try:
                return view_op(t.reshape(new), "reshape")
            except ShapeError:
                return t.dup().reshape(new)

        def first_use(on: Device) -> tuple[tuple[Any, Device], ...]:
            # (a new contiguous output always views; an out= view may not: a copy kernel)
            return unprepared([copy_kernel(self.dtype)], on) if strides is None else ()

        view = None if out is None or strides is None else out.reshape(new)
        return on_tensor(self, "reshape", new, self.dtype, reshaped, first_use, view)

    def astype(self, dtype: DTypeLike, *, casting: str = "unsafe") -> TensorOp:
        """The output cast to ``dtype`` (a new contiguous tensor; :func:`cuasync.convert`,
        whose ``casting`` this takes).

        >>> h = await (a * 2.0).astype("float16")
        >>> i = await (a * 2.0).astype("int8", casting="checked")
        """
        dt = as_dtype(dtype)
        tensor_methods.check_casting(self.dtype, dt, casting)

        def cast(t: Tensor) -> TensorOp:
            return tensor_methods.convert(t, dt, casting=casting)

        kernels = tensor_methods.convert_kernels(dt, casting == "checked")
        return on_tensor(self, "astype", self.shape, dt, cast, lambda on: unprepared(kernels, on))

    def item(self) -> DeviceOp[Any]:
        """An op running this one, then copying its one element to the host as a Python
        scalar.

        >>> total = await cuasync.sum(x).item()
        """
        if self.size != 1:
            raise ShapeError(
                f"item() needs exactly one element, the output has {self.size} (shape {self.shape})"
            )
        return self.then(lambda t: t.item())

    def _consumed_message(self) -> str:
        if not getattr(self, "_absorbed", False):  # (set when an expression took it over)
            return super()._consumed_message()
        return (
            "this TensorOp was used in a bigger expression (`op + 1`, `cuasync.exp(op)`), "
            "which took it over: await that expression instead; to use its result twice, "
            "await it first (`t = await op`) or call .shared() before using it"
        )

    def _absorb(self, argument: str) -> Node:
        """This op as an operand of a bigger expression: consumed now, never run alone."""
        node = self._operand_node(argument)
        self._absorb_into()
        return node

    def _operand_node(self, argument: str) -> Node:
        """The node standing for this op in a bigger expression (nothing is consumed):
        its own tree, or where it writes out=, a pending leaf (it runs first, in the same
        submission, then out is read)."""
        if self._out is None:
            return self._node
        return Node("pending", argument, self.shape, self.dtype, self, device=self._node.device)

    def _absorb_into(self) -> None:
        """Consumed by the bigger expression holding its :meth:`_operand_node`."""
        self._take()
        self._absorbed = True

    def __bool__(self) -> bool:
        self._consumed = True  # dropped here: no "never executed" warning on top
        raise TypeError(
            "the truth value of a TensorOp is not known before it runs; await it, then test "
            "the data on the host: `(await (a == b).to_host()).all()`"
        )

    __hash__ = DeviceOp.__hash__  # identity: TensorOps key dicts (asyncio.gather, ...)


def tensor_op(
    op: DeviceOp[Tensor],
    shape: Shape,
    dtype: Any,
    output: Tensor | None = None,
    *,
    writes: bool = False,
) -> TensorOp:
    """``op`` (which outputs a new tensor of ``shape`` and ``dtype``; ``output``: or that
    tensor, known now, a ``device_op``'s ``out=`` or view: ``standin.will_output``) as a
    ``TensorOp``. ``writes``: ``op`` writes ``output`` (its ``out=``), which is then the
    TensorOp's: it runs whole inside a cancelled scope (others may read ``output``)."""
    if output is not None:
        op._output = output  # type: ignore[attr-defined]  # (a device_op's: _FnOp's)
    op._take()
    dev: Device | None = op.device
    label = str(getattr(op, "_name", "op"))
    pending = Node("pending", label, shape, np.dtype(dtype), op, device=dev)
    return operators.implementation.elementwise_apply.tensor_op(pending, output if writes else None)


def view_op(t: Tensor, name: str) -> TensorOp:
    """An op whose output is ``t`` (a view of an existing tensor): nothing to run."""
    op = device_op(lambda ctx: Output.ready(t), t.device, name)
    return tensor_op(op, t.shape, t.dtype, t)  # (declared: what reads it sees the view)


#: ``on_output.on_tensor``, set by :mod:`.on_output`, which builds on this module (an
#: op of a TensorOp's output: ``TensorOp.reshape`` and ``astype``).
on_tensor: Any = None


def flattened(x: Tensor | TensorOp) -> Tensor | TensorOp:
    """``x`` as one axis (C order): a view where its strides allow, else a copy in the
    same submission (a TensorOp's output too: :meth:`TensorOp.reshape`).

    >>> flat = flattened(x.T)          # a copy: x.T's rows are not adjacent
    """
    if x.ndim == 1:
        return x
    if isinstance(x, Tensor):
        try:
            return x.reshape((-1,))
        except ShapeError:
            return x.dup().reshape((-1,))
    return x.reshape((-1,))


def leaf(value: Any, argument: str) -> Node:
    """The node of an operand: a tensor, a TensorOp (absorbed), or a Python/numpy scalar."""
    if isinstance(value, Tensor):
        check_dtype(value.dtype, argument)
        return Node("tensor", argument, value.shape, value.dtype, value, device=value.device)
    if isinstance(value, TensorOp):
        return value._absorb(argument)
    if isinstance(value, (bool, np.bool_)):
        # A Python bool is not weak (numpy 2): it is a bool, which any numeric dtype
        # takes in promotion, so ``add(f32, True)`` is float32 and ``less(f32, True)`` bool.
        return Node("scalar", argument, (), np.dtype(bool), np.bool_(value))
    if type(value) in (int, float, complex):
        return Node("scalar", argument, (), None, value)
    if isinstance(value, (np.integer, np.floating, np.complexfloating)) or is_ml_scalar(value):
        check_dtype(value.dtype, argument)
        return Node("scalar", argument, (), value.dtype, value)
    if isinstance(value, int):  # subclasses (IntEnum, ...): as the plain value
        return leaf(int(value), argument)
    if isinstance(value, float):
        return leaf(float(value), argument)
    if isinstance(value, complex):
        return leaf(complex(value), argument)
    if isinstance(value, np.ndarray):
        if value.ndim == 0:  # its scalar, as the operators take it (numpy's, not weak)
            return leaf(value[()], argument)
        raise ArgumentError(
            f"{argument} is a numpy array; upload it first: await cuasync.from_host(array)"
        )
    raise ArgumentError(
        f"{argument} must be a cuasync.Tensor, a TensorOp or a number, got "
        f"{type(value).__name__} {value!r}"[:200]
    )


#: What the elementwise functions take as an operand: a tensor (or view), a lazy
#: :class:`TensorOp` (absorbed into the expression) or a Python or numpy scalar
#: (``bool`` and ``int`` are ``complex`` to a type checker).
Operand = Tensor | TensorOp | complex | np.number[Any] | np.bool_

#: A shape as the creation functions take one: an int or a sequence of ints (numpy's
#: integers too), or a numpy array of integers.
ShapeLike = (
    int
    | np.integer[Any]
    | Sequence[int | np.integer[Any]]
    | np.ndarray[Any, np.dtype[np.integer[Any]]]
)
