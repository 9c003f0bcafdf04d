"""A seen matmul submitted by the native core as a library call
(``cuasync/_launch/library_call.py``, ``BY_CALL`` in ``reactor/python/express.c``): the
core's counters show that it took the product; its result, its ordering after another
stream's write, a failure of the call and the cases that take the long way (a cancel
scope, cuBLAS not yet loaded on the device) behave as the long way's."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from helpers import await_held, still_pending, wait_until

import cuasync
from cuasync import _first_use as first_use
from cuasync._backends import get_backend
from cuasync._core import block_cache, wake
from cuasync._core.completion import get_hub
from cuasync._first_use import CUBLAS
from cuasync._ops import contract
from cuasync._ops.gemm import gemm_call
from cuasync.errors import CaptureError, LibraryError

pytestmark = pytest.mark.anyio


def _core() -> Any:
    """The native core, where products can take it (else the test skips)."""
    hub = get_hub()
    if hub.express is None:
        pytest.skip("the native core is off (CUASYNC_NATIVE=off)")
    if not hub.use_reactor:
        pytest.skip("awaits complete through host callbacks: the core takes no launch")
    return hub.express


async def _pair(seed: int = 1) -> tuple[np.ndarray[Any, Any], cuasync.Tensor]:
    # (160 x 160 x 160: cuBLAS's, above tiled_gemm.SMALL_MACS)
    a = np.random.default_rng(seed).standard_normal((160, 160)).astype(np.float32)
    return a, await cuasync.from_host(a)


async def _seen(m: cuasync.Tensor) -> None:
    """matmul(m, m)'s kind seen: its first run (the long way) records it."""
    await cuasync.matmul(m, m)
    op = cuasync.matmul(m, m)
    assert isinstance(op._node.value, contract._SeenProduct)
    await op


async def test_a_seen_matmul_is_one_library_call_of_the_core(anyio_backend: Any) -> None:
    # awaited, synchronized and submitted: each product one submission of the core,
    # none declined, and each result the product of its own operands
    core = _core()
    a, m = await _pair()
    await _seen(m)
    launches, declined = core.launches, core.declined
    results = [
        await cuasync.matmul(m, m),
        cuasync.matmul(m, m).sync(allow_in_loop=True),
        await cuasync.matmul(m, m).submit(),
    ]
    assert (core.launches - launches, core.declined - declined) == (3, 0)
    for r in results:
        np.testing.assert_allclose(await r.to_host(), a @ a, rtol=1e-4, atol=1e-4)
    b, n = await _pair(seed=2)  # other tensors of the kind: their own product
    np.testing.assert_allclose(
        await (await cuasync.matmul(n, n)).to_host(), b @ b, rtol=1e-4, atol=1e-4
    )


async def test_a_library_call_waits_for_another_streams_write(anyio_backend: Any) -> None:
    # the product on one stream reads what a copy on another wrote: the core orders it
    # after that write (held behind a gate), and the product is of the copied values
    _core()
    _, m = await _pair()
    await _seen(m)
    b = np.full((160, 160), 0.5, np.float32)
    src = await cuasync.from_host(b)
    await cuasync.add(src, 0.0, out=await cuasync.empty_like(src))  # (its kernel loaded)
    writer, reader = cuasync.Device(0).new_stream(), cuasync.Device(0).new_stream()
    with cuasync.testing.gate(writer) as gate:
        written = cuasync.add(src, 0.0, out=m).submit_on(writer)
        product = cuasync.matmul(m, m).submit_on(reader)
        assert still_pending(product.done)
        gate.open()
        await written
        result = await product
    np.testing.assert_allclose(await result.to_host(), b @ b, rtol=1e-5)


async def test_a_parked_library_call_lands_and_teaches_its_kinds_wake(
    anyio_backend: Any,
) -> None:
    # held behind a gate past the inline spin, the await parks and the reactor wakes it;
    # the early wake learns the time of this kind of product (not of every GEMM alike)
    core = _core()
    a, m = await _pair()
    await _seen(m)
    launches = core.launches
    kinds: list[Any] = []

    def product() -> Any:
        op = cuasync.matmul(m, m)
        kinds.append(op._node.value._seen)
        return op

    wake.forget()
    result = await await_held(product)
    assert core.launches == launches + 1
    np.testing.assert_allclose(await result.to_host(), a @ a, rtol=1e-4, atol=1e-4)
    if wake.POLICY.on:
        assert wake.estimate((gemm_call(m.device.ordinal), kinds[0])) is not None


