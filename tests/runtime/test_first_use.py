"""The first use of a kernel or of an expression structure compiles and loads off the loop.

An ``await`` that finds its kernel not yet prepared for the device hands the compile
and the module load to the compile thread and parks; the event loop runs its other
tasks meanwhile. A hook on the backend's ``prepare_kernel`` holds each preparation
until a ticker task on the loop has run ``TICKS`` times: where the preparation ran on
the loop thread, the ticker could not run and the preparation would give up waiting
(``HOLD_S``). ``cuasync.warmup`` does it ahead of traffic; ``sync()`` prepares inline;
a second process with a warm disk cache compiles nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import pytest
from helpers import ON_EMULATOR, emptied, run_script

import cuasync
from cuasync import _first_use
from cuasync._backends import get_backend
from cuasync._core.completion import get_hub
from cuasync._launch import builtin
from cuasync._launch.nvrtc import nvrtc_problem
from cuasync._ops import (
    codegen,
    contract,
    indexing,
    joins,
    launch_plan,
    reduce_codegen,
    reductions,
    scan,
    sorting,
    statistics,
    tiled_gemm,
)
from cuasync.errors import ArgumentError, DriverError, KernelCompileError, driver_error

pytestmark = pytest.mark.anyio

TICKS = 5
HOLD_S = 10.0

BUMP = r"""
extern "C" __global__ void bump(float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += 1.0f;
}
"""


def _bump_twin(x: Any, n: int) -> None:
    x[:n] += 1.0


def _fresh_bump() -> cuasync.Kernel[Any]:
    return cuasync.Kernel(BUMP, "bump", emulate=_bump_twin)


class Held:
    """``prepare_kernel`` held until :meth:`release` (or ``HOLD_S``): which threads
    prepared, and whether each was released (rather than given up on)."""

    def __init__(self) -> None:
        self.released = threading.Event()
        self.entered = threading.Event()
        self.threads: list[str] = []
        self.gave_up = 0

    def release(self) -> None:
        self.released.set()


@pytest.fixture
def held(monkeypatch: pytest.MonkeyPatch) -> Iterator[Held]:
    backend = get_backend()
    real = backend.prepare_kernel
    state = Held()

    def prepare_kernel(ordinal: int, kernel: Any, **kw: Any) -> Any:
        state.threads.append(threading.current_thread().name)
        state.entered.set()
        if not state.released.wait(HOLD_S):
            state.gave_up += 1
        return real(ordinal, kernel, **kw)

    monkeypatch.setattr(backend, "prepare_kernel", prepare_kernel)
    real_gemm = backend.prepare_gemm

    def prepare_gemm(ordinal: int) -> None:  # (cuBLAS's libraries and handle)
        state.threads.append(threading.current_thread().name)
        state.entered.set()
        if not state.released.wait(HOLD_S):
            state.gave_up += 1
        real_gemm(ordinal)

    monkeypatch.setattr(backend, "prepare_gemm", prepare_gemm)
    try:
        yield state
    finally:
        state.release()


async def _ticking_while(state: Held, op: Any) -> tuple[Any, int]:
    """``await op`` with a ticker task on the loop that releases the held preparation
    after ``TICKS`` ticks; returns the output and the ticks made before it came."""
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            if ticks == TICKS:
                state.release()
            await anyio.sleep(0.001)

    async with anyio.create_task_group() as tg:
        tg.start_soon(ticker)  # (it runs once this task yields: at the await)
        out = await op
        made = ticks
        tg.cancel_scope.cancel()
    return out, made


def _assert_prepared_off_the_loop(state: Held, made: int) -> None:
    assert state.threads and all(t.startswith("cuasync-compile") for t in state.threads), (
        state.threads
    )
    assert state.gave_up == 0, "the preparation waited for a loop that did not run"
    assert made >= TICKS


async def test_the_loop_runs_while_a_kernels_first_launch_compiles(
    anyio_backend: Any, held: Held
) -> None:
    x = await cuasync.zeros((64,), dtype="float32")
    k = _fresh_bump()
    out, made = await _ticking_while(held, k[1, 64](x, 64))
    assert out is x
    _assert_prepared_off_the_loop(held, made)
    np.testing.assert_array_equal(await x.to_host(), np.ones(64, np.float32))
    # prepared now: the next launch takes the express core (where there is one, and where
    # awaits use flag slots: with host callbacks it declines every launch)
    hub = get_hub()
    express = hub.express if hub.use_reactor else None
    declined = express.declined if express is not None else 0
    await k[1, 64](x, 64)
    assert (express.declined if express is not None else 0) == declined
    assert len(held.threads) == 1


@pytest.mark.parametrize("form", ["expression", "expression.to_host", "sum"], ids=lambda form: form)
async def test_the_loop_runs_while_a_new_expression_compiles(
    anyio_backend: Any, held: Held, monkeypatch: pytest.MonkeyPatch, form: str
) -> None:
    x = await cuasync.from_host(np.arange(16, dtype=np.float32))
    monkeypatch.setattr(codegen, "_kernels", {})  # every structure is new
    emptied(monkeypatch, launch_plan._plans)  # (and so every launch plan)
    monkeypatch.setattr(reduce_codegen, "_kernels", {})
    monkeypatch.setattr(reductions, "_GENERIC", {})  # (the layouts of seen reductions)
    expected = np.exp(np.arange(16, dtype=np.float32) * np.float32(0.5) + np.float32(1.0))
    op: Any = cuasync.exp(x * 0.5 + 1.0)
    if form == "sum":
        op, expected = cuasync.sum(op), expected.sum(dtype=np.float32)
    elif form == "expression.to_host":
        op = op.to_host()
    out, made = await _ticking_while(held, op)
    _assert_prepared_off_the_loop(held, made)
    host = out if form == "expression.to_host" else await out.to_host()
    np.testing.assert_allclose(host, expected, rtol=1e-5)


async def test_a_cancelled_first_await_leaves_the_kernel_prepared(
    anyio_backend: Any, held: Held, baseline: Any
) -> None:
    x = await cuasync.zeros((8,), dtype="float32")
    k = _fresh_bump()
    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as tg:

            async def first() -> None:
                await k[1, 8](x, 8)

            tg.start_soon(first)
            await anyio.to_thread.run_sync(held.entered.wait)
            scope.cancel()  # while the compile thread is preparing
    held.release()
    assert await k[1, 8](x, 8) is x  # the same preparation: no second one
    assert len(held.threads) == 1
    np.testing.assert_array_equal(await x.to_host(), np.ones(8, np.float32))


async def test_blocking_calls_prepare_inline(anyio_backend: Any, held: Held) -> None:
    held.release()
    x = await cuasync.zeros((8,), dtype="float32")
    op = _fresh_bump()[1, 8](x, 8)  # built in the loop: prepared when executed
    assert op.sync(allow_in_loop=True) is x
    assert held.threads == [threading.current_thread().name]


@pytest.mark.skipif(
    ON_EMULATOR and nvrtc_problem() is not None, reason="the emulator compiles with NVRTC"
)
async def test_a_compile_error_raises_from_the_first_await(anyio_backend: Any) -> None:
    broken = cuasync.Kernel(
        'extern "C" __global__ void broken(float* x) { x[0] = undeclared; }',
        "broken",
        emulate=lambda x: None,
    )
    x = await cuasync.zeros((1,), dtype="float32")
    op = broken[1, 1](x)  # built in a loop: nothing compiled yet
    with pytest.raises(KernelCompileError, match="undeclared"):
        await op


@pytest.mark.skipif(
    ON_EMULATOR and nvrtc_problem() is not None, reason="the emulator compiles with NVRTC"
)
async def test_awaits_of_a_kernel_that_fails_share_one_compile(anyio_backend: Any) -> None:
    """Many tasks awaiting a new kernel that does not compile: NVRTC runs once for them
    all, each raises its own error; an await after the failure compiles again."""
    from cuasync._launch.nvrtc import compiles

    broken = cuasync.Kernel(
        'extern "C" __global__ void broken2(float* x) { x[0] = undeclared2; }',
        "broken2",
        emulate=lambda x: None,
    )
    x = await cuasync.zeros((1,), dtype="float32")
    before = compiles()
    errors: list[BaseException] = []

    async def one() -> None:
        with pytest.raises(KernelCompileError, match="undeclared2") as caught:
            await broken[1, 1](x)
        errors.append(caught.value)

    async with anyio.create_task_group() as tg:
        for _ in range(8):
            tg.start_soon(one)
    assert len(errors) == 8 and len({id(e) for e in errors}) == 8
    assert compiles() - before == 1
    await one()  # (tried again: a fixed header would be read now)
    assert compiles() - before == 2


async def test_a_failed_load_reaches_each_awaiter_as_itself(
    anyio_backend: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A preparation failing with a driver error (a module without code for the GPU):
    each await of the kernel raises that error, and so does an op gathered as an
    asyncio future (it ends: nothing waits for a callback that failed)."""
    x = await cuasync.zeros((1,), dtype="float32")

    def failing(ordinal: int, kernel: Any, **kw: Any) -> Any:
        raise driver_error(209, "cuModuleLoadData")

    monkeypatch.setattr(get_backend(), "prepare_kernel", failing)
    source = 'extern "C" __global__ void unloadable(float* x) { x[0] = 1.0f; }'
    kernel = cuasync.Kernel(source, "unloadable", emulate=lambda x: None)
    with pytest.raises(DriverError, match="NO_BINARY_FOR_GPU"):
        await kernel[1, 1](x)
    if anyio_backend[0] == "asyncio":
        import asyncio

        with pytest.raises(DriverError, match="NO_BINARY_FOR_GPU"):
            await asyncio.wait_for(asyncio.gather(kernel[1, 1](x)), HOLD_S)


