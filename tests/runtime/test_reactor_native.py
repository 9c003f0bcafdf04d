"""Tests of the native completion reactor ``cuasync._reactor`` (no GPU needed).

A numpy ``uint32`` array stands in for the pinned slab; writer threads play the GPU
with ``store32`` (a release store, like ``cuStreamWriteValue32`` with default flags).
The word helpers accept only words of a live reactor's slab, so every ``Slab`` keeps a
reactor of its own open over its words.
Synchronisation is done with events, barriers, ``select`` on the queue's fd and
explicit waits whose timeouts are failure guards only.
"""

from __future__ import annotations

import asyncio
import ctypes
import gc
import itertools
import math
import os
import queue as thread_queue
import re
import select
import threading
import time
from typing import Any

import numpy as np
import pytest

_reactor = pytest.importorskip("cuasync._reactor")

TIMEOUT = 10.0  # failure guard for every wait; never reached when things work


# -- helpers ---------------------------------------------------------------------


class Slab:
    """A host "slab" of uint32 flag words, registered by a reactor of its own."""

    def __init__(self, n: int) -> None:
        self.arr = np.zeros(n, dtype=np.uint32)
        self.base = self.arr.ctypes.data
        self.owner = _reactor.Reactor(self.base, n)

    def close(self) -> None:
        self.owner.close()

    def addr(self, slot: int) -> int:
        return self.base + 4 * slot

    def store(self, slot: int, value: int) -> None:
        _reactor.store32(self.addr(slot), value)


@pytest.fixture
def slab():
    s = Slab(1024)
    yield s
    s.close()


@pytest.fixture
def make_reactor(slab):
    """Reactors over ``slab``; closed at teardown, before the slab can go away."""
    made = []

    def make(**kw):
        nslots = kw.pop("nslots", len(slab.arr))
        # Stale reports are off unless a test asks for them: on a loaded CI box a
        # 2 ms default could add stale entries to assertions about completions.
        kw.setdefault("stale_ns", 0)
        r = _reactor.Reactor(slab.base, nslots, **kw)
        made.append(r)
        return r

    yield make
    for r in made:
        r.close()


@pytest.fixture
def make_queue():
    made = []

    def make():
        q = _reactor.LoopQueue()
        made.append(q)
        return q

    yield make
    for q in made:
        q.close()


def readable(q, timeout: float = 0.0) -> bool:
    r, _, _ = select.select([q.fileno()], [], [], timeout)
    return bool(r)


def wait_until(pred, timeout: float = TIMEOUT, what: str = "condition") -> None:
    """Poll ``pred`` until true; the deadline is a failure guard."""
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.0002)


def collect(q, n_done: int, n_stale: int = 0, timeout: float = TIMEOUT):
    """Drain ``q`` whenever its fd is readable until the counts are reached.

    Relies solely on fd readiness, so a lost wake-up shows up as a timeout."""
    done: list[int] = []
    stale: list[int] = []
    deadline = time.monotonic() + timeout
    while len(done) < n_done or len(stale) < n_stale:
        left = deadline - time.monotonic()
        if left <= 0 or not readable(q, left):
            raise AssertionError(
                f"timed out: got {len(done)}/{n_done} completions, {len(stale)}/{n_stale} stale"
            )
        d, s = q.drain()
        done += d
        stale += s
    return done, stale


def read_eventfd(q) -> int:
    return int.from_bytes(os.read(q.fileno(), 8), "little")


# -- basic completion ---------------------------------------------------------------


def test_arm_then_store_pushes_exactly_once(slab, make_reactor, make_queue):
    r, q = make_reactor(), make_queue()
    r.arm(5, 1, q)
    assert r.armed == 1
    assert q.pending == 0 and not readable(q)

    slab.store(5, 1)
    done, stale = collect(q, 1)
    assert done == [5] and stale == []
    assert r.armed == 0 and r.completed == 1

    # Writing the word again must not produce a second push: complete another slot
    # afterwards and check that only that one shows up.
    slab.store(5, 2)
    r.arm(6, 1, q)
    slab.store(6, 1)
    done, stale = collect(q, 1)
    assert done == [6] and stale == []
    assert q.pending == 0 and not readable(q)
    assert r.completed == 2


def test_drain_returns_lists_and_empty_drain_does_not_block(make_queue):
    q = make_queue()
    assert q.drain() == ([], [])
    done, stale = q.drain()
    assert isinstance(done, list) and isinstance(stale, list)
    assert q.fileno() >= 0


def test_immediate_completion_when_already_reached(slab, make_reactor, make_queue):
    r, q = make_reactor(), make_queue()
    slab.store(9, 7)
    r.arm(9, 7, q)  # equal
    assert q.pending == 1  # pushed synchronously, no thread hop
    assert readable(q)
    r.arm(9, 5, q)  # already past
    assert q.drain() == ([9, 9], [])
    assert r.armed == 0 and r.completed == 2
    assert r.wakeups == 0  # the thread was never needed
    assert not r.parked


@pytest.mark.parametrize(
    ("word", "expected", "reached"),
    [
        (5, 5, True),
        (6, 5, True),
        (4, 5, False),
        (0, 0xFFFFFFFF, True),
        (0xFFFFFFFF, 0, False),
        (3, 0xFFFFFFFE, True),
        (0x7FFFFFFF + 5, 5, True),
        (0x80000000 + 5, 5, False),
    ],
)
def test_reached_is_signed_difference(slab, word, expected, reached):
    slab.store(0, word)
    assert _reactor.load32(slab.addr(0)) == word
    assert _reactor.spin_wait(slab.addr(0), expected, 0) is reached


def test_generation_wraparound(slab, make_reactor, make_queue):
    r, q = make_reactor(), make_queue()
    slab.store(3, 0xFFFFFFFF)
    r.arm(3, 0, q)  # generation after 0xFFFFFFFF is 0: not reached yet
    assert r.armed == 1 and q.pending == 0

    slab.store(3, 0)
    assert collect(q, 1) == ([3], [])

    # and the next generation after the wrap
    r.arm(3, 1, q)
    assert r.armed == 1
    slab.store(3, 1)
    assert collect(q, 1) == ([3], [])


# -- eventfd edge semantics -------------------------------------------------------


@pytest.mark.skipif(not _reactor.HAVE_EVENTFD, reason="eventfd counter semantics (Linux)")
def test_eventfd_signalled_once_per_edge(slab, make_reactor, make_queue):
    r, q = make_reactor(), make_queue()
    r.arm(1, 1, q)
    r.arm(2, 1, q)
    slab.store(1, 1)
    slab.store(2, 1)
    wait_until(lambda: q.pending == 2, what="two completions")
    # two completions before a drain = one fd read of count 1
    assert read_eventfd(q) == 1
    assert not readable(q)
    assert sorted(q.drain()[0]) == [1, 2]

    # the next completion is a new empty -> non-empty edge
    r.arm(1, 2, q)
    slab.store(1, 2)
    wait_until(lambda: q.pending == 1, what="third completion")
    assert read_eventfd(q) == 1
    assert q.drain() == ([1], [])

    # immediate completions follow the same rule
    r.arm(1, 2, q)
    r.arm(2, 1, q)
    assert q.pending == 2
    assert read_eventfd(q) == 1
    assert q.drain() == ([1, 2], [])


def test_drain_reads_fd_first(slab, make_reactor, make_queue):
    r, q = make_reactor(), make_queue()
    slab.store(0, 1)
    slab.store(1, 1)
    r.arm(0, 1, q)
    r.arm(1, 1, q)
    assert readable(q)
    assert q.drain() == ([0, 1], [])
    # drain cleared the wake-up together with the entries
    assert not readable(q) and q.pending == 0

    # a push after the drain signals again
    r.arm(2, 1, q)
    slab.store(2, 1)
    assert readable(q, TIMEOUT)
    assert q.drain() == ([2], [])
    assert not readable(q)