async def test_a_failing_library_call_raises_and_holds_nothing(
    anyio_backend: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the call raises: the await raises it, no slot or result memory is left held, and
    # the next product runs
    _core()
    a, m = await _pair()
    await _seen(m)
    backend = get_backend()
    device = m.device
    block_cache.flush(device)
    before = device.memory_info().used, cuasync.stats().slots_armed

    def failing(*args: Any) -> None:
        raise LibraryError(13, "CUBLAS_STATUS_EXECUTION_FAILED", "cublasLtMatmul")

    monkeypatch.setattr(backend, "gemm", failing)
    with pytest.raises(LibraryError, match="EXECUTION_FAILED"):
        await cuasync.matmul(m, m)
    with pytest.raises(LibraryError):
        cuasync.matmul(m, m).submit()
    monkeypatch.undo()

    def released() -> bool:  # (once the stream's earlier work has drained)
        block_cache.flush(device)
        return (device.memory_info().used, cuasync.stats().slots_armed) == before

    await wait_until(released)
    np.testing.assert_allclose(
        await (await cuasync.matmul(m, m)).to_host(), a @ a, rtol=1e-4, atol=1e-4
    )


async def test_in_a_cancel_scope_a_seen_matmul_takes_the_long_way(anyio_backend: Any) -> None:
    # a library call carries no cancel word: inside a scope the long way runs it (and
    # guards it where the backend can), so a cancelled scope's product never lands
    core = _core()
    a, m = await _pair()
    await _seen(m)
    launches = core.launches
    with cuasync.CancelScope():
        r = await cuasync.matmul(m, m)
    assert core.launches == launches
    np.testing.assert_allclose(await r.to_host(), a @ a, rtol=1e-4, atol=1e-4)


async def test_before_cublas_is_loaded_on_a_device_its_await_loads_it_off_the_loop(
    anyio_backend: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a kind seen on one device, multiplied on a device where cuBLAS is not loaded: the
    # core does not take it until the await has loaded cuBLAS on the compile thread;
    # synchronized there, it is loaded inline and recorded, and the core takes the next
    core = _core()
    a, m = await _pair()
    await _seen(m)
    monkeypatch.setattr(CUBLAS, "_prepared", {})
    off_loop = first_use.stats()
    r = await cuasync.matmul(m, m)
    assert first_use.stats() == off_loop + 1 and m.device.ordinal in CUBLAS._prepared
    np.testing.assert_allclose(await r.to_host(), a @ a, rtol=1e-4, atol=1e-4)
    monkeypatch.setattr(CUBLAS, "_prepared", {})
    launches = core.launches
    cuasync.matmul(m, m).sync(allow_in_loop=True)
    assert core.launches == launches and m.device.ordinal in CUBLAS._prepared
    await cuasync.matmul(m, m)
    assert core.launches == launches + 1 and first_use.stats() == off_loop + 1


async def test_a_seen_matmul_is_not_captured_into_a_graph(anyio_backend: Any) -> None:
    # capture refuses a new result's allocation, as the long way always has: the core
    # does not take a capturing stream
    _core()
    _, m = await _pair()
    await _seen(m)
    with pytest.raises(CaptureError, match="captur"):
        cuasync.matmul(m, m).graph()


async def test_zeros_and_empty_are_one_library_call_of_the_core(
    anyio_backend: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a new tensor, zeroed or not, is the core's library call (its memset, then its
    # flag) awaited, synchronized or submitted; zeros inside a cancel scope takes the long
    # way (which guards its memset), empty does not need to
    core = _core()
    made = [cuasync.zeros((64,), "int32"), cuasync.empty((64,), "int32")]
    for op in made:
        await op
    backend = get_backend()
    memsets: list[int] = []
    real = backend.memset_d8_async

    def counted(ptr: int, value: int, nbytes: int, stream: int) -> None:
        memsets.append(nbytes)
        real(ptr, value, nbytes, stream)

    monkeypatch.setattr(backend, "memset_d8_async", counted)
    for make, zeroed in ((cuasync.zeros, True), (cuasync.empty, False)):
        launches, before = core.launches, len(memsets)
        got = [
            await make((64,), "int32"),
            make((64,), "int32").sync(allow_in_loop=True),
            await make((64,), "int32").submit(),
        ]
        assert core.launches == launches + 3
        assert memsets[before:] == ([256] * 3 if zeroed else [])
        for t in got:
            assert (t.shape, t.dtype) == ((64,), np.dtype(np.int32))
            if zeroed:
                assert not (await t.to_host()).any()
        launches = core.launches
        with cuasync.CancelScope():
            t = await make((64,), "int32")
        assert core.launches == launches + (0 if zeroed else 1)
        if zeroed:
            assert not (await t.to_host()).any()
    empty_ = await cuasync.empty((0,))  # (no elements: the long way, as before)
    assert empty_.shape == (0,)
