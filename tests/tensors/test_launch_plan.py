"""The launch plan of a seen elementwise expression (cuasync._ops.launch_plan).

A seen expression runs as the raw launch of its kernel: its plan is looked up by
structure, dtypes, broadcast layout, contiguity and whether it writes ``out=``; a new
scalar value reuses the plan and is bound as the kernel's parameter. What it holds in
flight is what a raw launch of that kernel holds (plus its new output), and nothing per
op stays behind.
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from helpers import GATE_CAPACITY, reactor_path

import cuasync
import cuasync.testing
from cuasync._core.memory import Allocation
from cuasync._ops import launch_plan
from cuasync._tensor import Tensor
from cuasync.bench._breakdown import raw_launch_of, raw_reduction_of

pytestmark = pytest.mark.anyio


async def upload(a: np.ndarray) -> cuasync.Tensor:
    return await cuasync.from_host(a)


async def test_a_seen_expression_reuses_its_plan_and_binds_new_scalars(
    anyio_backend: Any, made: list[Any]
) -> None:
    a = np.arange(12, dtype=np.float32)
    x = await upload(a)
    await cuasync.exp(x * 0.5 + 1.0)  # first use: the plan is made
    assert [m[0] for m in made] == ["exp"]
    for scale, shift in ((2.0, -1.0), (0.25, 3.0), (-1.0, 0.0)):
        y = await cuasync.exp(x * scale + shift)
        want = np.exp(a * np.float32(scale) + np.float32(shift))
        np.testing.assert_allclose(await y.to_host(), want, rtol=2e-6)
    assert len(made) == 1  # the same plan, the values bound anew


async def test_the_plan_differs_with_dtype_layout_contiguity_and_out(
    anyio_backend: Any, made: list[Any]
) -> None:
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    x = await upload(a)
    x64 = await upload(a.astype(np.float64))
    row = await upload(a[:1])  # (1, 4): broadcast down the rows
    o = cuasync.empty((3, 4), "float32").sync(allow_in_loop=True)
    cases: list[tuple[Callable[[], Any], np.ndarray]] = [
        (lambda: cuasync.add(x, 1.0), a + 1),
        (lambda: cuasync.add(x64, 1.0), a.astype(np.float64) + 1),  # another dtype
        (lambda: cuasync.add(x, row), a + a[:1]),  # another broadcast layout
        (lambda: cuasync.add(x[:, ::2], 1.0), a[:, ::2] + 1),  # a strided view
        (lambda: cuasync.add(x.T, 1.0), a.T + 1),  # a transposed one
        (lambda: cuasync.add(x, 1.0, out=o), a + 1),  # out=
        (lambda: cuasync.subtract(x, 1.0), a - 1),  # another op
        (lambda: cuasync.add(1.0, x), 1 + a),  # the operands the other way round
        (lambda: cuasync.add(x, 1), a + 1),  # a weak int, not a weak float
        (lambda: cuasync.add(x, np.float32(1.0)), a + 1),  # a float32 scalar, not weak
        (lambda: cuasync.add(x * 1.0, 1.0), a * 1 + 1),  # a deeper tree
    ]
    for make, want in cases:
        got = await make()
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(await got.to_host(), want)
    assert len(made) == len(cases)  # each a plan of its own
    for make, want in cases:  # seen: no plan made, the same values
        np.testing.assert_array_equal(await (await make()).to_host(), want)
    assert len(made) == len(cases)


async def test_a_plan_writes_each_out_it_is_given(anyio_backend: Any, made: list[Any]) -> None:
    a = np.arange(8, dtype=np.float32)
    x = await upload(a)
    outs = [cuasync.empty((8,), "float32").sync(allow_in_loop=True) for _ in range(3)]
    for k, o in enumerate(outs):
        got = await cuasync.multiply(x, float(k), out=o)
        assert got is o
    assert len(made) == 1
    for k, o in enumerate(outs):
        np.testing.assert_array_equal(await o.to_host(), a * k)
    await cuasync.add(x, 1.0, out=x)  # in place: the very same view is allowed
    np.testing.assert_array_equal(await x.to_host(), a + 1)


async def test_unaligned_views_share_the_plan_and_take_element_accesses(
    anyio_backend: Any, made: list[Any]
) -> None:
    a = np.arange(20, dtype=np.float32)
    x = await upload(a)
    for start in (0, 1, 2, 4):  # x[1:] is not aligned to a 16-byte vector
        v = x[start : start + 16]
        np.testing.assert_array_equal(
            await (await cuasync.add(v, 1.0)).to_host(), a[start:][:16] + 1
        )
    assert len(made) == 1  # one layout: contiguous (16,); alignment is checked per launch


async def test_half_precision_and_weak_ints_through_the_plan(
    anyio_backend: Any, made: list[Any]
) -> None:
    a = np.linspace(-2, 2, 16).astype(np.float16)
    h = await upload(a)
    for k in (1, 3):
        got = await (await (h * float(k))).to_host()
        np.testing.assert_array_equal(got, a * np.float16(k))
    i = await upload(np.arange(6, dtype=np.int8))
    for k in (1, 100):
        got = await (await cuasync.add(i, k)).to_host()
        np.testing.assert_array_equal(got, np.arange(6, dtype=np.int8) + np.int8(k))
    with pytest.raises(cuasync.errors.ScalarOverflowError):
        cuasync.add(i, 300)  # still fitted by value, though the loop is known
    assert len(made) == 2


def _taken(op: Any) -> Any:
    """``op``, taken (its launch op is what runs: collected, it says nothing)."""
    op._take()
    return op


async def test_a_reduction_is_the_one_launch_of_its_plan(
    anyio_backend: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A seen reduction that is one launch of its generic kernel is a raw launch of it:
    the workspace it leaves unused is the null pointer, no tensor of the launch (nothing
    to order or keep), which the native launcher takes (it once sent such launches to
    the full Python checks); views at other alignments share the plan (their rows read
    one element a load); argmax passes two nulls."""
    from cuasync._launch.kernel import NULL_POINTER
    from cuasync._native import PROCESS

    def checked(*args: Any) -> Any:
        raise AssertionError("a reduction's launch went to the full Python checks")

    monkeypatch.setattr(PROCESS, "kernel_launch_checked", checked)

    a = np.arange(1025, dtype=np.float32) % 7
    x = await upload(a)
    stream = cuasync.get_default_device().new_stream()
    for view, want in ((x[:1024], a[:1024]), (x[1:], a[1:])):
        assert float(await (await cuasync.sum(view)).to_host()) == want.sum()  # (seen after)
        launch = launch_plan.express_launch(_taken(cuasync.sum(view)), stream)
        assert launch is not None
        native = type(launch._kernel[1, 1]).__name__ == "Launcher"
        null = launch._args[1]  # (CUASYNC_NATIVE=off: the Python path's op holds int 0)
        assert null is NULL_POINTER if native else null == 0
        assert launch._tensors == (launch._output, view)
        assert launch._writes == (True, False)
        assert [p.const for p in launch._params] == [False, True]
        assert float(await (await launch).to_host()) == want.sum()
    m = a[:1020].reshape(10, 102)
    xm = await upload(m)
    np.testing.assert_array_equal(await (await cuasync.argmax(xm, axis=1)).to_host(), m.argmax(1))
    launch = launch_plan.express_launch(_taken(cuasync.argmax(xm, axis=1)), stream)
    assert launch is not None
    assert launch._args[1] == launch._args[2] == 0  # (NULL_POINTER, or the Python path's 0)
    assert len(launch._tensors) == len(launch._writes) == len(launch._params) == 2
    np.testing.assert_array_equal(await (await launch).to_host(), m.argmax(1))