def test_exactly_once_with_racing_writer_and_rearm(make_queue):
    """Every generation of every slot is delivered exactly once while a writer
    races ahead of the consumer that re-arms (some re-arms complete at once).
    The consumer drains only when the fd is readable, so a lost wake-up stalls it.
    The writer drops the GIL between small batches of stores (spin_wait on a word
    that never changes)."""
    n, rounds = 256, 40
    words = Slab(n + 1)  # the last word is the writer's pacing word, never written
    r = _reactor.Reactor(words.base, n, stale_ns=0)
    q = make_queue()
    try:
        for s in range(n):
            r.arm(s, 1, q)
        go = threading.Event()

        def writer():
            go.wait(TIMEOUT)
            for gen in range(1, rounds + 1):
                for s in range(n):
                    words.store(s, gen)
                    if s % 4 == 3:
                        _reactor.spin_wait(words.addr(n), 1, 3_000)

        t = threading.Thread(target=writer)
        t.start()
        go.set()
        seen = [0] * n  # generation last delivered per slot
        total = 0
        deadline = time.monotonic() + 4 * TIMEOUT
        while total < n * rounds:
            left = deadline - time.monotonic()
            assert left > 0 and readable(q, min(left, TIMEOUT)), (
                f"stalled after {total}/{n * rounds} completions: lost wake-up?"
            )
            done, stale = q.drain()
            assert stale == []
            for s in done:
                seen[s] += 1
                total += 1
                if seen[s] < rounds:
                    r.arm(s, seen[s] + 1, q)  # may complete at once if the writer is ahead
        t.join(TIMEOUT)
        assert not t.is_alive()
        assert seen == [rounds] * n
        assert r.completed == n * rounds
        assert q.pending == 0
    finally:
        r.close()
        words.close()


def test_no_lost_wakeups_with_pushes_racing_drains(make_reactor, make_queue):
    """Stale reports are pushed by the reactor thread on its own clock, independent
    of the GIL, so they land while the consumer is inside drain(). If drain popped
    before clearing the fd, a push landing in between would have its wake-up
    swallowed; every later push would find the queue non-empty and stay quiet,
    and the consumer (which drains only when the fd is readable) would stall."""
    r = make_reactor(stale_ns=20_000, stale_max_ns=20_000, spin_ns=10**10)
    q = make_queue()
    for s in range(32):
        r.arm(s, 1, q)
    received = drains = 0
    deadline = time.monotonic() + 0.5
    while time.monotonic() < deadline or drains < 2000:
        assert readable(q, 2.0), f"stalled after {drains} drains: lost wake-up"
        done, stale = q.drain()
        assert done == []
        received += len(stale)
        drains += 1
    assert received >= drains
    assert set(range(32)) >= set(stale)


def test_queues_receive_only_their_own_slots(slab, make_reactor, make_queue):
    r = make_reactor()
    queues = [make_queue() for _ in range(3)]
    owner = {}
    for s in range(60):
        owner[s] = s % 3
        r.arm(s, 1, queues[s % 3])
    start = threading.Event()

    def writer():
        start.wait(TIMEOUT)
        for s in reversed(range(60)):
            slab.store(s, 1)

    t = threading.Thread(target=writer)
    t.start()
    start.set()
    for i, q in enumerate(queues):
        done, stale = collect(q, 20)
        assert stale == []
        assert sorted(done) == [s for s in range(60) if owner[s] == i]
    t.join(TIMEOUT)
    for q in queues:
        assert q.pending == 0
    assert r.completed == 60


# -- asyncio integration -------------------------------------------------------------