async def test_warmup_prepares_kernels_and_expressions_ahead(
    anyio_backend: Any, held: Held, monkeypatch: pytest.MonkeyPatch
) -> None:
    x = await cuasync.from_host(np.arange(8, dtype=np.float32))
    monkeypatch.setattr(codegen, "_kernels", {})
    emptied(monkeypatch, launch_plan._plans)
    k = _fresh_bump()
    held.release()
    devices = list(range(cuasync.device_count()))
    await cuasync.warmup(k, x * 3.0 - 1.0, devices=devices)
    assert len(held.threads) == 2 * len(devices)
    assert all(t.startswith("cuasync-compile") for t in held.threads)
    handed = _first_use.stats()
    y = await (x * 7.0 - 2.0)  # the same structure, other scalars: prepared
    await k[1, 8](y, 8)
    assert _first_use.stats() == handed and len(held.threads) == 2 * len(devices)
    np.testing.assert_array_equal(await y.to_host(), np.arange(8, dtype=np.float32) * 7 - 1)
    await cuasync.warmup(k)  # nothing left to do
    with pytest.raises(ArgumentError, match="argument 0 must be a cuasync.Kernel"):
        await cuasync.warmup(3)  # type: ignore[arg-type]
    with pytest.raises(ArgumentError, match="devices must be"):
        await cuasync.warmup(k, devices="0")  # type: ignore[arg-type]
    # refused, the example ops given to it are consumed: no "never executed" beside it
    examples = [x * 2.0, cuasync.exp(x)]
    with pytest.raises(cuasync.errors.InvalidDeviceError):
        await cuasync.warmup(*examples, devices=[cuasync.device_count()])
    assert all(op._consumed for op in examples)


