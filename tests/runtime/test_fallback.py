"""A hub without the reactor (``Hub(native=None)``): every await through a host callback.

The hub takes the native module as an argument, so these tests swap in a hub built
without it and run the same behaviours as the reactor path: awaits on every loop, gates,
cancellation, blocking waits. Completions go through host functions; words through
ctypes.
"""

from __future__ import annotations

from collections.abc import Iterator

import anyio
import numpy as np
import pytest
from helpers import await_held

import cuasync
import cuasync.testing as ct
from cuasync._core import completion
from cuasync._native import PROCESS

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def fallback() -> Iterator[completion.Hub]:
    """A hub without the reactor, installed for this module's tests."""
    ct.settle()  # every completion of the native hub is finished before the swap
    saved = PROCESS.hub
    hub = completion.Hub(native=None)
    PROCESS.hub = hub
    try:
        yield hub
        assert ct.settle()
    finally:
        PROCESS.hub = saved


async def test_awaits_complete_through_host_functions(anyio_backend, fallback) -> None:
    before = cuasync.stats()
    assert not before.native and not before.reactor
    out = await cuasync.from_host(np.arange(8.0)).then(lambda t: t.to_host())
    np.testing.assert_array_equal(out, np.arange(8.0))
    after = cuasync.stats()
    assert after.completed_reactor == before.completed_reactor
    assert after.completed_host_callback + after.completed_inline > (
        before.completed_host_callback + before.completed_inline
    )


async def test_gated_work_waits_then_completes(anyio_backend, fallback, baseline) -> None:
    out = await await_held(lambda: cuasync.zeros((4,)).then(lambda t: t.to_host()))
    np.testing.assert_array_equal(out, np.zeros(4))


async def test_cancelling_a_held_await_releases_everything(
    anyio_backend, fallback, baseline
) -> None:
    with ct.gate():
        with anyio.move_on_after(0.01) as scope:
            await cuasync.zeros((1 << 16,)).then(lambda t: t.to_host())
        assert scope.cancelled_caught
    # baseline: the work lands once the gate opens, then its memory and slots come back


def test_blocking_wait_and_done(fallback, baseline) -> None:
    with ct.gate():
        fut = cuasync.zeros((4,)).submit()
        assert not fut.done()
    assert fut.wait().shape == (4,)
    assert fut.done()


def test_a_new_hubs_slab_starts_at_generation_zero(monkeypatch) -> None:
    """Pinned memory can come back recycled: a stale word would open a gate (or land a
    completion) before the GPU writes it. (A fallback hub built after earlier tests had
    freed pinned memory once found its first gate open on the H200.)"""
    import ctypes

    from cuasync._backends import get_backend

    backend = get_backend()
    allocate = backend.host_alloc

    def recycled(nbytes: int) -> int:
        address = allocate(nbytes)
        ctypes.memset(address, 0x7F, nbytes)  # what a previous owner left there
        return address

    monkeypatch.setattr(backend, "host_alloc", recycled)
    hub = completion.Hub(native=None)
    words = (ctypes.c_uint32 * hub.nslots).from_address(hub.slab)
    assert not any(words)
    slot, address, value = hub.claim_word()
    assert value == 1 and ctypes.c_uint32.from_address(address).value == 0  # held
    hub.release_word(slot, value)
    assert ctypes.c_uint32.from_address(address).value == value