def test_asyncio_add_reader_delivers_1000_completions(slab, make_reactor, make_queue):
    r, q = make_reactor(), make_queue()
    n_slots, total = 100, 1000
    to_writer: thread_queue.Queue = thread_queue.Queue()

    async def main():
        loop = asyncio.get_running_loop()
        futures: dict[int, asyncio.Future] = {}
        gens = [0] * n_slots
        delivered = []

        def arm(slot):
            gens[slot] += 1
            fut = loop.create_future()
            futures[slot] = fut
            r.arm(slot, gens[slot] & 0xFFFFFFFF, q)
            to_writer.put((slot, gens[slot]))
            return fut

        def on_readable():
            done, stale = q.drain()
            assert stale == []
            for s in done:
                futures.pop(s).set_result(s)

        async def worker(slot, count):
            for _ in range(count):
                assert await arm(slot) == slot
                delivered.append(slot)

        loop.add_reader(q.fileno(), on_readable)
        try:
            await asyncio.wait_for(
                asyncio.gather(*(worker(s, total // n_slots) for s in range(n_slots))), TIMEOUT
            )
        finally:
            loop.remove_reader(q.fileno())
        return delivered

    def writer():
        for _ in range(total):
            item = to_writer.get(timeout=TIMEOUT)
            slab.store(*item)

    t = threading.Thread(target=writer)
    t.start()
    delivered = asyncio.run(main())
    t.join(TIMEOUT)
    assert len(delivered) == total
    assert sorted(set(delivered)) == list(range(n_slots))
    assert r.completed == total
    assert r.armed == 0


# -- threads --------------------------------------------------------------------------


def test_many_threads_arming_concurrently(slab, make_reactor, make_queue):
    r, q = make_reactor(), make_queue()
    n_threads, per = 8, 120
    barrier = threading.Barrier(n_threads)
    errors = []

    def worker(k):
        try:
            barrier.wait(TIMEOUT)
            mine = range(k * per, (k + 1) * per)
            for s in mine:
                r.arm(s, 1, q)
            for s in mine:
                slab.store(s, 1)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(n_threads)]
    for t in threads:
        t.start()
    done, stale = collect(q, n_threads * per)
    for t in threads:
        t.join(TIMEOUT)
    assert not errors
    assert stale == []
    assert sorted(done) == list(range(n_threads * per))
    assert r.completed == n_threads * per
    assert r.armed == 0


def test_concurrent_arm_of_one_slot_succeeds_once(make_reactor, make_queue):
    r, q = make_reactor(), make_queue()
    n = 8
    barrier = threading.Barrier(n)
    results = []
    lock = threading.Lock()

    def worker():
        barrier.wait(TIMEOUT)
        try:
            r.arm(7, 1, q)
            outcome = "ok"
        except RuntimeError:
            outcome = "busy"
        with lock:
            results.append(outcome)

    threads = [threading.Thread(target=worker) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT)
    assert results.count("ok") == 1 and results.count("busy") == n - 1
    assert r.armed == 1
    assert r.disarm(7) is True


def test_spin_wait_releases_the_gil(slab):
    """spin_wait must let other Python threads run while it spins."""
    addr = slab.addr(0)
    entered = threading.Event()
    out = {}

    def spinner():
        entered.set()
        t0 = time.monotonic()
        out["reached"] = _reactor.spin_wait(addr, 1, 5_000_000_000)
        out["elapsed"] = time.monotonic() - t0

    t = threading.Thread(target=spinner)
    t.start()
    assert entered.wait(TIMEOUT)
    # Pure-Python work on this thread; it can only run if the spinner dropped the GIL.
    work, t0 = 0, time.monotonic()
    while time.monotonic() - t0 < 0.05:
        work += 1
    slab.store(0, 1)
    t.join(TIMEOUT)
    assert work > 0
    assert out["reached"] is True
    assert out["elapsed"] < 4.0


def test_spin_wait_keeps_the_gil_for_its_hold_then_releases_it(slab):
    """``spin_wait(..., hold_ns)`` keeps the GIL for the first ``hold_ns`` of its spin (a
    thread waiting for the GIL does not take it for its whole switch interval while the
    work lands), and releases it for the rest of its budget."""
    addr = slab.addr(0)
    stamps: list[int] = []
    stop = threading.Event()

    def counter() -> None:  # (runs only while this thread does not hold the GIL)
        while not stop.is_set():
            stamps.append(time.monotonic_ns())

    t = threading.Thread(target=counter, daemon=True)
    t.start()
    try:
        deadline = time.monotonic() + TIMEOUT
        while len(stamps) < 10 and time.monotonic() < deadline:  # (it runs)
            time.sleep(0.001)
        assert _reactor.spin_wait(addr, 1, 50_000_000, 50_000_000) is False  # held throughout
    finally:
        stop.set()
        t.join(TIMEOUT)
    gaps = [b - a for a, b in itertools.pairwise(stamps)]
    assert max(gaps) >= 50_000_000  # no other thread ran Python during the spin

    # a hold shorter than the budget: held for the hold, then released for the rest
    stamps.clear()
    stop.clear()
    t = threading.Thread(target=counter, daemon=True)
    t.start()
    try:
        deadline = time.monotonic() + TIMEOUT
        while len(stamps) < 10 and time.monotonic() < deadline:
            time.sleep(0.001)
        start = time.monotonic_ns()
        assert _reactor.spin_wait(addr, 1, 1_000_000_000, 50_000_000) is False
        end = time.monotonic_ns()
    finally:
        stop.set()
        t.join(TIMEOUT)
    during = [x for x in stamps if start < x < end]
    assert during and min(during) >= start + 50_000_000  # it ran only after the hold

    go = threading.Event()

    def writer() -> None:  # (stores the flag once it gets the GIL)
        go.wait(TIMEOUT)
        slab.store(0, 1)

    w = threading.Thread(target=writer, daemon=True)
    w.start()
    go.set()
    t0 = time.monotonic()
    reached = _reactor.spin_wait(addr, 1, 10_000_000_000, 20_000_000)
    elapsed = time.monotonic() - t0
    w.join(TIMEOUT)
    assert reached is True
    assert elapsed < 5.0  # released after the hold: the writer ran
    with pytest.raises(ValueError, match="hold_ns must be >= 0, got -1"):
        _reactor.spin_wait(addr, 1, 0, -1)
    with pytest.raises(ValueError, match="budget_ns must be >= 0, got -2"):
        _reactor.spin_wait(addr, 1, -2, 5)
    with pytest.raises(TypeError, match="3 or 4 arguments"):
        _reactor.spin_wait(addr, 1)


# -- parking ----------------------------------------------------------------------------


def test_parking_wakeups_only_on_empty_to_armed_edges(slab, make_reactor, make_queue):
    # No long naps here (work pending 10 ms under a sanitizer would nap, and an arm
    # during a nap is a wake-up too: test_new_arm_wakes_a_long_nap covers that).
    r, q = make_reactor(long_ns=10**15), make_queue()
    assert r.wakeups == 0 and not r.parked

    r.arm(0, 1, q)  # first arm starts the thread (born parked)
    wait_until(lambda: r.wakeups == 1, what="first wakeup")
    r.arm(1, 1, q)  # already non-empty: no edge
    slab.store(0, 1)
    slab.store(1, 1)
    assert sorted(collect(q, 2)[0]) == [0, 1]
    wait_until(lambda: r.parked, what="park")
    assert r.wakeups == 1

    # an immediate completion while parked does not wake the thread
    slab.store(2, 3)
    r.arm(2, 3, q)
    assert q.drain() == ([2], [])
    assert r.parked and r.wakeups == 1

    r.arm(0, 2, q)  # empty -> armed edge while parked
    wait_until(lambda: r.wakeups == 2, what="second wakeup")
    slab.store(0, 2)
    assert collect(q, 1)[0] == [0]
    wait_until(lambda: r.parked, what="park again")
    assert r.wakeups == 2

    # disarm of the only slot also parks the thread
    r.arm(4, 1, q)
    wait_until(lambda: r.wakeups == 3, what="third wakeup")
    assert r.disarm(4) is True
    wait_until(lambda: r.parked, what="park after disarm")
    assert r.wakeups == 3


# -- backoff while slots stay armed ---------------------------------------------------


def reactor_threads() -> list[str]:
    names = []
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                names.append(f.read().strip())
        except FileNotFoundError:  # the thread ended meanwhile
            pass
    return [n for n in names if n == "cuasync-reactor"]


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs Linux /proc")
def test_reactor_thread_is_named(make_reactor, make_queue):
    before = len(reactor_threads())
    r, q = make_reactor(), make_queue()
    r.arm(0, 1, q)
    wait_until(lambda: r.wakeups == 1, what="thread start")
    assert len(reactor_threads()) == before + 1
    r.close()
    assert len(reactor_threads()) == before


def sample_backoff(r, scans: int) -> list[int]:
    """The thread's sleep length, sampled until it has scanned ``scans`` more times."""
    target = r.scans + scans
    samples = []
    deadline = time.monotonic() + TIMEOUT
    while r.scans < target:
        assert time.monotonic() < deadline, "the reactor stopped scanning"
        samples.append(r.backoff_ns)
    return samples


def test_backoff_is_capped_while_armed_work_is_young(make_reactor, make_queue):
    # long_ns is never reached: short work keeps the backoff_max_ns cap however long.
    r = make_reactor(backoff_max_ns=100_000, long_ns=10**10, long_backoff_max_ns=10**9)
    q = make_queue()
    r.arm(0, 1, q)
    wait_until(lambda: r.backoff_ns == 100_000, what="backoff reaching its cap")
    assert max(sample_backoff(r, 100)) == 100_000


def test_backoff_grows_for_long_pending_work_then_resets(slab, make_reactor, make_queue):
    r = make_reactor(backoff_max_ns=100_000, long_ns=1_000_000, long_backoff_max_ns=4_000_000)
    q = make_queue()
    r.arm(0, 1, q)
    # The cap grows with the entry's age (age / 16) up to long_backoff_max_ns.
    wait_until(lambda: r.backoff_ns == 4_000_000, what="the long backoff cap")
    assert max(sample_backoff(r, 5)) == 4_000_000
    slab.store(0, 1)
    assert collect(q, 1) == ([0], [])  # still delivered
    wait_until(lambda: r.parked, what="park")
    assert r.backoff_ns == 0


def test_new_arm_wakes_a_long_nap(slab, make_reactor, make_queue):
    """A slot armed while the thread sleeps long for old work is not delayed by that
    sleep: the arm wakes the thread (counted in wakeups)."""
    r = make_reactor(backoff_max_ns=100_000, long_ns=1_000_000, long_backoff_max_ns=10**9)
    q = make_queue()
    r.arm(0, 1, q)  # old work, never lands
    for gen in range(1, 6):
        # Sleeping >= 20 ms: the arm below almost surely lands inside a nap (it misses
        # only if it falls in the microseconds between two naps; then try again).
        wait_until(lambda: r.backoff_ns >= 20_000_000, what="a long nap")
        woken = r.wakeups
        r.arm(1, gen, q)
        slab.store(1, gen)
        assert collect(q, 1) == ([1], [])
        if r.wakeups == woken + 1:
            break
    else:
        raise AssertionError("no arm woke the napping thread")


def test_a_quiet_slot_is_neither_spun_nor_scanned_for_until_its_time(
    slab, make_reactor, make_queue
):
    """A slot armed with ``quiet_until`` (its loop's early wake watches it) lets the
    thread nap until that time, with no spin window; an unquiet arm wakes the thread,
    whose scan then reports every landed slot, the quiet one included."""
    r = make_reactor(backoff_max_ns=100_000)
    q = make_queue()
    r.arm(0, 1, q, time.monotonic_ns() + 60_000_000_000)  # a minute
    wait_until(lambda: r.backoff_ns > 50_000_000_000, what="a nap until the quiet time")
    scans = r.scans
    slab.store(0, 1)  # landed: nobody looks yet
    assert not readable(q, 0.05)
    assert r.scans == scans  # (the thread napped through: no scan, no spin)
    r.arm(1, 1, q)  # work that wants watching now
    assert collect(q, 1) == ([0], [])
    assert r.armed == 1
    slab.store(1, 1)
    assert collect(q, 1) == ([1], [])


def test_a_watched_arm_leaves_a_parked_thread_parked(slab, make_reactor, make_queue):
    """A quiet slot its loop's early wake looks at (``watched``) does not wake a parked
    thread, even past its quiet time (the wake arms it again if it has not landed); a
    disarm keeps the thread parked; an arm that wants watching wakes it, and its scan
    reports every landed slot, the watched one included."""
    r, q = make_reactor(long_ns=10**15), make_queue()
    r.arm(0, 1, q)  # (starts the thread)
    slab.store(0, 1)
    assert collect(q, 1) == ([0], [])
    wait_until(lambda: r.parked, what="park")
    woken = r.wakeups
    r.arm(1, 1, q, time.monotonic_ns() + 1_000_000, True)  # quiet for 1 ms, watched
    assert r.disarm(1) is True  # (its wake saw it land: the common case)
    r.arm(2, 1, q, time.monotonic_ns() + 1_000_000, True)
    slab.store(2, 1)  # landed: nobody looks, the 1 ms passes
    assert not readable(q, 0.05)
    assert r.parked and r.wakeups == woken and r.armed == 1
    r.arm(3, 1, q)  # work that wants watching now: parked with a slot armed, woken
    assert collect(q, 1) == ([2], [])
    assert r.wakeups == woken + 1
    slab.store(3, 1)
    assert collect(q, 1) == ([3], [])


def test_a_quiet_arm_leaves_a_nap_that_ends_sooner_alone(slab, make_reactor, make_queue):
    """Arming a slot quiet past the end of the thread's nap does not wake it (the nap's
    end comes first); an arm quiet until before that end does."""
    r = make_reactor(backoff_max_ns=100_000)
    q = make_queue()
    now = time.monotonic_ns()
    r.arm(0, 1, q, now + 60_000_000_000)
    wait_until(lambda: r.backoff_ns > 50_000_000_000, what="a nap until the quiet time")
    woken = r.wakeups
    r.arm(1, 1, q, now + 120_000_000_000)
    assert r.wakeups == woken
    r.arm(2, 1, q, time.monotonic_ns() + 1_000_000)  # 1 ms: sooner than the nap's end
    assert r.wakeups == woken + 1
    slab.store(2, 1)
    assert collect(q, 1) == ([2], [])


def test_a_quiet_time_past_a_minute_is_taken_as_a_minute(slab, make_reactor, make_queue):
    """``quiet_until`` near the clock's end (a "quiet forever") must not wrap a nap's end
    into the past, which would make the thread loop without sleeping."""
    r = make_reactor(backoff_max_ns=100_000)
    q = make_queue()
    r.arm(0, 1, q, 2**64 - 1)
    wait_until(lambda: r.backoff_ns > 50_000_000_000, what="a nap of about a minute")
    assert r.backoff_ns <= 60_000_000_000
    scans = r.scans
    assert not readable(q, 0.05)
    assert r.scans - scans <= 1  # napping, not looping
    r.arm(1, 1, q)
    slab.store(0, 1)
    slab.store(1, 1)
    assert sorted(collect(q, 2)[0]) == [0, 1]


def test_quiet_slots_still_get_their_stale_reports(make_reactor, make_queue):
    r = make_reactor(stale_ns=2_000_000, stale_max_ns=2_000_000)
    q = make_queue()
    r.arm(0, 1, q, time.monotonic_ns() + 60_000_000_000)
    done, stale = collect(q, 0, 2)  # every 2 ms, not after a minute
    assert done == [] and set(stale) == {0}  # (three where this thread was slow to drain)


def test_naps_never_pass_the_next_stale_report(make_reactor, make_queue):
    r = make_reactor(
        stale_ns=5_000_000, stale_max_ns=5_000_000, long_ns=0, long_backoff_max_ns=10**9
    )
    q = make_queue()
    r.arm(0, 1, q)
    samples = []
    # 40 reports take 200 ms; age / 16 would allow naps of 12 ms by then.
    while r.stale_reports < 40:
        samples.append(r.backoff_ns)
        time.sleep(0.0005)
    assert 0 < max(samples) <= 5_000_000


# -- stale reports ----------------------------------------------------------------------


def test_stale_reports_repeat_then_stop_after_completion(slab, make_reactor, make_queue):
    r = make_reactor(stale_ns=1_000_000, stale_max_ns=4_000_000)
    q = make_queue()
    t0 = time.monotonic_ns()
    r.arm(2, 1, q)  # never written (yet)
    done, stale = collect(q, 0, 1)
    t1 = time.monotonic_ns()
    assert done == [] and set(stale) == {2}  # more than one if this thread was slow
    assert t1 - t0 >= 1_000_000  # not before stale_ns
    assert r.stale_reports >= 1

    done, stale = collect(q, 0, 2)  # reports continue (doubling, capped)
    assert done == [] and set(stale) == {2}
    assert r.stale_reports >= 3
    assert r.armed == 1

    slab.store(2, 1)
    done, _ = collect(q, 1)
    assert done == [2]
    assert r.armed == 0

    # Prove time has passed on the reactor thread: wait for two stale reports of
    # another slot; slot 2 must not be reported again.
    r.arm(3, 1, q)
    done, stale = collect(q, 0, 2)
    assert done == []
    assert 2 not in stale and set(stale) == {3}
    assert r.disarm(3)


def test_stale_reports_disabled_with_zero(slab, make_reactor, make_queue):
    r, q = make_reactor(stale_ns=0), make_queue()
    r.arm(0, 1, q)
    wait_until(lambda: r.wakeups == 1, what="thread start")
    assert not readable(q, 0.02)  # nothing may arrive within the wait
    assert r.stale_reports == 0
    slab.store(0, 1)
    assert collect(q, 1) == ([0], [])


def test_no_stale_report_after_disarm(slab, make_reactor, make_queue):
    r = make_reactor(stale_ns=1_000_000, stale_max_ns=2_000_000)
    q, q2 = make_queue(), make_queue()
    r.arm(0, 1, q)
    assert r.disarm(0) is True
    # A slow thread (sanitizers) may have reported slot 0 stale before the disarm; the
    # contract is that nothing comes after it.
    q.drain()
    r.arm(1, 1, q2)
    collect(q2, 0, 2)  # the thread has run well past slot 0's stale deadline
    assert q.pending == 0 and not readable(q)


def test_a_stale_queue_takes_every_stale_report_and_no_completion(slab, make_reactor, make_queue):
    # The hub gives its background watcher's queue: a loop is then woken only by
    # completions, never for work that is merely long.
    r = make_reactor(stale_ns=1_000_000, stale_max_ns=2_000_000)
    loop_q, stale_q = make_queue(), make_queue()
    r.set_stale_queue(stale_q)
    r.arm(4, 1, loop_q)
    done, stale = collect(stale_q, 0, 2)  # a report, then another after the interval
    assert done == [] and set(stale) == {4}
    assert not readable(loop_q) and loop_q.pending == 0
    slab.store(4, 1)
    assert collect(loop_q, 1) == ([4], [])  # the completion goes where the slot is armed
    assert r.armed == 0


def test_stale_reports_go_back_to_the_slots_own_queue_without_an_open_stale_queue(
    slab, make_reactor, make_queue
):
    r = make_reactor(stale_ns=1_000_000, stale_max_ns=2_000_000)
    loop_q, stale_q = make_queue(), make_queue()
    r.set_stale_queue(stale_q)
    r.arm(6, 1, loop_q)
    collect(stale_q, 0, 1)
    stale_q.close()  # closed: reports find their slot's own queue again
    done, stale = collect(loop_q, 0, 1)
    assert done == [] and set(stale) == {6}  # more than one if this thread was slow
    r.set_stale_queue(make_queue())
    r.set_stale_queue(None)  # unset: the same
    loop_q.drain()
    done, stale = collect(loop_q, 0, 1)
    assert done == [] and set(stale) == {6}
    assert r.disarm(6)


# -- disarm / errors -------------------------------------------------------------------


def test_disarm(slab, make_reactor, make_queue):
    r, q = make_reactor(), make_queue()
    r.arm(10, 1, q)
    assert r.disarm(10) is True
    assert r.disarm(10) is False
    assert r.disarm(11) is False
    assert r.armed == 0
    slab.store(10, 1)
    # the disarmed slot is not reported; a later one is
    r.arm(12, 1, q)
    slab.store(12, 1)
    assert collect(q, 1) == ([12], [])
    assert q.pending == 0
    # re-arming a disarmed slot works
    r.arm(10, 2, q)
    slab.store(10, 2)
    assert collect(q, 1) == ([10], [])
    with pytest.raises(ValueError):
        r.disarm(-1)
    with pytest.raises(ValueError):
        r.disarm(len(slab.arr))


def test_argument_errors(slab, make_reactor, make_queue):
    r, q = make_reactor(nslots=8), make_queue()
    with pytest.raises(ValueError):
        r.arm(8, 1, q)
    with pytest.raises(ValueError):
        r.arm(-1, 1, q)
    with pytest.raises(ValueError):
        r.arm(2**70, 1, q)
    with pytest.raises(ValueError):
        r.arm(0, 2**32, q)
    with pytest.raises(ValueError):
        r.arm(0, -1, q)
    with pytest.raises(TypeError):
        r.arm(0, 1, object())
    with pytest.raises(TypeError):
        r.arm(0, 1)
    with pytest.raises(TypeError):
        r.arm(0, 1, q, 0, False, 0)
    with pytest.raises(TypeError):
        r.arm(0, 1, q, "soon")
    with pytest.raises(OverflowError):
        r.arm(0, 1, q, -1)
    assert r.armed == 0
    r.arm(0, 1, q)
    with pytest.raises(RuntimeError):
        r.arm(0, 1, q)
    with pytest.raises(RuntimeError):
        r.arm(0, 2, make_queue())
    assert r.armed == 1
    # numpy integers are accepted (via __index__)
    r.arm(np.uint32(1), np.uint32(1), q)
    assert r.armed == 2

    with pytest.raises(ValueError):
        _reactor.Reactor(0, 4)
    with pytest.raises(ValueError):
        _reactor.Reactor(slab.base + 2, 4)
    with pytest.raises(ValueError):
        _reactor.Reactor(slab.base, 0)
    with pytest.raises(ValueError):
        _reactor.Reactor(slab.base, 4, stale_ns=-1)
    with pytest.raises(TypeError):
        _reactor.Reactor(slab.base, 4, 1000)  # options are keyword-only
    with pytest.raises(TypeError):
        _reactor.LoopQueue(1)
    with pytest.raises(ValueError):
        _reactor.load32(0)
    with pytest.raises(ValueError):
        _reactor.store32(slab.base + 1, 1)
    with pytest.raises(ValueError):
        _reactor.store32(slab.base, 2**32)
    with pytest.raises(ValueError):
        _reactor.spin_wait(slab.base, 1, -1)


# -- lifetimes -------------------------------------------------------------------------


def test_close_is_idempotent_with_slots_still_armed(slab, make_reactor, make_queue):
    r, q = make_reactor(stale_ns=1_000_000), make_queue()
    for s in range(5):
        r.arm(s, 1, q)
    wait_until(lambda: r.wakeups == 1, what="thread start")
    r.close()
    assert r.armed == 0
    q.drain()  # stale reports may have arrived before close()
    r.close()
    with pytest.raises(RuntimeError):
        r.arm(7, 1, q)
    assert r.disarm(0) is False
    for s in range(5):
        slab.store(s, 1)
    # the thread is joined: nothing can be pushed any more
    assert q.pending == 0
    assert q.drain() == ([], [])


def test_close_from_several_threads(make_reactor, make_queue):
    r, q = make_reactor(), make_queue()
    r.arm(0, 1, q)
    barrier = threading.Barrier(4)
    armed_after_close = []

    def closer():
        barrier.wait(TIMEOUT)
        r.close()  # returns only once the thread is joined and the slots dropped
        armed_after_close.append(r.armed)

    threads = [threading.Thread(target=closer) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT)
    assert armed_after_close == [0, 0, 0, 0]
    with pytest.raises(RuntimeError, match="closed"):
        r.arm(1, 1, q)


def test_dealloc_with_armed_slots_closes(slab, make_queue):
    q = make_queue()
    r = _reactor.Reactor(slab.base, 16, stale_ns=0)
    r.arm(0, 1, q)
    r.arm(1, 1, q)
    wait_until(lambda: r.wakeups == 1, what="thread start")  # noqa: F821 (r is deleted below)
    del r
    gc.collect()
    slab.store(0, 1)
    # the queue survives and is still usable
    assert q.drain() == ([], [])
    r2 = _reactor.Reactor(slab.base, 16, stale_ns=0)
    r2.arm(1, 1, q)
    slab.store(1, 1)
    assert collect(q, 1) == ([1], [])
    r2.close()


def test_queue_closed_while_armed_without_orphan_queue(slab, make_reactor):
    r = make_reactor()
    q = _reactor.LoopQueue()
    r.arm(0, 1, q)
    r.arm(1, 1, q)
    assert q.close() == ([], [])
    assert q.close() == ([], [])
    with pytest.raises(ValueError):
        q.drain()
    with pytest.raises(ValueError):
        q.fileno()
    assert q.pending == 0
    slab.store(0, 1)
    # Nobody can receive them: both entries are dropped (the landed one and the one
    # still waiting), counted, never silently.
    wait_until(lambda: r.armed == 0, what="entries of a closed queue dropped")
    assert r.dropped == 2 and r.completed == 0
    # arming to a closed queue drops at once, whether the word has landed or not
    slab.store(2, 1)
    r.arm(2, 1, q)
    r.arm(3, 1, q)
    assert r.armed == 0 and r.dropped == 4
    assert r.disarm(1) is False


def test_queue_garbage_collected_while_armed(slab, make_reactor, make_queue):
    r = make_reactor()
    q = _reactor.LoopQueue()
    r.arm(0, 1, q)
    del q
    gc.collect()
    slab.store(0, 1)
    wait_until(lambda: r.armed == 0, what="completion on a dropped queue")
    assert r.dropped == 1 and r.completed == 0
    q2 = make_queue()  # the reactor keeps working for other queues
    r.arm(1, 1, q2)
    slab.store(1, 1)
    assert collect(q2, 1) == ([1], [])


# -- closed queues and the orphan queue --------------------------------------------------


def test_completions_of_a_closed_queue_go_to_the_orphan_queue(slab, make_reactor, make_queue):
    r, q, orphan = make_reactor(), make_queue(), make_queue()
    r.set_orphan_queue(orphan)
    r.arm(0, 1, q)
    r.arm(1, 1, q)
    assert q.close() == ([], [])
    slab.store(0, 1)
    assert collect(orphan, 1) == ([0], [])
    slab.store(1, 1)
    assert collect(orphan, 1) == ([1], [])
    assert r.completed == 2 and r.dropped == 0 and r.armed == 0


def test_arming_to_a_closed_queue_targets_the_orphan_queue(slab, make_reactor, make_queue):
    r, q, orphan = make_reactor(), make_queue(), make_queue()
    r.set_orphan_queue(orphan)
    q.close()
    slab.store(4, 1)
    r.arm(4, 1, q)  # already landed: pushed at once, to the orphan queue
    assert orphan.pending == 1
    r.arm(5, 1, q)
    slab.store(5, 1)
    assert collect(orphan, 2) == ([4, 5], [])
    assert r.dropped == 0


def test_stale_reports_follow_an_entry_to_the_orphan_queue(slab, make_reactor, make_queue):
    r = make_reactor(stale_ns=1_000_000, stale_max_ns=2_000_000)
    q, orphan = make_queue(), make_queue()
    r.set_orphan_queue(orphan)
    r.arm(2, 1, q)
    q.close()
    # The entry was re-targeted: every later report, stale or complete, goes there.
    done, stale = collect(orphan, 0, 2)
    assert done == [] and set(stale) == {2}
    slab.store(2, 1)
    done, _ = collect(orphan, 1)
    assert done == [2]
    assert r.armed == 0 and r.dropped == 0


def test_clearing_the_orphan_queue_drops_again(slab, make_reactor, make_queue):
    r, q, orphan = make_reactor(), make_queue(), make_queue()
    r.set_orphan_queue(orphan)
    r.set_orphan_queue(None)
    r.arm(0, 1, q)
    q.close()
    wait_until(lambda: r.armed == 0, what="entry dropped")
    assert r.dropped == 1 and orphan.pending == 0


def test_entries_of_a_closed_orphan_queue_are_dropped(slab, make_reactor, make_queue):
    r, q, orphan = make_reactor(), make_queue(), make_queue()
    r.set_orphan_queue(orphan)
    r.arm(0, 1, q)
    q.close()
    orphan.close()
    wait_until(lambda: r.armed == 0, what="entry dropped")
    assert r.dropped == 1


@pytest.mark.parametrize("which", ["orphan", "stale"])
def test_set_queue_argument_errors(make_reactor, make_queue, which):
    r = make_reactor()
    set_queue = getattr(r, f"set_{which}_queue")
    with pytest.raises(TypeError, match="LoopQueue"):
        set_queue(object())
    closed = make_queue()
    closed.close()
    with pytest.raises(ValueError, match=f"the {which} queue must be open, got a closed"):
        set_queue(closed)
    r.close()
    with pytest.raises(RuntimeError, match="closed"):
        set_queue(make_queue())
    set_queue(None)


def test_closed_queue_whose_flag_never_lands_lets_the_reactor_park(make_reactor, make_queue):
    r = make_reactor()
    q = make_queue()
    r.arm(0, 1, q)  # its flag never lands
    wait_until(lambda: r.wakeups == 1, what="thread start")
    q.close()
    wait_until(lambda: r.parked, what="the reactor parks")
    assert r.armed == 0 and r.dropped == 1


def test_close_returns_the_pending_entries(slab, make_reactor, make_queue):
    r = make_reactor(stale_ns=1_000_000, stale_max_ns=1_000_000)
    q = make_queue()
    r.arm(7, 1, q)  # never lands: reported stale
    wait_until(lambda: r.stale_reports >= 1, what="slot 7 reported stale")  # (it alone is armed)
    for s in range(3):
        r.arm(s, 1, q)
    for s in range(3):
        slab.store(s, 1)
    wait_until(lambda: r.completed == 3, what="pushes")
    assert r.disarm(7)
    done, stale = q.close()
    # (a slow thread, under sanitizers, may also have seen 0-2 stale before their stores)
    assert sorted(done) == [0, 1, 2] and 7 in stale and set(stale) <= {0, 1, 2, 7}
    assert q.pending == 0
    assert q.close() == ([], [])


def test_nothing_is_lost_between_drains_and_close(make_queue):
    """Completions racing a drain-then-close reach the loop's drains, close()'s result
    or the orphan queue: each exactly once."""
    n = 2000
    words = Slab(n)
    r = _reactor.Reactor(words.base, n, stale_ns=0)
    q, orphan = _reactor.LoopQueue(), make_queue()
    try:
        r.set_orphan_queue(orphan)
        for s in range(n):
            r.arm(s, 1, q)
        go = threading.Event()

        def writer():
            go.wait(TIMEOUT)
            for s in range(n):
                words.store(s, 1)

        t = threading.Thread(target=writer)
        t.start()
        go.set()
        seen: list[int] = []
        while len(seen) < n // 4:
            assert readable(q, TIMEOUT)
            seen += q.drain()[0]
        seen += q.close()[0]
        t.join(TIMEOUT)
        wait_until(lambda: r.armed == 0, what="all completions pushed")
        seen += orphan.drain()[0]
        assert sorted(seen) == list(range(n))
        assert r.completed == n and r.dropped == 0
    finally:
        r.close()
        words.close()


def _fail_each_allocation_in_turn(call, check_intact):
    """Call ``call()`` with its 1st, 2nd, ... allocation failing until it succeeds;
    after every MemoryError, ``check_intact()``. Returns (result, failures)."""
    testcapi = pytest.importorskip("_testcapi", reason="needs _testcapi.set_nomemory")
    for k in range(1000):
        testcapi.set_nomemory(k, k + 1)
        try:
            result = call()
        except MemoryError:
            result = None
        finally:
            testcapi.remove_mem_hooks()
        if result is not None:
            return result, k
        check_intact()
    raise AssertionError("never succeeded")


@pytest.mark.parametrize("count", [40, 400])  # within and beyond the inline buffer
def test_drain_keeps_its_entries_when_building_the_lists_fails(
    slab, make_reactor, make_queue, count
):
    r, q = make_reactor(), make_queue()
    slots = list(range(300, 300 + count))  # ints above 256 are allocated
    for s in slots:
        slab.store(s, 1)
        r.arm(s, 1, q)
    assert q.pending == count

    def intact():
        assert q.pending == count
        assert readable(q), "the wake-up was lost with the failed drain"

    (done, stale), failures = _fail_each_allocation_in_turn(q.drain, intact)
    assert failures >= 3  # the lists, the ints and the tuple each failed once
    assert done == slots and stale == []
    assert q.pending == 0 and not readable(q)


def test_close_keeps_its_entries_when_building_the_lists_fails(slab, make_reactor, make_queue):
    r, q = make_reactor(), make_queue()
    slots = list(range(300, 340))
    for s in slots:
        slab.store(s, 1)
        r.arm(s, 1, q)

    def intact():
        assert q.pending == len(slots)
        with pytest.raises(ValueError, match="closed"):
            q.drain()

    (done, stale), failures = _fail_each_allocation_in_turn(q.close, intact)
    assert failures >= 3
    assert done == slots and stale == []
    assert q.close() == ([], [])


# -- spin_wait --------------------------------------------------------------------------


def test_spin_wait(slab):
    addr = slab.addr(0)
    assert _reactor.spin_wait(addr, 0, 0) is True
    assert _reactor.spin_wait(addr, 1, 0) is False

    t0 = time.monotonic()
    assert _reactor.spin_wait(addr, 1, 20_000_000) is False
    elapsed = time.monotonic() - t0
    assert 0.019 <= elapsed < 2.0  # the budget is honoured, roughly

    ready = threading.Event()

    def writer():
        ready.wait(TIMEOUT)
        slab.store(0, 1)

    t = threading.Thread(target=writer)
    t.start()
    ready.set()
    t0 = time.monotonic()
    assert _reactor.spin_wait(addr, 1, 5_000_000_000) is True
    assert time.monotonic() - t0 < 4.0
    t.join(TIMEOUT)


def test_load_store_roundtrip(slab):
    for v in (0, 1, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF):
        _reactor.store32(slab.addr(3), v)
        assert _reactor.load32(slab.addr(3)) == v
        assert int(slab.arr[3]) == v


def test_word_helpers_accept_only_words_of_a_live_slab():
    slab = Slab(8)
    first, last = slab.addr(0), slab.addr(7)
    stray = np.zeros(4, dtype=np.uint32)  # memory no reactor watches
    try:
        _reactor.store32(last, 5)
        assert _reactor.load32(first) == 0 and _reactor.load32(last) == 5
        assert _reactor.spin_wait(last, 5, 0) is True
        valid = f"[{first:#x}, {first + 32:#x})"
        for bad in (stray.ctypes.data, slab.addr(8), first - 4, first + 2, 0):
            with pytest.raises(ValueError, match=rf"address {bad:#x} .*{re.escape(valid)}"):
                _reactor.load32(bad)
            with pytest.raises(ValueError, match=f"{bad:#x}"):
                _reactor.store32(bad, 1)
            with pytest.raises(ValueError, match=f"{bad:#x}"):
                _reactor.spin_wait(bad, 1, 1000)
        assert list(stray) == [0, 0, 0, 0]
    finally:
        slab.close()
    # a closed reactor's slab is no longer writable through the helpers
    with pytest.raises(ValueError, match="live Reactor"):
        _reactor.store32(first, 1)
    assert int(slab.arr[0]) == 0


def test_slab_stays_valid_while_any_reactor_over_it_is_open():
    slab = Slab(4)
    other = _reactor.Reactor(slab.base, 4)
    slab.close()
    _reactor.store32(slab.addr(1), 3)  # still registered by the other reactor
    del other
    gc.collect()
    with pytest.raises(ValueError):
        _reactor.store32(slab.addr(1), 4)
    assert int(slab.arr[1]) == 3


# -- driver entry points -----------------------------------------------------------------

WRITE_T = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.c_void_p, ctypes.c_ulonglong, ctypes.c_uint32, ctypes.c_uint
)
LAUNCH_T = ctypes.CFUNCTYPE(
    ctypes.c_int,
    ctypes.c_void_p,
    *([ctypes.c_uint] * 7),
    ctypes.c_void_p,
    ctypes.c_void_p,
    ctypes.c_void_p,
)


COPY_T = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.c_ulonglong, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p
)