async def test_a_reduction_plan_serves_new_outputs_and_out(anyio_backend: Any) -> None:
    # A contiguous out= has a new output's layout: one plan for both, each launch
    # writing its own output.
    a = np.arange(24, dtype=np.float32).reshape(4, 6)
    x = await upload(a)
    stream = cuasync.get_default_device().new_stream()
    np.testing.assert_array_equal(await (await cuasync.sum(x, axis=0)).to_host(), a.sum(0))
    o = cuasync.empty((6,), "float32").sync(allow_in_loop=True)
    launch = launch_plan.express_launch(_taken(cuasync.sum(x, axis=0, out=o)), stream)
    assert launch is not None and launch._output is o
    await launch
    np.testing.assert_array_equal(await o.to_host(), a.sum(0))


async def test_without_a_reduction_plan_maker_reductions_take_the_long_way(
    anyio_backend: Any, monkeypatch: pytest.MonkeyPatch, made: list[Any]
) -> None:
    stream = cuasync.get_default_device().new_stream()
    a = np.arange(10, dtype=np.float32)
    x = await upload(a)
    for unset in (None, "deleted"):
        if unset is None:
            monkeypatch.setattr(launch_plan.LAUNCHES, "reduce_plan_for", None)
        else:
            monkeypatch.delattr(launch_plan.LAUNCHES, "reduce_plan_for")
        assert launch_plan.express_launch(_taken(cuasync.sum(x)), stream) is None
        assert float(await (await cuasync.sum(x)).to_host()) == a.sum()


