"""The pure-Python fallback (no native module: no C compiler at install) in this process.

The hub takes the native module as an argument, so these tests swap in a hub built
without it and run the same behaviours as the native path: awaits on every loop, gates,
cancellation, blocking waits. Completions go through host functions; words through
ctypes. (tests/runtime/test_reliability.py checks the install-time warning in a subprocess.)
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator

import anyio
import numpy as np
import pytest
from helpers import await_held

import cuasync
import cuasync.testing as ct
from cuasync._core import completion

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def fallback() -> Iterator[completion.Hub]:
    """A hub without the native module, installed for this module's tests."""
    ct.settle()  # every completion of the native hub is finished before the swap
    saved = completion._hub
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # "the native module is not built"
        hub = completion.Hub(native=None)
    completion._hub = hub
    try:
        yield hub
        assert ct.settle()
    finally:
        completion._hub = saved


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
