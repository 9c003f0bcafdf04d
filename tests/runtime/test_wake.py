"""The early wake of a parked await (``cuasync/_core/wake.py``): whatever its estimate
(too early, too late, none), an await returns its work's value; a fault still resolves
it; a cancelled await leaves no wake set on its loop's timer.

Work is held with gates, never timed: an estimate is set by hand for the key of a
generic await on a stream (the stream's handle), so the early wake's path is known.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import anyio
import helpers
import numpy as np
import pytest
from helpers import awaited_completions, reactor_path, wait_until
from hypothesis import given, settings
from hypothesis import strategies as st

import cuasync
import cuasync.testing as ct
from cuasync._core import wake
from cuasync._core.completion import Stats, get_hub
from cuasync._core.loops import running_adapter
from cuasync._interop.wait import wake_key

pytestmark = [pytest.mark.anyio, reactor_path]


@pytest.fixture
def stream() -> Iterator[cuasync.Stream]:
    """A stream of its own as the policy, the early wake on and no estimates."""
    s = cuasync.Device(0).new_stream()
    saved = wake.POLICY.on
    wake.POLICY.on = True
    wake.forget()
    try:
        with cuasync.use_policy(cuasync.SingleStream(s)):
            yield s
    finally:
        wake.POLICY.on = saved
        wake.forget()


def expect(stream: cuasync.Stream, ns: int, dev: int | None = None) -> None:
    """Make generic awaits on ``stream``, and awaits of ``cuasync.wait(stream)`` (a library
    call the core takes), expect their work ``ns`` after their wait began, give or take
    ``dev`` (default: 1/16 of it, a new estimate's)."""
    for key in (stream.handle, wake_key(stream)):
        est = wake.Estimate(ns)
        if dev is not None:
            est.dev = dev
        wake._estimates[key] = est


async def held_wait(
    stream: cuasync.Stream,
    until: Callable[[], bool] | None = None,
    make: Callable[[], Awaitable[object]] | None = None,
    alone: bool = False,
) -> tuple[object, int]:
    """``await make()`` (default: ``cuasync.wait(stream)``) behind a gate on ``stream``,
    opened once the await has parked and ``until()`` holds; its value, and the wakes the
    loop's timer still holds after it. ``alone``: no other task is ready when it awaits
    (this one looks every 0.5 ms instead of every pass: not a burst)."""
    results: list[object] = []

    async def waiter() -> None:
        results.append(await (make() if make is not None else cuasync.wait(stream)))

    with ct.gate(stream) as gate:
        async with anyio.create_task_group() as tg:
            tg.start_soon(waiter)
            between = 0.0005 if alone else 0
            await wait_until(lambda: awaited_completions() > 0, between=between)
            if until is not None:
                await wait_until(until, between=between)
            assert not results
            gate.open()
    timer = running_adapter().timer
    return results[0], 0 if timer is None else len(timer.heap)


def woken() -> bool:
    """Whether the loop's timer has fired for every wake set on it (none is left)."""
    timer = running_adapter().timer
    return timer is not None and not timer.heap


async def test_an_estimate_too_early_ends_its_spin_and_the_reactor_finishes(
    anyio_backend, stream
) -> None:
    expect(stream, 100_000)  # 0.1 ms: the gate holds the work far longer
    value, left = await held_wait(stream, woken)
    assert value is None
    assert left == 0
    assert (wake.estimate(wake_key(stream)) or 0) > 100_000  # pushed up by the miss


def rearmed_then(hub: Any, monkeypatch: Any, then: Callable[[], None]) -> None:
    """Call ``then()`` each time an early wake's window ended before the landing (its
    spin arms the slot again, for the reactor to report: ``hub.arm(comp, queue)``, where
    parking arms it with its quiet time as well)."""
    arm = hub.arm

    def spy(comp: Any, queue: Any, *quiet: Any) -> None:
        arm(comp, queue, *quiet)
        if not quiet:
            then()

    monkeypatch.setattr(hub, "arm", spy)


def learnt_entries(hub: Any, monkeypatch: Any) -> list[wake.Pending]:
    """The entries of the awaits that park from now on (``hub.park``'s, which the hub's
    suspension calls by name); ``wake.resumed`` stamps ``resumed`` on each that resumed."""
    entries: list[wake.Pending] = []
    park = hub.park

    def spy(*args: Any) -> wake.Pending | None:
        entry = park(*args)
        if entry is not None:
            entries.append(entry)
        return entry

    monkeypatch.setattr(hub, "park", spy)
    return entries


async def test_the_stats_count_the_time_a_wake_spun(anyio_backend, stream, monkeypatch) -> None:
    """An early wake's spin (here one whose window ends before the work lands: the gate
    opens only then) is counted in ``early_spin_ns``, and bounds ``early_spin_max_ns``."""
    hub = get_hub()
    entries = learnt_entries(hub, monkeypatch)
    with ct.gate(stream) as gate:
        rearmed_then(hub, monkeypatch, gate.open)  # (the reactor then reports the landing)
        expect(stream, 100_000)  # 0.1 ms: the gate holds the work past the window
        before = cuasync.stats()
        with anyio.fail_after(30):  # (no wake set: nothing would open the gate)
            await cuasync.wait(stream)  # (the only task: nothing else ready, so it spins)
        after = cuasync.stats()
    (entry,) = entries
    assert entry.resumed >= entry.lo  # the await resumed, and learnt from these times
    assert entry.looked and entry.lo  # the wake looked, and its window ended first
    spun_ns = after.early_spin_ns - before.early_spin_ns
    assert 0 < spun_ns <= entry.lo - entry.looked  # (the spin began after the look)
    assert after.early_spin_max_ns >= spun_ns
    assert after.early_misses == before.early_misses + 1


async def test_a_wake_that_looks_after_the_landing_is_counted_late(
    anyio_backend, stream, monkeypatch
) -> None:
    """Work that lands well before its steady estimate (the gate opens once the await
    parked; the reactor leaves the slot to the wake meanwhile) is finished by the wake,
    which counts itself late in ``early_late``: that await paid the time between.

    The reactor is quiet only until the wake's window ends, and a loaded host runs the
    loop's timer milliseconds late (TSan on the 2-core CI host: past a 1.5 ms estimate's
    window, the reactor reported first), so the window here spans 30 ms past a 10 ms
    estimate. The landing can still come after the wake looked (a host that stalled the
    gate's opening: then the wake's spin sees it, and it is not late): up to five tries."""
    monkeypatch.setattr(wake.POLICY, "tolerance_ns", 30_000_000)
    monkeypatch.setattr(wake.POLICY, "spin_max_ns", 40_000_000)
    monkeypatch.setattr(wake.POLICY, "quiet_max_ns", 40_000_000)
    for _ in range(5):
        wake.forget()
        expect(stream, 10_000_000, dev=1_000)  # steady: the work lands well before it
        before = cuasync.stats()
        value, left = await held_wait(stream)
        after = cuasync.stats()
        assert value is None
        assert left == 0
        by_wake = after.early_wakes - before.early_wakes
        by_reactor = after.completed_reactor - before.completed_reactor
        assert by_wake + by_reactor == 1
        late = after.early_late - before.early_late
        assert late <= by_wake  # (only a wake's finish is counted late)
        if late:
            break
    assert late == 1


async def test_the_early_wake_keeps_the_gil_only_for_a_launch(
    anyio_backend, stream, monkeypatch
) -> None:
    """The early wake's spin keeps the GIL for the hub's hold (``Pending.hold``: on CUDA
    through the window) for a launch the native core awaits (its key: the kernel and
    grid), whose work only the device does, and not at all for a generic op (an upload
    from pageable memory waits for Python threads; every op without the core).

    A wake that runs after its window (a late timer on a loaded host) spins not at all:
    each part tries until one spun."""
    from cuasync._core import express
    from cuasync._core.completion import SPIN_HOLD_NS
    from cuasync.bench.completion import spin_ns  # (a kernel that spins for ns)

    hub = get_hub()
    # (the hub's own: none where a Python thread writes the flags, the emulator's)
    assert hub.spin_hold_ns == (0 if hub.backend.python_writes_flags else SPIN_HOLD_NS)
    assert hub.backend.python_writes_flags is (hub.backend.name == "emulator")
    monkeypatch.setattr(hub, "spin_hold_ns", 1)  # (1 ns: harmless where flags need the GIL)
    entries = learnt_entries(hub, monkeypatch)
    gates: list[Any] = []
    rearmed_then(hub, monkeypatch, lambda: gates and gates[-1].open())

    def holds() -> set[tuple[str, int]]:  # (each wake that spun: its key's kind, its hold)
        return {
            ("launch" if wake.is_launch(e.key) else "generic", e.hold)
            for e in entries
            if e.resumed and (e.seen or e.lo)
        }

    x = np.arange(1000.0)
    await cuasync.from_host(x)  # (its path warm before a gate holds the stream)
    for _ in range(10):
        with ct.gate(stream) as gate:
            gates.append(gate)  # (opened after the window: the reactor reports it)
            expect(stream, 1_000_000, dev=60_000)  # steady: a window of 200 us and more
            with anyio.fail_after(30):
                await cuasync.from_host(x)  # (the only task: nothing else ready)
        if holds():
            break
    gates.clear()
    assert holds() == {("generic", 0)}
    for _ in range(40):  # (the kernel's length learnt, then a wake that spins)
        await spin_ns[1, 1](2_000_000)
        if len(holds()) > 1:
            break
    assert holds() <= {("generic", 0), ("launch", 1)}  # (each kind its own hold)
    if express._core() is not None:  # (with the core, a kernel's await is a launch's)
        assert ("launch", 1) in holds()


async def test_an_estimate_too_late_is_overtaken_by_the_reactor(anyio_backend, stream) -> None:
    expect(stream, 60_000_000_000)  # a minute: the reactor wakes the loop first
    before = cuasync.stats().completed_reactor
    value, left = await held_wait(stream)
    assert value is None
    assert left == 0  # the minute-long wake was taken off the timer
    assert cuasync.stats().completed_reactor == before + 1
    assert (wake.estimate(wake_key(stream)) or 0) < 60_000_000_000  # pulled down


async def test_without_an_estimate_an_await_parks_and_teaches_one(anyio_backend, stream) -> None:
    assert wake.estimate(wake_key(stream)) is None
    value, _ = await held_wait(stream)
    assert value is None
    assert wake.estimate(wake_key(stream)) is not None


async def test_values_come_back_whatever_the_estimate(anyio_backend, stream) -> None:
    x = np.arange(1000.0)

    def pipeline() -> Awaitable[object]:
        return cuasync.from_host(x).then(lambda t: t * 2.0).then(lambda t: t.to_host())

    await pipeline()  # (its kernels loaded before a gate holds the stream)
    for ns in (0, 100_000, 1_000_000, 60_000_000_000):
        wake.forget()
        expect(stream, ns)
        value, left = await held_wait(stream, make=pipeline)
        np.testing.assert_array_equal(value, x * 2.0)
        assert left == 0


async def test_a_cancelled_await_leaves_no_wake_set(anyio_backend, stream) -> None:
    expect(stream, 60_000_000_000)
    with ct.gate(stream):
        with anyio.move_on_after(60) as scope:  # (cancelled below, never by time)

            async def cancel_when_parked() -> None:
                await wait_until(lambda: awaited_completions() > 0)
                timer = running_adapter().timer
                assert timer is not None and len(timer.heap) == 1 and timer.armed
                scope.cancel()

            async with anyio.create_task_group() as tg:
                tg.start_soon(cancel_when_parked)
                await cuasync.wait(stream)
        assert scope.cancelled_caught
        timer = running_adapter().timer
        assert timer.heap == [] and timer.armed == 0  # nothing left armed on the loop
    assert ct.settle()


async def test_a_wake_the_timer_refused_leaves_the_slot_to_the_reactor(
    anyio_backend, stream, monkeypatch
) -> None:
    """A steady estimate's slot is armed for its loop's wake alone (the reactor is not
    woken for it); where the loop's timer cannot be set, the reactor watches it."""
    fd = wake.timerfd()
    if fd < 0:
        pytest.skip("no timerfd here")
    refusing = wake.Timer(fd)
    refusing.close()  # (a closed timer sets nothing: as one the kernel refused)
    adapter = running_adapter()
    monkeypatch.setattr(adapter, "timer", refusing)  # (the loop's own stays watched)
    hub = get_hub()
    arms: list[bool] = []
    arm = hub.arm

    def spy(comp: Any, queue: Any, quiet_until: int = 0, watched: bool = False) -> None:
        arms.append(watched)
        arm(comp, queue, quiet_until, watched)

    monkeypatch.setattr(hub, "arm", spy)
    expect(stream, 1_000_000, dev=10_000)  # 1 ms, steady: quiet and watched
    with anyio.fail_after(30):  # (a parked reactor not woken for it would hang here)
        value, left = await held_wait(stream)
    assert value is None and left == 0
    assert arms == [True, False]  # armed for the wake, then for the reactor


async def test_the_switch_selects_todays_park(anyio_backend, stream) -> None:
    wake.POLICY.on = False
    expect(stream, 100_000)
    misses = cuasync.stats().early_misses
    value, left = await held_wait(stream)
    assert value is None and left == 0
    assert cuasync.stats().early_misses == misses  # no early wake was set


@pytest.mark.parametrize(
    ("estimate_ns", "prewake_ns", "prewakes"),
    [(10_000_000, 300_000, 1), (10_000_000, 0, 0), (300_000, 300_000, 0)],
    ids=["long", "long, pre-wakes off", "short"],
)
async def test_a_long_waits_wake_is_preceded_by_one_pre_wake(
    anyio_backend, stream, monkeypatch, estimate_ns, prewake_ns, prewakes
) -> None:
    """A wake due milliseconds after the wait began is preceded by a pre-wake (the thread
    warmed before its spin), which only sets the timer again; a short wait gets none.
    (10 ms: a pre-wake is set only where it is still ahead when the await parks.)"""
    monkeypatch.setattr(wake.POLICY, "prewake_ns", prewake_ns)
    expect(stream, estimate_ns)  # (the gate holds the work past its window)
    before = cuasync.stats()
    value, left = await held_wait(stream, woken)
    after = cuasync.stats()
    assert value is None and left == 0  # (woken: the wake itself ran after its pre-wake)
    assert after.early_prewakes - before.early_prewakes == prewakes


@pytest.fixture
def quiet_for_200ms() -> Iterator[None]:
    saved = wake.POLICY.quiet_max_ns
    wake.POLICY.quiet_max_ns = 200_000_000
    try:
        yield
    finally:
        wake.POLICY.quiet_max_ns = saved


def reactor_naps_longer_than(ns: int) -> Callable[[], bool]:
    reactor = get_hub().reactor
    return lambda: reactor.backoff_ns > ns


async def test_a_steady_estimate_lets_the_reactor_leave_the_slot_alone(
    anyio_backend, stream, quiet_for_200ms
) -> None:
    """While a steadily estimated await waits for its wake, the reactor naps through
    (no spin, no scans but the stale probes'; its longest nap otherwise is 2 ms), and
    the value still comes back when the work lands long before the estimate (after
    the quiet time at most)."""
    expect(stream, 10_000_000_000, dev=10_000)  # 10 s, give or take 10 us: steady
    value, left = await held_wait(stream, reactor_naps_longer_than(2_000_000))
    assert value is None and left == 0


async def test_an_unsteady_estimate_is_scanned_for_as_any_await(anyio_backend, stream) -> None:
    est = wake.Estimate(10_000_000_000)
    est.dev = est.ns >> 2  # work that varies: the wake is set, the reactor keeps watching
    wake._estimates[stream.handle] = est
    reactor = get_hub().reactor
    naps: list[int] = []

    def sampled() -> bool:
        naps.append(reactor.backoff_ns)
        return len(naps) > 200

    value, left = await held_wait(stream, sampled)
    assert value is None and left == 0
    assert max(naps) <= 2_000_000  # (the reactor's long-nap cap)


@pytest.mark.skipif(not helpers.NATIVE_ON, reason="the native core's inline spin")
async def test_a_launch_learnt_long_parks_without_the_inline_spin(anyio_backend, stream) -> None:
    """Where its kernel's ``parked_grid`` is its grid and four spin budgets are at most its
    ``parked_ns``, an await parks at once and still returns its value, with another task
    ready when it awaits (a burst: on asyncio, handed to Python after stepping aside) and
    with none (the native core's await); a landing no spin saw clears the hint; a larger
    budget (one that says "spin") spins first."""
    prepared, grid = wake_key(stream)  # (cuasync.wait: a library call the core takes)
    prepared.parked_grid, prepared.parked_ns = grid, 1_000_000  # 1 ms: 50 budgets
    adapter = running_adapter()
    hub = get_hub()
    saved = hub.spin_budget_us
    hub.spin_budget_us = 20  # the default (a run with CUASYNC_SPIN_BUDGET_US=0 has none to skip)
    try:
        expect(stream, 60_000_000_000)  # (the reactor finishes it: no wake set in time)
        # Held behind a gate: on an idle stream a wait may land before the await's first
        # look after parking (on a GPU it does), and such a landing (short work, no
        # suspend) keeps the hint. long_ops off: a burst after a long op skips its spin
        # for that reason first.
        for alone in (False, True):  # (with a task ready: stepping aside; then mostly not)
            adapter.long_ops = False
            before = cuasync.stats()
            value, left = await held_wait(stream, alone=alone)
            after = cuasync.stats()
            assert value is None and left == 0
            assert after.spins_skipped_long == before.spins_skipped_long + 1
            assert after.spins_skipped == before.spins_skipped
            assert prepared.parked_grid is None  # no spin saw it land: the next one spins
            await cuasync.wait(stream)
            assert cuasync.stats().spins_skipped_long == after.spins_skipped_long
            prepared.parked_grid = grid
        hub.spin_budget_us = 2_000_000  # 2 s: four of them outlast any estimate here
        adapter.long_ops = False
        await cuasync.wait(stream)
        last = cuasync.stats()
        assert last.spins_skipped_long == after.spins_skipped_long  # it spun
        assert last.spins_skipped == after.spins_skipped
    finally:
        hub.spin_budget_us = saved
        prepared.parked_grid = None


def _woken_entry(stream: cuasync.Stream, *, seen: bool) -> wake.Pending:
    """A parked await of ``cuasync.wait(stream)`` whose wake ran: its spin saw the
    landing (``seen``), or it had landed before the wake looked."""
    entry = wake.Pending(get_hub(), None, None, wake_key(stream), parked=1_000)
    entry.due, entry.looked = 200_000, 210_000
    entry.seen = 300_000 if seen else 0
    return entry


@pytest.mark.skipif(not helpers.NATIVE_ON, reason="the native core's key (a library call)")
def test_a_steady_long_estimate_lets_launches_park_at_once_until_one_lands_unseen(
    stream,
) -> None:
    prepared, grid = wake_key(stream)
    try:
        expect(stream, 300_000)  # steady (deviation 1/16), 0.3 ms
        parked = time.monotonic_ns() - 300_000  # (landed 0.3 ms after parking)
        unwoken = wake.Pending(get_hub(), None, None, wake_key(stream), parked=parked)
        wake.resumed(unwoken)  # no wake ran: its time says little (a wake-up's included)
        assert prepared.parked_grid is None
        wake.resumed(_woken_entry(stream, seen=True))
        assert prepared.parked_grid == grid
        assert prepared.parked_ns == wake.estimate(wake_key(stream))
        wake.resumed(_woken_entry(stream, seen=False))  # it may have got short: spin again
        assert prepared.parked_grid is None
        wake.resumed(_woken_entry(stream, seen=True))  # (the estimate is unsteady now)
        assert prepared.parked_grid is None
        for _ in range(6):  # steady again
            wake.resumed(_woken_entry(stream, seen=True))
        assert prepared.parked_grid == grid
        wake.forget()  # estimates gone: every launch spins again
        assert prepared.parked_grid is None
        expect(stream, 300_000)
        wake.resumed(_woken_entry(stream, seen=True))
        wake.POLICY.on = False  # no early wake: a skipped spin would cost a reactor wake
        assert prepared.parked_grid is None
        wake.POLICY.on = True
        expect(stream, 30_000)  # shorter than the floor (100 us)
        wake.resumed(_woken_entry(stream, seen=True))
        assert prepared.parked_grid is None
    finally:
        prepared.parked_grid = None


def test_an_unsteady_estimate_gets_a_short_look_at_its_expected_landing() -> None:
    """Work whose length varies (a stream shared with others' queued work) is not spun
    for through its spread: the wake looks around the expected landing and the reactor
    keeps scanning; a steady estimate's wake spins through its spread, the reactor quiet."""
    lead = 20_000
    steady = wake.Estimate(300_000)  # deviation 1/16
    due, until, quiet = wake.window(steady, lead)
    assert due == 300_000 - lead - steady.dev and until == 300_000 + 2 * steady.dev
    assert quiet == wake.POLICY.quiet
    unsteady = wake.Estimate(5_000_000)
    unsteady.dev = 1_000_000  # a fifth of it
    due, until, quiet = wake.window(unsteady, lead)
    assert due == 5_000_000 - lead
    assert until - due == lead + wake.POLICY.tolerance_ns  # 50 us, not 400
    assert not quiet
    # steady by its share (a sixteenth), but its spread needs a window over spin_max_ns
    spread = wake.Estimate(6_000_000)
    assert spread.steady and 3 * spread.dev > wake.POLICY.spin_max_ns
    due, until, quiet = wake.window(spread, lead)
    assert (due, until - due, quiet) == (6_000_000 - lead, lead + wake.POLICY.tolerance_ns, False)


def test_a_wake_within_its_quiet_time_needs_no_reactor_wake() -> None:
    """The reactor's thread is not woken for a slot whose wake looks before the slot's
    quiet time ends; it is for one whose quiet time ends first (work expected after
    ``quiet_max_ns``: the reactor watches it from then on) and for one with no wake."""
    entry = wake.Pending(None, None, None, None, parked=0)
    assert not entry.watched  # (no wake)
    entry.due, entry.quiet = 200_000, 300_000
    assert entry.watched
    entry.due = 30_000_000  # a 30 ms estimate: its quiet time ends at 20 ms
    entry.quiet = wake.POLICY.quiet_max_ns
    assert not entry.watched


def test_an_await_that_spun_before_parking_expects_the_landing_of_one_that_did_not(
    stream,
) -> None:
    """The estimate counts from the start of the wait, the inline spin included: an await
    that spun 20 us (or ran slow Python) before parking has its wake set 20 us sooner
    after parking than one that parked at once, so both look at the same time after their
    launch; and what one teaches counts from there too (a launch learnt long parks at
    once, and one whose hint was dropped spins first: the same work either way)."""
    from types import SimpleNamespace

    hub = SimpleNamespace(reactor=object())
    comp = SimpleNamespace(slot=0, seq=1, stream=SimpleNamespace(_completed=0))
    adapter = SimpleNamespace(timer=SimpleNamespace(late_ns=10_000))
    expect(stream, 300_000)
    at_once = wake.plan(hub, comp, adapter, stream.handle)
    spun = wake.plan(hub, comp, adapter, stream.handle, time.monotonic_ns() - 20_000)
    assert at_once is not None and spun is not None
    assert at_once.since == at_once.parked and spun.parked - spun.since >= 20_000
    assert spun.due - spun.since == at_once.due - at_once.since > 200_000
    assert spun.until - spun.since == at_once.until - at_once.since
    learnt = wake.Pending(None, None, None, "key", parked=21_000, since=1_000)
    learnt.seen = 301_000  # a spin saw it land 300 us after its wait began
    wake.resumed(learnt)
    assert wake.estimate("key") == 300_000


def test_an_estimate_follows_work_that_got_longer_then_shorter() -> None:
    """The same kernel and grid doing other work: a few awaits, not tens, re-learn it."""
    e = wake.Estimate(300_000)
    for _ in range(4):  # each window ends before the landing the reactor reports at 5.1 ms
        e.missed(e.ns + 100_000, 5_100_000)
    assert 4_000_000 < e.ns < 5_100_000
    for _ in range(5):  # landed 0.3 ms after parking, long before each wake
        e.early(300_000)
    assert 150_000 < e.ns < 450_000
    for _ in range(100):  # one sample that says nothing new never drives it below 0
        e.early(0)
    assert e.ns >= 0 and e.dev >= 0


def _learnt(ns: int, samples: list[tuple[str, int, int]]) -> tuple[int, int]:
    """What the estimate's documented rules make of ``samples`` from ``ns``, in Python's
    integers (the native Estimate's arithmetic is int64 with Python's shifts)."""
    dev = ns >> 4
    lead, lag = wake.POLICY.lead_ns, wake.POLICY.report_lag_ns

    def toward(sample: int, shift: int) -> None:
        nonlocal ns, dev
        err = max(sample, 0) - ns
        ns += err >> shift
        dev = min(dev + ((abs(err) - dev) >> 2), ns >> 2)

    for kind, a, b in samples:
        if kind == "exact":
            toward(a, 2)
        elif kind == "early":
            toward(min(ns, a) - lead, 1)
        elif kind == "missed":
            toward(max(a + lead, b - lag), 1)
        elif a > ns:
            ns += (a - ns) >> 2
    return ns, dev


@settings(max_examples=300, deadline=None)
@given(
    ns=st.integers(-(10**12), 10**12),
    samples=st.lists(
        st.tuples(
            st.sampled_from(["exact", "early", "missed", "unplanned"]),
            st.integers(-(10**12), 10**12),
            st.integers(-(10**12), 10**12),
        ),
        max_size=12,
    ),
)
def test_an_estimate_moves_as_its_rules_say(ns: int, samples: list[tuple[str, int, int]]) -> None:
    """Every sample moves the (native) estimate as the rules in its docstring say, negative
    errors rounded toward minus infinity as Python's shifts round them."""
    e = wake.Estimate(ns)
    for kind, a, b in samples:
        if kind == "missed":
            e.missed(a, b)
        else:
            getattr(e, kind)(a)
    assert (e.ns, e.dev) == _learnt(ns, samples)
    assert e.steady == (e.dev <= e.ns >> 3)


def test_a_plan_follows_only_what_it_can_time() -> None:
    """An await is followed only with the wake on, a key, a slot and a reactor, and work
    not queued behind earlier work; it gets a wake only with an estimate of at least
    ``min_estimate_ns`` and a loop timer: a long one a pre-wake, a steady one a quiet
    reactor until its window ends (at most ``quiet_max_ns`` after parking)."""
    from types import SimpleNamespace as NS

    hub = NS(reactor=object())
    comp = NS(slot=0, seq=5, stream=NS(_completed=4))
    adapter = NS(timer=NS(late_ns=10_000))
    kept, on = dict(wake._estimates), wake.POLICY.on
    try:
        wake.POLICY.on = True
        if not wake.POLICY.on:
            pytest.skip("no timerfd here: nothing is planned")
        wake._estimates.update(short=wake.Estimate(50_000), long=wake.Estimate(3_000_000))
        assert wake.plan(hub, comp, adapter, None) is None
        assert wake.plan(NS(reactor=None), comp, adapter, "long") is None
        assert wake.plan(hub, NS(slot=-1, seq=5, stream=comp.stream), adapter, "long") is None
        assert wake.plan(hub, NS(slot=0, seq=6, stream=comp.stream), adapter, "long") is None
        for key, timer_of in (("unknown", adapter), ("short", adapter), ("long", NS())):
            entry = wake.plan(hub, comp, timer_of, key)
            assert entry is not None and entry.due == 0 and entry.timer is None
        entry = wake.plan(hub, comp, adapter, "long", 1_000)
        assert entry is not None and entry.timer is adapter.timer and entry.since == 1_000
        due, until, quiet = wake.window(wake._estimates["long"], 10_000 + wake.POLICY.lead_ns)
        assert (entry.due, entry.until) == (1_000 + due, 1_000 + until)
        assert entry.at == entry.due  # (its pre-wake would be due already: none)
        assert entry.quiet == (
            min(entry.until, entry.parked + wake.POLICY.quiet_max_ns) if quiet else 0
        )
        now = time.monotonic_ns()
        entry = wake.plan(hub, comp, adapter, "long", now)
        assert entry is not None and entry.at == entry.due - wake.POLICY.prewake_ns
        with pytest.raises(TypeError):
            wake.plan(hub, comp, adapter, "long", "now")
    finally:
        wake.POLICY.on = on
        wake.forget()
        wake._estimates.update(kept)


def test_a_full_table_of_estimates_starts_again() -> None:
    """Past ``max_keys`` estimates the table is emptied before the next is learnt (keys
    are kernels and streams: a process making new ones forever keeps a bounded table)."""
    saved, kept = wake.POLICY.max_keys, dict(wake._estimates)
    try:
        wake.forget()
        wake.POLICY.max_keys = 2
        for i, key in enumerate(("a", "b", "c")):
            entry = wake.Pending(None, None, None, key, parked=0, since=1_000)
            entry.seen = 1_000 + 100_000 * (i + 1)
            wake.resumed(entry)
        assert wake._estimates.keys() == {"c"} and wake.estimate("c") == 300_000
    finally:
        wake.POLICY.max_keys = saved
        wake.forget()
        wake._estimates.update(kept)


def test_a_window_follows_the_policy_as_it_is_now() -> None:
    """``window`` reads the process's policy at each call (a field set in Python is the
    native one), and takes only an Estimate; an Estimate takes only an integer, the
    learning only a Pending."""
    est = wake.Estimate(6_000_000)  # steady, its spread past spin_max_ns: a short look
    saved = wake.POLICY.tolerance_ns
    try:
        wake.POLICY.tolerance_ns = 50_000
        due, until, quiet = wake.window(est, 20_000)
        assert until - due == 20_000 + 50_000 and not quiet
    finally:
        wake.POLICY.tolerance_ns = saved
    assert wake.window(est, 20_000)[1] - wake.window(est, 20_000)[0] == 20_000 + saved
    with pytest.raises(TypeError, match="Estimate"):
        wake.window((6_000_000, 375_000), 20_000)
    with pytest.raises(TypeError):
        wake.Estimate(3e5)
    with pytest.raises(TypeError, match="WakePolicyCore"):
        cuasync._native.NATIVE.set_wake_policy(object(), {}, wake.forget, wake.Timer.open)
    with pytest.raises(TypeError, match="Pending"):
        wake.resumed(object())
    assert repr(wake.Estimate(320)) == "Estimate(ns=320, dev=20)"
    huge = wake.Estimate(2**63 - 1)  # ("no cap" ends of int64 saturate, never wrap)
    huge.unplanned(2**63 - 1)
    huge.exact(0)
    assert 0 < huge.ns < 2**63 and wake.window(huge, -(2**63))[0] > 0
    entry = wake.Pending(None, None, None, "key", parked=0)
    assert {entry: 1}[entry] == 1  # (hashed by identity, as any object)


@pytest.mark.parametrize("ns", [100_000, 60_000_000_000], ids=["too-early", "too-late"])
def test_a_fault_resolves_an_await_with_an_estimate(ns: int) -> None:
    """Too early or too late, an await whose device faults raises the fault (no hang)."""
    out = helpers.run_script(
        f"""
        import asyncio, cuasync, cuasync.testing as ct
        from cuasync._core import wake
        from cuasync._core.completion import Stats, get_hub
        from cuasync.errors import DeviceFaultError
        async def main():
            s = cuasync.Device(0).new_stream()
            wake._estimates[s.handle] = wake.Estimate({ns})
            with ct.gate(s):
                task = asyncio.ensure_future(cuasync.wait(s))
                while not any(c._waiters for c in get_hub().slots.completions()):
                    await asyncio.sleep(0)
                try:
                    await ct.trap()
                except DeviceFaultError:
                    pass
                try:
                    await task
                except DeviceFaultError:
                    print('fault')
        asyncio.run(main())
        """,
        CUASYNC_HOST_SYNC="reactor",
    ).stdout
    assert out.strip() == "fault", out


@pytest.mark.skipif(wake._LIBC is None, reason="timerfd is Linux's")
def test_the_native_timer_set_expires_a_timerfd_at_its_deadline() -> None:
    """``set_timer`` (the early wake's timer, set on every planned await) makes the fd
    readable once its absolute deadline passes; a closed fd is refused, not raised."""
    import os
    import select
    import time

    from cuasync._native import NATIVE

    fd = wake._LIBC.timerfd_create(wake._CLOCK_MONOTONIC, wake._TFD_NONBLOCK | wake._TFD_CLOEXEC)
    assert fd >= 0
    try:
        assert NATIVE.set_timer(fd, time.monotonic_ns() + 1_000_000) is True
        readable, _, _ = select.select([fd], [], [], 10)
        assert readable == [fd]
        assert int.from_bytes(os.read(fd, 8), "little") == 1  # (expired once)
        with pytest.raises(OverflowError):
            NATIVE.set_timer(fd, -1)
        with pytest.raises(TypeError):
            NATIVE.set_timer(fd)
    finally:
        os.close(fd)
    r, w = os.pipe()  # (not a timerfd: refused)
    try:
        assert NATIVE.set_timer(r, 1) is False
    finally:
        os.close(r)
        os.close(w)


class _Hub:
    """What a :class:`wake.Timer` asks of an entry's hub: its counters, its wake's spin."""

    def __init__(self) -> None:
        self.stats = Stats()
        self.spun: list[str] = []

    def spin_early(self, entry: wake.Pending) -> None:
        self.spun.append(entry.key)


class _Comp:
    def __init__(self, landed: bool = False) -> None:
        self._landed = landed

    def landed(self) -> bool:
        return self._landed


def _entry(hub: _Hub, key: str, at: int, due: int, landed: bool = False) -> wake.Pending:
    entry = wake.Pending(hub, _Comp(landed), None, key, parked=0)
    entry.at, entry.due = at, due
    return entry


@pytest.fixture
def timer() -> Iterator[wake.Timer]:
    """A loop's timer, its fd real and nothing watching it (``fire`` is called by hand)."""
    fd = wake.timerfd()
    if fd < 0:
        pytest.skip("no timerfd here")
    t = wake.Timer(fd)
    try:
        yield t
    finally:
        t.close()


def test_a_pre_wake_sets_the_timer_again_for_its_wake(timer: wake.Timer) -> None:
    """A pre-wake that is due only moves its entry to its wake (the other entries' wakes
    run as before), and an entry taken off between the two leaves nothing set."""
    hub, now = _Hub(), time.monotonic_ns()
    pre = _entry(hub, "pre", at=now - 2_000, due=now + 60_000_000_000)
    due = _entry(hub, "due", at=now - 1_000, due=now - 1_000)
    later = _entry(hub, "later", at=now + 30_000_000_000, due=now + 30_000_000_000)
    for entry in (later, pre, due):
        assert timer.add(entry)
    timer.fire()
    assert hub.spun == ["due"]  # (the pre-wake spun nothing)
    assert hub.stats.early_prewakes == 1
    assert [e.key for e in sorted(timer.heap)] == ["later", "pre"]
    assert pre.at == pre.due and timer.armed == later.at
    timer.remove(later)
    assert timer.armed == pre.due
    timer.remove(pre)
    assert timer.heap == [] and timer.armed == 0


def test_a_pre_wake_that_finds_its_work_landed_finishes_it(timer: wake.Timer) -> None:
    """Work that got shorter than its estimate is finished at its pre-wake, not left
    for a wake 300 us later (the reactor leaves a steady estimate's slot alone)."""
    hub, now = _Hub(), time.monotonic_ns()
    assert timer.add(_entry(hub, "landed", at=now - 1_000, due=now + 60_000_000_000, landed=True))
    timer.fire()
    assert hub.spun == ["landed"] and timer.heap == []


def test_a_wake_already_due_when_set_teaches_no_lateness(timer: wake.Timer) -> None:
    """The loop's lateness counts from a wake's deadline, or from when the timer was set
    where that deadline had passed (a wake set late is not a late loop)."""
    hub, now = _Hub(), time.monotonic_ns()
    timer.late_ns = 10_000
    assert timer.add(_entry(hub, "old", at=now - 5_000_000_000, due=now - 5_000_000_000))
    timer.fire()
    assert hub.spun == ["old"]
    assert timer.late_ns < 50_000_000  # (from the deadline: 625 ms, an eighth of 5 s)


@settings(max_examples=50, deadline=None)
@given(
    ats=st.lists(st.integers(1, 1_000_000), min_size=1, max_size=40),
    gone=st.lists(st.integers(0, 39), max_size=10),
)
def test_a_timer_fires_its_due_wakes_earliest_first(ats: list[int], gone: list[int]) -> None:
    """Whatever order wakes are set in, and whichever are taken off, the due ones are
    spun for earliest first, each once, and the timer holds the earliest left."""
    fd = wake.timerfd()
    if fd < 0:
        pytest.skip("no timerfd here")
    timer, hub = wake.Timer(fd), _Hub()
    try:
        now = time.monotonic_ns()
        past = now - 2_000_000
        entries = [_entry(hub, f"e{i}", at=past + at, due=past + at) for i, at in enumerate(ats)]
        later = _entry(hub, "later", at=now + 60_000_000_000, due=now + 60_000_000_000)
        for entry in [*entries, later]:
            assert timer.add(entry) and entry.timer is None  # (plan sets it, not add)
        removed = {entries[i].key for i in gone if i < len(entries)}
        for entry in entries:
            if entry.key in removed:
                timer.remove(entry)
                timer.remove(entry)  # (twice: nothing)
        assert timer.armed == min(e.at for e in timer.heap)
        timer.fire()
        left = [e for e in entries if e.key not in removed]
        assert hub.spun == [
            e.key for e in sorted(left, key=lambda e: (e.at, hub.spun.index(e.key)))
        ]
        assert timer.heap == [later] and timer.armed == later.at
    finally:
        timer.close()


def test_a_closed_timer_drops_its_wakes_and_sets_none(timer: wake.Timer) -> None:
    """close() lets go of every wake (their ``timer`` is None: nothing of them left on
    the loop) and closes the fd; a wake set after it is refused, firing does nothing."""
    import os

    hub, now = _Hub(), time.monotonic_ns()
    entry = _entry(hub, "set", at=now + 60_000_000_000, due=now + 60_000_000_000)
    entry.timer = timer
    assert timer.add(entry)
    fd = timer.fd
    timer.close()
    assert timer.closed and timer.heap == [] and entry.timer is None
    with pytest.raises(OSError):
        os.fstat(fd)
    assert timer.add(_entry(hub, "after", at=now, due=now)) is False
    timer.fire()
    timer.close()  # (twice: nothing)
    assert hub.spun == []


def test_a_timer_takes_only_pending_wakes() -> None:
    """A wake of another type is refused with a TypeError, not read as one."""
    fd = wake.timerfd()
    if fd < 0:
        pytest.skip("no timerfd here")
    timer = wake.Timer(fd)
    try:
        with pytest.raises(TypeError, match="wake.Pending"):
            timer.add(object())
        with pytest.raises(TypeError, match="wake.Pending"):
            timer.remove("x")
        with pytest.raises(ValueError, match="timerfd"):
            wake.Timer(-1)
    finally:
        timer.close()


def test_a_collected_timer_closes_its_fd() -> None:
    """A timer nobody closed (its loop dropped without closing) closes its fd when it is
    collected: no fd leaks, and its dealloc neither blocks nor runs Python."""
    import gc
    import os

    fd = wake.timerfd()
    if fd < 0:
        pytest.skip("no timerfd here")
    timer, hub = wake.Timer(fd), _Hub()
    entry = _entry(hub, "cycle", at=time.monotonic_ns() + 10**10, due=time.monotonic_ns() + 10**10)
    entry.timer = timer  # (a cycle: the timer holds the entry, the entry the timer)
    assert timer.add(entry)
    del timer, entry
    gc.collect()
    with pytest.raises(OSError):
        os.fstat(fd)


def test_a_spin_that_raises_leaves_the_later_wakes_set(timer: wake.Timer) -> None:
    """An error in one wake's spin propagates from fire(), and the wakes not yet due
    keep the timer set for them."""

    class Failing(_Hub):
        def spin_early(self, entry: wake.Pending) -> None:
            raise RuntimeError("spin failed")

    now = time.monotonic_ns()
    later = _entry(_Hub(), "later", at=now + 60_000_000_000, due=now + 60_000_000_000)
    assert timer.add(_entry(Failing(), "due", at=now - 1_000, due=now - 1_000))
    assert timer.add(later)
    with pytest.raises(RuntimeError, match="spin failed"):
        timer.fire()
    assert timer.heap == [later] and timer.armed == later.at


def test_a_pre_wake_that_raises_leaves_the_heap_in_order(timer: wake.Timer) -> None:
    """A pre-wake whose look at its work raises has moved to its wake already: the timer
    stays set for the earliest wake left, not for the failed one's far-off one."""

    class Raising(_Comp):
        def landed(self) -> bool:
            raise RuntimeError("landed failed")

    hub, now = _Hub(), time.monotonic_ns()
    pre = wake.Pending(hub, Raising(), None, "pre", parked=0)
    pre.at, pre.due = now - 1_000, now + 60_000_000_000
    soon = _entry(hub, "soon", at=now + 1_000_000_000, due=now + 1_000_000_000)
    assert timer.add(pre) and timer.add(soon)
    with pytest.raises(RuntimeError, match="landed failed"):
        timer.fire()
    assert timer.heap[0] is soon and timer.armed == soon.at
    assert sorted(timer.heap) == [soon, pre] and pre.at == pre.due


def test_a_wake_must_have_a_deadline(timer: wake.Timer) -> None:
    """A wake with no deadline (``at`` 0 or below) is refused, not taken as "disarm"."""
    entry = _entry(_Hub(), "none", at=0, due=0)
    with pytest.raises(ValueError, match="deadline"):
        timer.add(entry)
    assert timer.heap == [] and timer.armed == 0