@pytest.fixture
def entry_points():
    _reactor.set_entry_points()
    keep: list[object] = []

    def install(write=None, launch=None, copy=None):
        keep.extend(x for x in (write, launch, copy) if x is not None)
        _reactor.set_entry_points(
            write_value32=ctypes.cast(write, ctypes.c_void_p).value if write else 0,
            launch_kernel=ctypes.cast(launch, ctypes.c_void_p).value if launch else 0,
            memcpy_htod=ctypes.cast(copy, ctypes.c_void_p).value if copy else 0,
        )

    yield install
    _reactor.set_entry_points()  # never leave dangling callback pointers behind
    # On the cuda backend, give the process its real driver entry points back.
    from cuasync._backends import get_backend

    backend: Any = get_backend()  # the cuda backend's own attributes
    if hasattr(backend, "_native_entry_points"):
        backend._native = backend._native_entry_points()


def test_entry_points_missing_raise(slab, entry_points):
    with pytest.raises(RuntimeError):
        _reactor.write_value32(0, slab.base, 1)
    with pytest.raises(RuntimeError):
        _reactor.launch_and_write(1, 1, 1, 1, 32, 1, 1, 0, 0, 0, slab.base, 1)

    calls = []

    @WRITE_T
    def fake_write(stream, addr, value, flags):
        calls.append(value)
        return 0

    entry_points(write=fake_write)  # launch still missing
    with pytest.raises(RuntimeError):
        _reactor.launch_and_write(1, 1, 1, 1, 32, 1, 1, 0, 0, 0, slab.base, 1)
    assert calls == []