def test_the_reduction_twin_refuses_to_read_past_its_operand() -> None:
    # As_strided checks nothing: a geometry past the operand would read other memory on
    # the emulator, where the kernel would fault; the twin refuses it.
    from cuasync._ops import reduce_codegen
    from cuasync._ops.codegen import make_plan

    x = cuasync.from_host(np.ones(16, np.float32)).sync()
    plan = make_plan(_taken(cuasync.sum(x))._node.value._node)[0]
    spec = reduce_codegen.ReduceSpec("sum", "float32", "float32")
    run = reduce_codegen.twin(plan, spec, 0, 1)
    out = np.zeros((), np.float32)
    # (args: out, the workspace, x, then m, k, splits, chunk, phase, mode, the reduced
    # dim and its stride: a 0-d output has no kept dims)
    run(out, 0, np.ones(16, np.float32), 1, 16, 1, 16, 0, 0, 16, 1)
    assert out == 16
    with pytest.raises(IndexError, match="reads past its operand"):
        run(out, 0, np.ones(16, np.float32), 1, 32, 1, 32, 0, 0, 32, 1)


async def test_a_reduction_into_an_operand_takes_the_long_way(anyio_backend: Any) -> None:
    a = np.arange(16, dtype=np.float32).reshape(4, 4)
    x = await upload(a)
    stream = cuasync.get_default_device().new_stream()
    await cuasync.sum(x, axis=1)  # (seen)
    column = x[:, 0]
    assert launch_plan.express_launch(_taken(cuasync.sum(x, axis=1, out=column)), stream) is None
    await cuasync.sum(x, axis=1, out=column)
    np.testing.assert_array_equal(await column.to_host(), a.sum(axis=1))


async def test_a_pending_operand_takes_the_long_way(anyio_backend: Any) -> None:
    a = np.arange(6, dtype=np.float32)
    x = await upload(a)
    o = cuasync.empty((6,), "float32").sync(allow_in_loop=True)
    inner = cuasync.add(x, 1.0, out=o)  # runs first, then o is read
    got = await cuasync.multiply(inner, 2.0)
    np.testing.assert_array_equal(await got.to_host(), (a + 1) * 2)


def _in_flight_blocks(make: Callable[[], Any], stream: cuasync.Stream, n: int) -> float:
    """Python blocks held per op while ``n`` ops submitted on ``stream`` wait at a gate.

    A full collection before each count empties CPython's free lists (the tuples and
    floats an op's own build freed, kept for reuse): what is left is what the ops hold.
    """
    futures: list[Any] = [None] * n
    stream.synchronize()  # what ran before is released first (the watcher may still
    cuasync.testing.settle()  # be finishing it: blocks freed while this one counts)
    with cuasync.testing.gate(stream):
        gc.collect()
        before = sys.getallocatedblocks()
        for k in range(n):
            futures[k] = make().submit_on(stream)
        gc.collect()  # (the ops make no cycles: _left_behind; it frees no op's object)
        held = sys.getallocatedblocks() - before
    for f in futures:
        f.wait()
        f.result()
    return held / n


def _left_behind(make: Callable[[], Any], stream: cuasync.Stream, n: int) -> int:
    """Python blocks left once ``n`` ops ran one by one and were dropped (no collector:
    an op making a reference cycle leaves it here)."""
    stream.synchronize()  # (the backend's queue and the watcher's reports drained, both times)
    cuasync.testing.settle()
    gc.collect()
    gc.disable()
    try:
        before = sys.getallocatedblocks()
        for _ in range(n):
            make().submit_on(stream).wait()
        stream.synchronize()
        cuasync.testing.settle()
        return sys.getallocatedblocks() - before
    finally:
        gc.enable()