async def test_warmup_of_a_launch_prepares_its_kernel_on_the_devices_asked(
    anyio_backend: Any,
) -> None:
    """A kernel launch as ``warmup``'s example stands for its kernel: prepared on each of
    ``devices`` (not only the device of the launch's tensors), so the first await there
    compiles nothing."""
    if cuasync.device_count() < 2:
        pytest.skip("needs 2 devices (CUASYNC_EMU_DEVICES=2 on the emulator)")
    k = _fresh_bump()
    x0 = await cuasync.zeros((8,))
    await cuasync.warmup(k[1, 32](x0, 8), devices=[1])
    assert sorted(k._prepared) == [1]
    with cuasync.use_device(1):
        x1 = await cuasync.zeros((8,))
    handed = _first_use.stats()
    await k[1, 32](x1, 8)
    assert _first_use.stats() == handed  # (prepared ahead: nothing handed to compile)
    np.testing.assert_array_equal(await x1.to_host(), np.ones(8, np.float32))


@pytest.mark.skipif(
    ON_EMULATOR and nvrtc_problem() is not None, reason="the emulator compiles with NVRTC"
)
def test_a_second_process_with_a_warm_disk_cache_compiles_nothing(tmp_path: Path) -> None:
    code = """
        import asyncio
        import numpy as np
        import cuasync
        from cuasync import kernel_cache

        SRC = 'extern "C" __global__ void k(float* x, int n) { if (threadIdx.x < n) x[threadIdx.x] *= 2.0f; }'

        def twin(x, n):
            x[:n] *= 2.0

        async def main():
            x = await cuasync.from_host(np.ones(32, np.float32))
            await cuasync.Kernel(SRC, "k", emulate=twin)[1, 32](x, 32)
            y = await cuasync.tanh(x * 0.25 - 3.0)
            # built-in and generated kernels of other families too
            i = await cuasync.arange(4, dtype="int64")
            z = await cuasync.sum(cuasync.take(await cuasync.sort(y * -1.0), i) + 1.0)
            print(kernel_cache.stats().compiles, float((await y.to_host())[0]), float(await z.to_host()))

        asyncio.run(main())
    """
    env: dict[str, Any] = {"CUASYNC_KERNEL_CACHE": str(tmp_path / "kernels")}
    first = run_script(code, **env).stdout.split()
    second = run_script(code, **env).stdout.split()
    assert int(first[0]) >= 2 + 1 + 1 + 1 + 1  # kernel, expressions, arange, sort, take, sum
    assert second == ["0", *first[1:]]