def test_entry_points_called_with_the_driver_signatures(
    slab, entry_points, make_reactor, make_queue
):
    writes, launches = [], []
    launch_rc = [0]
    write_rc = [0]

    @WRITE_T
    def fake_write(stream, addr, value, flags):
        writes.append((stream, addr, value, flags))
        if write_rc[0] == 0:
            _reactor.store32(addr, value)  # the "GPU" writes the flag word
        return write_rc[0]

    @LAUNCH_T
    def fake_launch(f, gx, gy, gz, bx, by, bz, shmem, stream, params, extra):
        launches.append((f, gx, gy, gz, bx, by, bz, shmem, stream, params, extra))
        return launch_rc[0]

    entry_points(write=fake_write, launch=fake_launch)
    r, q = make_reactor(), make_queue()

    assert _reactor.write_value32(0x1234, slab.addr(4), 0xFFFFFFFF) == 0
    assert writes[-1] == (0x1234, slab.addr(4), 0xFFFFFFFF, 0)
    assert slab.arr[4] == 0xFFFFFFFF

    params = (ctypes.c_void_p * 2)()
    p_addr = ctypes.addressof(params)
    r.arm(5, 1, q)
    rc = _reactor.launch_and_write(0xF00, 2, 3, 4, 128, 2, 1, 4096, 0x55, p_addr, slab.addr(5), 1)
    assert rc == 0
    assert launches[-1] == (0xF00, 2, 3, 4, 128, 2, 1, 4096, 0x55, p_addr, None)
    assert writes[-1] == (0x55, slab.addr(5), 1, 0)
    assert collect(q, 1) == ([5], [])

    # address 0: launch only
    n_writes = len(writes)
    assert _reactor.launch_and_write(0xF00, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0) == 0
    assert len(writes) == n_writes

    # a failed launch is returned and the flag is not written
    launch_rc[0] = 700
    assert _reactor.launch_and_write(0xF00, 1, 1, 1, 1, 1, 1, 0, 0, 0, slab.addr(6), 1) == 700
    assert len(writes) == n_writes
    assert slab.arr[6] == 0

    # a failed write after an enqueued launch is returned negated: the caller must not
    # launch again to learn the error
    launch_rc[0] = 0
    write_rc[0] = 1
    n_launches = len(launches)
    assert _reactor.launch_and_write(0xF00, 1, 1, 1, 1, 1, 1, 0, 0, 0, slab.addr(6), 1) == -1
    assert len(launches) == n_launches + 1

    with pytest.raises(OverflowError):
        _reactor.launch_and_write(0xF00, 2**32, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0)
    with pytest.raises(TypeError):
        _reactor.launch_and_write(0xF00, 1, 1)