def test_a_seen_expression_holds_what_a_raw_launch_does() -> None:
    """Counts Python allocations per op. In flight, an expression (or a reduction) of a
    seen plan is the raw launch of its kernel: it may hold no more blocks than that launch with the same
    arguments (the launch op, its argument lists, the future and completion, what the
    queue behind the gate keeps; a new output allocated as the plan does), plus 1 of
    slack (a list over-allocated now and then), 3 with a new output (what the block
    cache and the backend keep of an allocation depends on what they hold already: 1-2
    blocks an op either way between runs). Its TensorOps and expression
    nodes are garbage once submitted. Run to completion and dropped, it leaves nothing
    behind, without the cyclic collector: < 1 block per 20 ops (free lists and the slot
    ledger growing to their sizes, not per op)."""
    n = 400
    gated = min(n, GATE_CAPACITY)  # (what a gate may hold: 40 with host callbacks)
    stream = cuasync.get_default_device().new_stream()
    a = np.arange(1024, dtype=np.float32)
    x = cuasync.from_host(a).sync()
    o = cuasync.empty((1024,), "float32").sync()
    f32 = np.dtype(np.float32)

    def new() -> cuasync.Tensor:  # what a plan allocates for a new output
        return Tensor(Allocation(stream.device, 4096, stream), (1024,), f32)

    def new_scalar() -> cuasync.Tensor:
        return Tensor(Allocation(stream.device, 4, stream), (), f32)

    cuasync.sum(x).sync()  # (seen: the raw launch of its kernel is taken from its plan)
    ops: dict[str, tuple[Callable[[], Any], Callable[[], Any]]] = {
        "add out=": (
            lambda: cuasync.add(x, 1.0, out=o),
            raw_launch_of(cuasync.add(x, 1.0), lambda: o),
        ),
        "exp(x * 2 + 1) out=": (
            lambda: cuasync.exp(x * 2.0 + 1.0, out=o),
            raw_launch_of(cuasync.exp(x * 2.0 + 1.0), lambda: o),
        ),
        "add": (lambda: cuasync.add(x, 1.0), raw_launch_of(cuasync.add(x, 1.0), new)),
        "sum": (lambda: cuasync.sum(x), raw_reduction_of(cuasync.sum(x), new_scalar, stream)),
    }
    for name, (make, raw) in ops.items():
        for _ in range(3 * n):  # warm: plans made, pools and the ledger at their sizes
            make().submit_on(stream).wait()
            raw().submit_on(stream).wait()
        held, raw_held = (_in_flight_blocks(f, stream, gated) for f in (make, raw))
        slack = 1 if "out=" in name else 3  # (see the docstring)
        assert held <= raw_held + slack, (name, held, raw_held)
        left = _left_behind(make, stream, 4 * n)
        if left >= 4 * n / 20:  # say whether they were cycles (the collector frees them)
            before = sys.getallocatedblocks()
            found = gc.collect()
            freed = before - sys.getallocatedblocks()
            raise AssertionError(
                f"{name}: {left} blocks left by {4 * n} ops; a collection then found "
                f"{found} objects in cycles and freed {freed} blocks"
            )
    raw = raw_launch_of(cuasync.add(x, 1.0), lambda: o)
    raw().sync()
    np.testing.assert_array_equal(o.to_host().sync(), a + 1)  # the last raw launch's


@reactor_path  # (host-callback completions take the generic path by design)
@pytest.mark.parametrize("scoped", [False, True], ids=["no scope", "in a cancel scope"])
def test_every_way_of_running_a_seen_expression_is_one_native_launch(scoped: bool) -> None:
    """Generated kernels take a cancel word (their launch op is a subclass of the raw
    launch's): an await, a blocking sync and a future of a seen expression, of a
    reduction (one launch), of a fill (``full``, ``ones``), of a small matmul (the tiled
    kernel), of ``tril``, ``take``, ``pad`` and ``astype`` (one launch into a new tensor) and of the
    raw launch of a kernel, are each taken by the native core, in a scope or not (they
    all went the generic Python way once, at twice the host cost, unnoticed)."""
    import asyncio
    import contextlib

    from cuasync._core import express

    x = cuasync.from_host(np.arange(1024, dtype=np.float32)).sync()
    o = cuasync.empty((1024,), "float32").sync()
    m = cuasync.from_host(np.arange(96, dtype=np.float32).reshape(8, 12)).sync()
    h = cuasync.from_host(np.ones((8, 12), np.float16)).sync()
    i = cuasync.from_host(np.array([3, 0, 7, 1], np.int64)).sync()
    core = express._core()
    if core is None:
        pytest.skip("the native core is off (CUASYNC_NATIVE=off, or not built)")
    stream = cuasync.get_default_device().new_stream()
    makers = {
        "add": lambda: cuasync.add(x, 1.0),
        "add out=": lambda: cuasync.add(x, 1.0, out=o),
        "raw launch": raw_launch_of(cuasync.add(x, 1.0), lambda: o),
        "sum": lambda: cuasync.sum(x),  # (a reduction: its single launch)
        "sum of an expression": lambda: cuasync.sum(x * 2.0),
        "argmax over an axis": lambda: cuasync.argmax(m, axis=1),  # (two null workspaces)
        "mean of float16 over a strided axis": lambda: cuasync.mean(h, axis=0),
        "full": lambda: cuasync.full((8, 12), 2.5),  # (a new tensor: the fill kernel's)
        "ones of int8": lambda: cuasync.ones((5,), "int8"),
        "a small matmul": lambda: cuasync.matmul(m, m.mT),  # (the tiled kernel's launch)
        "tril": lambda: cuasync.tril(m, 1),  # (one launch into a new tensor: OneLaunch)
        "take": lambda: cuasync.take(x, i),
        "astype": lambda: x.astype("float64"),
        "astype of a transposed view": lambda: m.mT.astype("int32"),  # (one strided chunk)
        "pad": lambda: cuasync.pad(x, 2),
    }
    for make in makers.values():  # seen: plans made, kernels prepared
        make().sync()

    async def run_all() -> list[str]:
        missed = []
        with cuasync.cancel_scope() if scoped else contextlib.nullcontext():
            for name, make in makers.items():
                for way, run in (
                    ("await", None),
                    ("sync", lambda op: op.sync(allow_in_loop=True)),
                    ("submit_on", lambda op: op.submit_on(stream).wait(allow_in_loop=True)),
                ):
                    before = core.launches
                    if run is None:
                        await make()
                    else:
                        run(make())
                    if core.launches != before + 1:
                        missed.append(f"{way} of {name}")
        return missed

    assert asyncio.run(run_all()) == []