@pytest.fixture
def nothing_prepared(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every generated and built-in kernel made anew (so none is prepared yet: their
    caches are emptied for the test; the compiled images stay cached in memory)."""
    for module in (codegen, reduce_codegen, builtin, sorting, scan):
        monkeypatch.setattr(module, "_kernels", {})
    emptied(monkeypatch, launch_plan._plans)  # (the elementwise kernels they hold)
    emptied(monkeypatch, reductions._GENERIC)  # (the reduction kernels seen layouts hold)
    emptied(monkeypatch, contract._SEEN)  # (and the tiled kernels seen products hold)
    monkeypatch.setattr(sorting, "_search_kernels", {})
    for files in (joins._KERNELS, indexing._KERNELS, tiled_gemm._KERNELS):
        monkeypatch.setattr(files, "_made", {})
    monkeypatch.setattr(statistics, "_READY", set())
    monkeypatch.setattr(_first_use.CUBLAS, "_prepared", {})


F32 = np.linspace(-2.0, 2.0, 24, dtype=np.float32)
I32 = np.array([3, 0, 5, 1, 3, 7], dtype=np.int32)

#: One op of each family of kernels cuasync generates or builds in, with numpy's answer:
#: ``make(x, m, idx)`` with x = F32, m = F32 as (4, 6), idx = I32 (device tensors).
FAMILIES: dict[str, tuple[Callable[..., Any], Callable[[], Any]]] = {
    "full": (lambda x, m, i: cuasync.full((5,), 2.5, dtype="float32"), lambda: np.full(5, 2.5)),
    "arange": (lambda x, m, i: cuasync.arange(6, dtype="int16"), lambda: np.arange(6)),
    "linspace": (
        lambda x, m, i: cuasync.linspace(0.0, 1.0, 5, dtype="float32"),
        lambda: np.linspace(0, 1, 5),
    ),
    "astype": (lambda x, m, i: x.astype("int8"), lambda: F32.astype(np.int8)),
    "astype of an op": (
        lambda x, m, i: (x * 2.0).astype("int16"),
        lambda: (F32 * 2).astype(np.int16),
    ),
    "reshape of an op": (
        lambda x, m, i: (x - 1.5).reshape((6, 4)),
        lambda: (F32 - 1.5).reshape(6, 4),
    ),
    "concat of a reversed view": (  # (a kernel gathers it: no copy engine reads it)
        lambda x, m, i: cuasync.concat([x[::-1], x]),
        lambda: np.concatenate([F32[::-1], F32]),
    ),
    "roll of a reversed view over two axes": (
        lambda x, m, i: cuasync.roll(m[::-1], (1, 2), axis=(0, 1)),
        lambda: np.roll(F32.reshape(4, 6)[::-1], (1, 2), axis=(0, 1)),
    ),
    "diff twice": (
        lambda x, m, i: cuasync.diff(m, n=2, axis=1),
        lambda: np.diff(F32.reshape(4, 6), n=2, axis=1),
    ),
    "var of an op": (  # (its kernels named on a stand-in for the op's output)
        lambda x, m, i: cuasync.var(m * 2.0, axis=1),
        lambda: (F32.reshape(4, 6) * 2).astype(np.float64).var(axis=1).astype(np.float32),
    ),
    "diff of an op": (
        lambda x, m, i: cuasync.diff(x * 3.0),
        lambda: np.diff(F32 * 3),
    ),
    "view of an op": (
        lambda x, m, i: cuasync.flip(m - 2.0, 1),
        lambda: np.flip(F32.reshape(4, 6) - 2, 1),
    ),
    "expression of a view of an op": (  # (the view's layout names the kernel)
        lambda x, m, i: cuasync.flip(m - 2.0, 1) * 2.0,
        lambda: np.flip(F32.reshape(4, 6) - 2, 1) * 2,
    ),
    "reshape of a view of an op": (  # (a copy: a reversed view does not reshape)
        lambda x, m, i: cuasync.flip(m - 2.0, 1).reshape((24,)),
        lambda: np.flip(F32.reshape(4, 6) - 2, 1).reshape(24),
    ),
    "expression of einsum's transpose": (  # (a view of the product's output)
        lambda x, m, i: cuasync.einsum("ij->ji", m + 1.0) * 2.0,
        lambda: (F32.reshape(4, 6) + 1).T * 2,
    ),
    "concat of a view of an op": (
        lambda x, m, i: cuasync.concat([cuasync.flip(m + 1.0, 0), m]),
        lambda: np.concatenate([np.flip(F32.reshape(4, 6) + 1, 0), F32.reshape(4, 6)]),
    ),
    "roll of a view of an op": (
        lambda x, m, i: cuasync.roll(cuasync.matrix_transpose(m + 1.0), 3),
        lambda: np.roll((F32.reshape(4, 6) + 1).T, 3),
    ),
    "copy of a view of an op": (
        lambda x, m, i: cuasync.flip(m * 3.0, 1).copy(),
        lambda: np.flip(F32.reshape(4, 6) * 3, 1),
    ),
    "expression of an op": (
        lambda x, m, i: cuasync.exp(cuasync.arange(4, dtype="float32") - 1.0),
        lambda: np.exp(np.arange(4, dtype=np.float32) - 1),
    ),
    "reduction of an op": (
        lambda x, m, i: cuasync.sum(m.astype("float64"), axis=1),
        lambda: F32.reshape(4, 6).astype(np.float64).sum(axis=1),
    ),
    "reduction into the tensor it reads": (  # (a new tensor, then copied into out)
        lambda x, m, i: cuasync.sum(m * 2.0, axis=0, out=m[1]),
        lambda: (F32.reshape(4, 6) * 2).sum(axis=0),
    ),
    "expression of a reshaped view": (  # (reshape of a tensor: a view op, declared)
        lambda x, m, i: cuasync.reshape(m[:, :4], (4, 2, 2)) * 2.0,
        lambda: F32.reshape(4, 6)[:, :4].reshape(4, 2, 2) * 2,
    ),
    "copy of a reshaped view": (
        lambda x, m, i: cuasync.reshape(m[:, :4], (4, 2, 2)).reshape((16,)),
        lambda: F32.reshape(4, 6)[:, :4].ravel(),
    ),
    "var": (
        lambda x, m, i: cuasync.var(m, axis=0),
        lambda: F32.reshape(4, 6).astype(np.float64).var(axis=0),
    ),
    "cumsum": (lambda x, m, i: cuasync.cumsum(m, axis=1), lambda: F32.reshape(4, 6).cumsum(1)),
    "sort": (lambda x, m, i: cuasync.sort(x * -1.0), lambda: np.sort(-F32)),
    "searchsorted": (
        lambda x, m, i: cuasync.searchsorted(x, x[::5]),
        lambda: np.searchsorted(F32, F32[::5]),
    ),
    "isin": (
        lambda x, m, i: cuasync.isin(i, i[:3]),
        lambda: np.isin(I32, I32[:3]),
    ),
    "take": (lambda x, m, i: cuasync.take(x, i), lambda: F32[I32]),
    "gather": (
        lambda x, m, i: cuasync.gather(m, i[:3], axis=1),
        lambda: F32.reshape(4, 6)[:, I32[:3]],
    ),
    "scatter": (
        lambda x, m, i: cuasync.scatter(x, i, 9.0, axis=0),
        lambda: np.where(np.isin(np.arange(24), I32), np.float32(9), F32),
    ),
    "pad": (lambda x, m, i: cuasync.pad(x[:4], 1), lambda: np.pad(F32[:4], 1)),
    "tril": (lambda x, m, i: cuasync.tril(m), lambda: np.tril(F32.reshape(4, 6))),
    "integer matmul": (
        lambda x, m, i: cuasync.matmul(i.reshape((2, 3)), i.reshape((3, 2))),
        lambda: I32.reshape(2, 3) @ I32.reshape(3, 2),
    ),
    "matmul (tiled kernel)": (
        lambda x, m, i: cuasync.matmul(m, m.mT),
        lambda: F32.reshape(4, 6) @ F32.reshape(4, 6).T,
    ),
    "matmul (cuBLAS)": (  # (above tiled_gemm.SMALL_MACS: 160 x 160 x 160)
        lambda x, m, i: cuasync.matmul(cuasync.ones((160, 160)), cuasync.ones((160, 160))),
        lambda: np.full((160, 160), 160.0),
    ),
    "dup of a broadcast": (
        lambda x, m, i: cuasync.broadcast_to(x[:3], (2, 3)).dup(),
        lambda: np.broadcast_to(F32[:3], (2, 3)),
    ),
}


@pytest.mark.parametrize("family", list(FAMILIES))
async def test_every_kernel_family_is_prepared_off_the_loop(
    anyio_backend: Any, held: Held, nothing_prepared: None, family: str
) -> None:
    x = await cuasync.from_host(F32)
    m = x.reshape((4, 6))
    i = await cuasync.from_host(I32)
    make, expected = FAMILIES[family]
    out, made = await _ticking_while(held, make(x, m, i))
    _assert_prepared_off_the_loop(held, made)
    np.testing.assert_allclose(await out.to_host(), expected(), rtol=1e-6)
    # a second op of the same kind prepares nothing
    handed, prepared = _first_use.stats(), len(held.threads)
    await make(x, m, i)
    assert (_first_use.stats(), len(held.threads)) == (handed, prepared)


async def test_warmup_of_an_op_prepares_every_kernel_it_launches(
    anyio_backend: Any, held: Held, nothing_prepared: None
) -> None:
    x = await cuasync.from_host(F32)
    i = await cuasync.from_host(I32)
    held.release()
    await cuasync.warmup(cuasync.take(x, i), cuasync.sort(x), cuasync.full((3,), 1, dtype="uint8"))
    assert len(held.threads) == 1 + 4 + 1  # take, the sort's four passes, fill
    assert all(t.startswith("cuasync-compile") for t in held.threads)
    prepared = len(held.threads)
    np.testing.assert_array_equal(await (await cuasync.take(x, i)).to_host(), F32[I32])
    await cuasync.sort(x)
    assert len(held.threads) == prepared