def test_copy_and_write_copies_then_writes_the_flag_and_reports_which_failed(slab, entry_points):
    # cuMemcpyHtoDAsync stood in for by a host memcpy: the bytes arrive, then the flag.
    order, copy_rc, write_rc = [], [0], [0]

    @COPY_T
    def fake_copy(dst, src, nbytes, stream):
        order.append(("copy", stream, nbytes))
        if copy_rc[0] == 0:
            ctypes.memmove(dst, src, nbytes)
        return copy_rc[0]

    @WRITE_T
    def fake_write(stream, addr, value, flags):
        order.append(("write", stream, value))
        if write_rc[0] == 0:
            _reactor.store32(addr, value)
        return write_rc[0]

    with pytest.raises(RuntimeError, match="cuMemcpyHtoDAsync"):
        _reactor.copy_and_write(0, 0, 0, 0, slab.addr(1), 1)
    entry_points(write=fake_write, copy=fake_copy)
    src = np.arange(1024, dtype=np.float32)
    dst = np.zeros(1024, np.float32)
    rc = _reactor.copy_and_write(dst.ctypes.data, src.ctypes.data, 4096, 0x77, slab.addr(1), 5)
    assert rc == 0
    np.testing.assert_array_equal(dst, src)
    assert order == [("copy", 0x77, 4096), ("write", 0x77, 5)]
    assert slab.arr[1] == 5
    order.clear()
    copy_rc[0] = 1  # CUDA_ERROR_INVALID_VALUE: nothing enqueued, no flag
    assert _reactor.copy_and_write(dst.ctypes.data, src.ctypes.data, 4, 0x77, slab.addr(2), 1) == 1
    assert order == [("copy", 0x77, 4)] and slab.arr[2] == 0
    copy_rc[0], write_rc[0] = 0, 2  # the copy enqueued, its flag write failed: negated
    assert _reactor.copy_and_write(dst.ctypes.data, src.ctypes.data, 4, 0x77, slab.addr(2), 1) == -2
    with pytest.raises(ValueError, match="value"):
        _reactor.copy_and_write(0, 0, 4, 0x77, slab.addr(2), 2**32)
    with pytest.raises(TypeError):
        _reactor.copy_and_write(0, 0, 4)