def test_submit_on_hands_what_is_not_its_case_to_the_long_way() -> None:
    """``TensorOp.submit_on`` is native (``TensorSubmit``): a seen expression's future in
    one call; an op already taken, a stream that is not one, an expression with a
    pending operand (no raw launch) and a missing argument go the long way, which
    raises or runs them as before; it introspects as a method."""
    import inspect

    from cuasync.errors import ArgumentError, OpConsumedError

    a = np.arange(8, dtype=np.float32)
    x = cuasync.from_host(a).sync()
    stream = cuasync.get_default_device().new_stream()
    op = cuasync.add(x, 1.0)
    np.testing.assert_array_equal(op.submit_on(stream).wait().to_host().sync(), a + 1)
    with pytest.raises(OpConsumedError):
        op.submit_on(stream)
    not_a_stream = cuasync.add(x, 1.0)
    with pytest.raises(ArgumentError, match="cuasync.Stream"):
        not_a_stream.submit_on("stream")  # type: ignore[arg-type]
    not_a_stream.sync()
    pending = cuasync.add(cuasync.ones((8,)), x)  # (its operand runs first: the long way)
    np.testing.assert_array_equal(pending.submit_on(stream).wait().to_host().sync(), a + 1)
    no_stream = cuasync.add(x, 1.0)
    with pytest.raises(TypeError):
        no_stream.submit_on()  # type: ignore[call-arg]
    no_stream.sync()
    method = cuasync.TensorOp.submit_on
    assert (method.__name__, method.__qualname__) == ("submit_on", "TensorOp.submit_on")
    assert str(inspect.signature(method)) == "(self, stream, /)"


def test_submit_on_with_a_hub_that_is_not_one_raises_and_a_declined_launch_is_asked_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The native ``submit_on`` checks ``PROCESS.hub`` as the native await does (a type
    error, never a read of another object's memory); and a launch the core declines
    (awaits through host callbacks) goes the generic way without being offered again."""
    from cuasync._core import express
    from cuasync._core.completion import get_hub
    from cuasync._native import PROCESS

    x = cuasync.from_host(np.arange(8, dtype=np.float32)).sync()
    stream = cuasync.get_default_device().new_stream()
    cuasync.add(x, 1.0).sync()  # (seen)
    op = cuasync.add(x, 1.0)
    monkeypatch.setattr(PROCESS, "hub", ("not", "a", "hub"))
    with pytest.raises(TypeError, match="PROCESS.hub"):
        op.submit_on(stream)
    monkeypatch.undo()
    op._consumed = True  # (not run: it raised before anything was taken)
    core = express._core()
    if core is None:
        pytest.skip("the native core is off (CUASYNC_NATIVE=off, or not built)")
    monkeypatch.setattr(get_hub(), "use_reactor", False)  # (the core declines every launch)
    declined = core.declined
    future = cuasync.add(x, 1.0).submit_on(stream)
    assert core.declined == declined + 1
    np.testing.assert_array_equal(future.wait().to_host().sync(), np.arange(8) + 1.0)