# -- host signals (the host function of host-callback completions) ----------------------
@pytest.fixture
def signal_queue(make_queue):
    """A fresh host-signal queue for the test; the hub's own one is put back after."""
    from cuasync._core import completion

    q = make_queue()
    _reactor.set_host_signal_queue(q)
    yield q
    _reactor.set_host_signal_queue(completion.get_hub().background.signals)


def test_host_signal_fn_pushes_its_data_from_many_threads(signal_queue):
    host_fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(_reactor.HOST_SIGNAL_FN)

    def signal(first: int) -> None:  # a foreign call: no GIL held while it runs
        for sid in range(first, first + 1000):
            host_fn(sid)

    threads = [threading.Thread(target=signal, args=(1 + 1000 * k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert select.select([signal_queue.fileno()], [], [], 5)[0]  # the loop is woken
    got = signal_queue.drain()
    assert sorted(got[0]) == list(range(1, 8001)) and got[1] == []
    host_fn(0xFFFFFFFF)  # every 32-bit id travels intact
    assert signal_queue.drain() == ([0xFFFFFFFF], [])


def test_host_signals_without_a_queue_are_dropped(signal_queue):
    host_fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(_reactor.HOST_SIGNAL_FN)
    _reactor.set_host_signal_queue(None)
    host_fn(5)
    assert signal_queue.drain() == ([], [])


def test_set_host_signal_queue_argument_errors(make_queue, signal_queue):
    with pytest.raises(TypeError, match="LoopQueue or None"):
        _reactor.set_host_signal_queue(3)
    closed = make_queue()
    closed.close()
    with pytest.raises(ValueError, match="must be open"):
        _reactor.set_host_signal_queue(closed)


# -- launch_packed: the parameter block packed in C ---------------------------------------
EVERY_SCALAR = r"""
extern "C" __global__ void every(float* x, const double* y, bool b, int8_t i8, uint8_t u8,
    int16_t i16, uint16_t u16, int i32, unsigned int u32, long long i64,
    unsigned long long u64, float f, double d) {}
"""


#: Halfway between float32's largest value and the next power of two.
F32_MIDPOINT = math.ldexp(2 - 2.0**-24, 127)


def _param_bytes(params_address: int, sizes: list[int]) -> list[bytes]:
    """What a launch's ``void**`` points at: each parameter's bytes."""
    slots = ctypes.cast(params_address, ctypes.POINTER(ctypes.c_void_p))
    return [ctypes.string_at(slots[i], size) for i, size in enumerate(sizes)]


class _Pointer:
    """A pointer argument given as an object with ``.ptr`` (a tensor, a DeviceArray)."""

    def __init__(self, ptr: int) -> None:
        self.ptr = ptr


def test_launch_packed_packs_as_the_python_param_block(slab, entry_points):
    # The same launch packed by the native module and by ParamBlock.pack must hand the
    # driver the same bytes for every parameter type the native module packs.
    import struct

    from cuasync._backends._params import ParamBlock
    from cuasync._launch.signature import parse_params

    block = ParamBlock(parse_params(EVERY_SCALAR, "every"))
    assert block.layout is not None
    sizes = [struct.calcsize("<" + c) for c in "QQ?bBhHiIqQfd"]
    seen: list[list[bytes]] = []

    @LAUNCH_T
    def fake_launch(f, gx, gy, gz, bx, by, bz, shmem, stream, params, extra):
        seen.append(_param_bytes(params, sizes))
        return 0

    entry_points(launch=fake_launch)
    cases: list[list[Any]] = [
        [0x7F0000001000, _Pointer(0x7F0000002000), True, -128, 255, -32768, 65535,
         -(2**31), 2**32 - 1, -(2**63), 2**64 - 1, 3.4028234663852886e38, -1e308],
        [0, 0, False, 127, 0, 32767, 0, 2**31 - 1, 0, 2**63 - 1, 0, -1.5, math.inf],
        [1, 2, 7, 0, 1, 0, 1, 5, 6, 7, 8, 3, math.nan],  # ints for floats, an int for bool
        # over FLT_MAX as a double, but rounding down to it: not an overflow
        [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, math.nextafter(F32_MIDPOINT, 0), 0.0],
    ]  # fmt: skip
    for args in cases:
        assert _reactor.launch_packed(1, 1, 1, 1, 1, 1, 1, 0, 0, block.layout, args, 0, 0) == 0
        expected = _param_bytes(block.pack(args), sizes)
        assert seen[-1] == expected, args
    with pytest.raises(OverflowError):  # never reached from cuasync: the launch plan checks
        _reactor.launch_packed(
            1, 1, 1, 1, 1, 1, 1, 0, 0, block.layout, [0, 0, 1, 128] + [0] * 9, 0, 0
        )
    for too_big in (1e39, F32_MIDPOINT):  # (the midpoint rounds up to inf)
        with pytest.raises(OverflowError):
            _reactor.launch_packed(
                1, 1, 1, 1, 1, 1, 1, 0, 0, block.layout, [0] * 11 + [too_big, 0.0], 0, 0
            )
    with pytest.raises(ValueError, match="13 parameters"):
        _reactor.launch_packed(1, 1, 1, 1, 1, 1, 1, 0, 0, block.layout, [0] * 12, 0, 0)
    with pytest.raises(ValueError, match="record 0"):
        _reactor.launch_packed(1, 1, 1, 1, 1, 1, 1, 0, 0, b"e\0\0\0\0\0\0\0", [1.0], 0, 0)
    # a tuple (a launch op's arguments) packs as the list does; anything else is refused
    assert (
        _reactor.launch_packed(1, 1, 1, 1, 1, 1, 1, 0, 0, block.layout, tuple(cases[0]), 0, 0) == 0
    )
    assert seen[-1] == _param_bytes(block.pack(cases[0]), sizes)
    with pytest.raises(TypeError):
        _reactor.launch_packed(1, 1, 1, 1, 1, 1, 1, 0, 0, block.layout, iter(cases[0]), 0, 0)
    assert len(seen) == len(cases) + 1  # nothing launched for a bad argument


def test_launch_packed_writes_the_flag_after_the_launch(
    slab, entry_points, make_reactor, make_queue
):
    writes: list[tuple[int, int]] = []

    @WRITE_T
    def fake_write(stream, addr, value, flags):
        writes.append((addr, value))
        _reactor.store32(addr, value)
        return 0

    @LAUNCH_T
    def fake_launch(f, gx, gy, gz, bx, by, bz, shmem, stream, params, extra):
        assert params is None  # no parameters: no array
        return 0

    entry_points(write=fake_write, launch=fake_launch)
    r, q = make_reactor(), make_queue()
    r.arm(7, 1, q)
    assert _reactor.launch_packed(1, 1, 1, 1, 1, 1, 1, 0, 0x55, b"", [], slab.addr(7), 1) == 0
    assert writes == [(slab.addr(7), 1)]
    assert collect(q, 1) == ([7], [])


def test_kernels_with_half_or_complex_parameters_are_packed_in_python():
    from cuasync._backends._params import ParamBlock
    from cuasync._launch.signature import parse_params

    for ctype in ("__half", "__nv_bfloat16", "float2", "double2"):
        source = f'extern "C" __global__ void k(float* x, {ctype} v) {{}}'
        assert ParamBlock(parse_params(source, "k")).layout is None, ctype


# -- ExecLock: the execution lock ---------------------------------------------------------


def test_exec_lock_is_a_lock_as_threading_lock_is() -> None:
    lock = _reactor.ExecLock()
    assert not lock.locked() and "unlocked" in repr(lock)
    assert lock.acquire() is True and lock.locked()
    assert lock.acquire(False) is False  # not reentrant
    assert lock.acquire(timeout=0.01) is False
    with pytest.raises(ValueError, match="timeout"):
        lock.acquire(False, 1)
    with pytest.raises(ValueError, match="non-negative"):
        lock.acquire(timeout=-2)
    with pytest.raises(TypeError, match="unexpected keyword"):
        lock.acquire(wait=True)
    lock.release()
    with pytest.raises(RuntimeError, match="release unlocked lock"):
        lock.release()
    with lock:
        assert lock.locked()
    assert not lock.locked()
    with pytest.raises(TypeError, match="no arguments"):
        _reactor.ExecLock(1)


def test_exec_lock_blocks_until_another_thread_lets_go() -> None:
    lock = _reactor.ExecLock()
    taken, go = threading.Event(), threading.Event()
    order: list[str] = []

    def holder() -> None:
        with lock:
            taken.set()
            go.wait(5)
            order.append("released")

    t = threading.Thread(target=holder)
    t.start()
    assert taken.wait(5)
    threading.Timer(0.05, go.set).start()
    assert lock.acquire(timeout=5) is True  # (the GIL released: the holder runs)
    order.append("acquired")
    lock.release()
    t.join(5)
    assert order == ["released", "acquired"]


@pytest.mark.skipif(not hasattr(__import__("signal"), "setitimer"), reason="needs setitimer")
def test_a_signal_handler_that_raises_interrupts_a_blocked_acquire() -> None:
    import signal

    lock = _reactor.ExecLock()
    lock.acquire()

    class Interrupted(Exception):
        pass

    def handler(signum: int, frame: Any) -> None:
        raise Interrupted

    previous = signal.signal(signal.SIGALRM, handler)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.05)
        with pytest.raises(Interrupted):
            lock.acquire()  # would wait forever: the handler's exception ends it
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert lock.locked()  # still held by the first acquire
    lock.release()


def test_cuasync_submits_under_the_native_exec_lock() -> None:
    from cuasync._core.context import LOCK

    assert type(LOCK) is _reactor.ExecLock


# -- CurrentOrdinal: a device ordinal per thread ------------------------------------------


def test_current_ordinal_is_one_int_per_thread() -> None:
    here, other = _reactor.CurrentOrdinal(), _reactor.CurrentOrdinal()
    assert here.ordinal == -1  # until set
    here.ordinal = 3
    assert (here.ordinal, other.ordinal) == (3, -1)  # one value per object
    seen: list[int] = []

    def elsewhere() -> None:
        seen.append(here.ordinal)
        here.ordinal = 1
        seen.append(here.ordinal)

    t = threading.Thread(target=elsewhere)
    t.start()
    t.join(5)
    assert seen == [-1, 1] and here.ordinal == 3  # and one per thread
    here.ordinal = -1
    assert here.ordinal == -1
    with pytest.raises(ValueError, match="ordinal"):
        here.ordinal = -5
    with pytest.raises(TypeError):
        here.ordinal = "0"
    with pytest.raises(AttributeError):
        del here.ordinal


@pytest.mark.skipif(not hasattr(__import__("signal"), "setitimer"), reason="needs setitimer")
def test_a_timed_acquire_times_out_while_signals_keep_arriving() -> None:
    import signal

    lock = _reactor.ExecLock()
    lock.acquire()
    previous = signal.signal(signal.SIGALRM, lambda *_: None)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.02, 0.02)  # a signal every 20 ms
        t0 = time.monotonic()
        assert lock.acquire(timeout=0.2) is False  # each signal must not restart the wait
        assert time.monotonic() - t0 < 5
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    lock.release()
    for bad, error in ((math.nan, ValueError), (math.inf, OverflowError), (1e30, OverflowError)):
        with pytest.raises(error):
            lock.acquire(timeout=bad)
