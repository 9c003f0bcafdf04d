"""Completions: how the host learns that submitted work has finished.

This module is the one owner of waiting: the :class:`Hub` tracks every completion,
spins on it, arms it in the reactor, finishes it and detects device faults. Event
loops plug in through a small :class:`LoopAdapter` (:mod:`.loops`); blocking threads
call :meth:`Hub.block`.

Every submission that is awaited or turned into a future gets a :class:`Completion`.
Its work is followed on the stream by one of:

* a **flag write**: the next generation of a 32-bit slot in a pinned, device-mapped slab
  (``write_value32``). The awaiting side spins on it briefly (inline spin), then arms it
  in the native reactor, which wakes the owning event loop;
* a **host callback** (``launch_host_func``) when the slot pool is exhausted, the native
  module is missing, stream memory operations are unsupported, or
  ``CUASYNC_HOST_SYNC=callback`` asks for it (``callback-spin`` / ``callback-block``: with
  that host-task sync mode, through ``cuLaunchHostFunc_v2``).

When completion is observed the output is realized (``map`` functions run), the stream's
completed sequence number advances and every object the work used is released. Work
nobody awaits any more (a cancelled task, a future dropped unawaited, a closed loop) is
handed to the hub's background watcher (:mod:`.watcher`).

>>> hub = get_hub()
>>> comp = hub.attach(ctx, out)                 # at submission, under the execution lock
>>> value = yield from wait(comp, adapter)      # the body of every await
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from .._backends import get_backend
from .._backends.base import (
    HOST_TASK_BLOCKING,
    HOST_TASK_SPINWAIT,
    LEGACY_STREAM,
    PER_THREAD_STREAM,
    Backend,
)
from .._config import CONFIG
from .._curesult import Code
from .._exceptions import fresh, warn_leak
from ..errors import BackendUnavailableError, DeviceError, DeviceFaultError, InternalError
from . import wake as _wake  # noqa: F401 (the early wake's policy, which park reads, set)
from .output import Output
from .trace import end_flight
from .watcher import BackgroundWatcher

if TYPE_CHECKING:
    from .context import ExecutionContext
    from .device import Device

from .._native import NATIVE as _reactor
from .._native import PROCESS, CompletionCore, HubCore

_ledger_type = _reactor.SlotLedger

log = logging.getLogger("cuasync.completion")

#: The DEBUG line about probes for faults: at most one per device per this many seconds
#: (ordinary work longer than ``CUASYNC_STALE_US`` is probed every few milliseconds).
PROBE_LOG_INTERVAL = 1.0

PENDING, FINISHING, DONE, FAILED = 0, 1, 2, 3
INLINE, REACTOR, CALLBACK, BLOCKING = "inline", "reactor", "host_callback", "blocking"
#: Finished by its loop's early wake (:mod:`.wake`): parked, then seen by the loop's spin;
#: ``EARLY_LATE``: the wake looked only after the work had landed. (The native wake and
#: ``HubCore.release``, reactor/python/timer.c and completion.c, spell these paths too.)
EARLY, EARLY_LATE = "early_wake", "early_wake_late"


@dataclass
class Stats:
    """Counters of the completion machinery (see :func:`cuasync.stats`).

    Completions by the path that finished them: ``completed_inline`` (the spin saw the
    flag), ``completed_reactor`` (the native reactor woke the loop), ``early_wakes``
    (the loop woke itself before the expected landing and its spin saw the flag),
    ``completed_host_callback`` (a host function signalled it), ``completed_blocking``
    (a blocking wait, ``sync()`` or ``fut.wait()``). ``reactor_wakeups``: times the
    reactor woke a loop; ``reactor_batches``: drains of a loop's queue that finished
    work (``completed_reactor / reactor_batches``: completions per wake-up);
    ``slots_armed``/``slots_total``: completion slots in use and in all
    (``CUASYNC_SLOTS``); ``callbacks_pending``: completions waiting on a host callback;
    ``fallbacks``: awaits that found every slot in use and used a host callback;
    ``spins_skipped``: awaits that did not spin because other work on their loop was
    ready to run; ``spins_skipped_long``: awaits of a launch that parked without the
    inline spin, their kernel and grid known to outlast it (:mod:`cuasync._core.wake`);
    ``burst_awaits``: awaits of a kernel launch that found other tasks ready and stepped
    aside (their launch queued for the native submitter thread, or made at once on the
    emulator) while those ran; ``launches_queued``: launches the submitter thread made;
    ``burst_handed_over``: awaits in a burst whose work had not landed after their steps
    aside (they then spin and park as any await); ``early_wakes`` / ``early_misses``:
    parked awaits whose loop woke itself before the expected landing and saw the flag
    land / ended its spin first (``CUASYNC_WAKE``), ``early_spin_ns`` and
    ``early_spin_max_ns``: their spins' time in all and the longest one, ``early_late``:
    those wakes that looked after their work had landed (the timer's lateness past the
    lead, or work that got shorter, found by a pre-wake too: those awaits paid the time between),
    ``early_prewakes``: the wakes a long wait's loop took shortly before those (to warm
    its thread); ``faults``: device
    faults that failed pending work; ``stale_probes``: checks of a slot that made no progress;
    ``reactor``: whether awaits use flag slots; ``host_sync``: the ``CUASYNC_HOST_SYNC``
    mode in force; ``native``: whether the native module is loaded.

    >>> s = cuasync.stats()
    >>> s.completed_inline + s.completed_reactor, s.slots_armed
    """

    completed_inline: int = 0
    completed_reactor: int = 0
    completed_host_callback: int = 0
    completed_blocking: int = 0
    reactor_wakeups: int = 0
    #: Drains of a loop's reactor queue that finished at least one completion.
    reactor_batches: int = 0
    slots_armed: int = 0
    slots_total: int = 0
    callbacks_pending: int = 0
    fallbacks: int = 0
    #: Awaits that did not spin because other work on their loop was ready to run.
    spins_skipped: int = 0
    #: Awaits of a launch that parked at once, without the inline spin: the early wake's
    #: steady estimate says their kernel and grid outlast it.
    spins_skipped_long: int = 0
    #: Awaits of a launch that stepped aside in a burst (see :mod:`cuasync._core.express`).
    burst_awaits: int = 0
    #: Launches made by the native submitter thread (queued by bursts of awaits).
    launches_queued: int = 0
    #: Awaits in a burst whose work had not landed after their steps aside: they then
    #: spin and park as any await (a long kernel, a held stream).
    burst_handed_over: int = 0
    #: Parked awaits their loop's own timer woke shortly before the expected landing
    #: and that finished there (:mod:`cuasync._core.wake`: the completions of that path),
    #: and those whose spin ended first (the reactor reported them).
    early_wakes: int = 0
    early_misses: int = 0
    #: Of ``early_wakes``, those that looked only after their work had landed: the timer
    #: woke the loop late (or the work got shorter), and the await paid the time between.
    early_late: int = 0
    #: The time those wakes' loops spent spinning on flags in all (ns), and the longest
    #: one spin (a loop's other work, a ``/health`` probe, waits that long at most).
    early_spin_ns: int = 0
    early_spin_max_ns: int = 0
    #: Pre-wakes of the loop's timer before the early wake of a long wait (they only set
    #: the timer again: :attr:`cuasync._core.wake.Policy.prewake_ns`).
    early_prewakes: int = 0
    faults: int = 0
    stale_probes: int = 0
    reactor: bool = False
    #: ``CUASYNC_HOST_SYNC`` in force: ``reactor``, ``callback``, ``callback-spin`` or
    #: ``callback-block``.
    host_sync: str = "reactor"
    #: Whether the native module ``cuasync._reactor`` is loaded (else host callbacks only).
    native: bool = False


#: How long the early wake's spin keeps the GIL before it releases it for the rest of
#: its window (``spin_wait``'s ``hold_ns``), for a launch or a library call (waits
#: included): work that is usually the device's alone, where only the device writes the
#: flag (not on the emulator, whose device is a Python thread:
#: ``Backend.python_writes_flags``; not for generic ops: an upload from pageable memory
#: waits for cuasync's copy threads). A spin that released it at once handed it to any
#: other Python thread waiting for it, and getting it back took up to that thread's switch
#: interval (5 ms) where the work landed microseconds later: a window of at most about
#: 400 us overran by up to 5 ms beside a thread running Python. Longer than any window of
#: the default policy: other threads wait at most one window. Work that does wait for
#: Python (another library's host function on a waited stream, a gate opened from another
#: thread) lands after the window, and the reactor reports it: late by a window at most.
SPIN_HOLD_NS = 500_000

Waiter = Callable[["Completion"], None]


class LoopAdapter(Protocol):
    """What the hub needs from an event loop to wait on it (implemented in :mod:`.loops`).

    ``queue`` is the reactor queue whose completions this loop finishes: None until the
    hub first arms a slot for the loop; the hub then sets it and calls
    ``watch_fd(queue.fileno(), drain)``.
    """

    queue: Any

    def watch_fd(self, fd: int, drain: Callable[[], None]) -> None:
        """Call ``drain()`` on the loop's thread whenever ``fd`` is readable; when the
        loop goes away, call ``get_hub().detach(self)``."""

    def park(self) -> tuple[Waiter, Callable[[], Generator[Any, Any, Any]]]:
        """A one-shot wake-up (callable from any thread) and the suspension it ends."""

    #: Whether an await in a burst may step aside with a bare ``yield`` (asyncio's).
    steps_aside: bool
    #: Whether the last spin on this loop ran out before its work landed.
    long_ops: bool
    #: Awaits that found ``long_ops`` and other work ready (every 64th spins anyway).
    skips: int

    def others_ready(self) -> bool:
        """Whether other work on the loop is ready to run now: spinning would delay it."""


#: Guards every completion's state transition; never held while calling out. Reentrant:
#: a garbage collection inside a critical section may run a finalizer that takes it.
_STATE_LOCK = threading.RLock()


def _run_checks(ctx: Any) -> None:
    """Run ``ctx``'s checks (:meth:`ExecutionContext.check_when_done`); the first error
    goes to its error box, where the submission and any op sharing it find it."""
    for check in ctx.checks:
        try:
            check()
        except BaseException as exc:
            ctx.error_box().append(exc)
            return


class Completion(CompletionCore):
    """One submitted execution, tracked until its completion is observed.

    Attributes that most completions never change are class-level defaults, so that
    creating one (on the path of every await) sets only four attributes.
    """

    # ctx, out, stream, device, seq, slot (-1: none), gen, address and armed_at are the
    # native base's fields (``CompletionCore``: the native core makes completions), and
    # ``result()`` and ``finish(path)`` are its methods; the finish: the work completed,
    # so the output is realized, what it used released (``Hub.release``) and the waiters
    # called (the trace's end and the context's checks, which it calls where there are
    # any, are these two)
    _end_flight = staticmethod(end_flight)
    _run_checks = staticmethod(_run_checks)
    _fresh = staticmethod(fresh)  # (result() raises a fresh copy after the first raise)
    state = PENDING
    value: Any = None
    error: BaseException | None = None
    path = ""
    landed_by_callback = False
    signal = 0  # the id its host function pushes (host-callback completions, native)
    watcher: Any = None  # the loop bridge whose queue the reactor reports to
    abandoned = False  # nobody will read the output: drop it at finish
    raised = False  # the error was raised once: raise fresh copies from now on
    trace: Any = None  # the NVTX range of the work in flight, while tracing (see .trace)
    _waiters: Waiter | list[Waiter] | None = None  # (one alone: no list, as most have)
    _lock = _STATE_LOCK

    def __init__(self, ctx: ExecutionContext, out: Output[Any]) -> None:
        self.ctx: ExecutionContext | None = ctx
        self.out: Output[Any] | None = out
        self.stream = ctx.stream
        self.device = ctx.device
        self.seq = ctx.seq

    # -- observation -------------------------------------------------------------------
    def landed(self) -> bool:
        """Whether the device has finished the work (never blocks)."""
        if self.state != PENDING:
            return True
        if self.slot >= 0:
            try:
                word = _reactor.load32(self.address)
            except ValueError:  # (not a live slab's word: the reactor closed at exit?)
                hub = PROCESS.hub
                if hub is None or not hub.closed:
                    raise
                return not self.stream._pending(self.seq) or self.stream.query()
            return ((word - self.gen) & 0xFFFFFFFF) < 0x80000000
        # A host callback's signal may still be on its way to the watcher after the
        # stream was seen idle (Stream.synchronize, Stream.query): that says it too.
        return self.landed_by_callback or not self.stream._pending(self.seq)

    def poll(self) -> bool:
        """Finish on this thread if the work has landed; True once the result is available.

        Never blocks. Work that has not landed is checked for a device fault (a faulted
        device never lands its flags), so polling tells "not yet" from "never".
        """
        if self.state == PENDING:
            if self.landed():
                self.finish(INLINE)
            else:
                hub = PROCESS.hub
                if hub is not None:
                    hub.check_fault(self)
        return self.state >= DONE

    def abandon(self) -> None:
        """Nobody will read the output: release it as soon as the work lands.

        Frames of a cancelled task can keep the completion reachable through reference
        cycles until the cyclic GC runs; without the output it holds no device memory.
        """
        self.abandoned = True
        if self.state >= DONE:
            self.value = None

    # -- resolution ----------------------------------------------------------------------
    def fail(self, error: BaseException) -> None:
        """The work will never complete (device fault): resolve with ``error``.

        What the work used is leaked rather than released: the faulted device may still
        hold references to it.
        """
        with self._lock:
            if self.state != PENDING:
                return
            if self.ctx is not None and self.ctx.retained:
                _leaked.append(self.ctx.retained)
                warn_leak(self.device, "the inputs and outputs of its pending work")
            self.ctx = self.out = None
            self.error = error
            self.state = FAILED
            self.path = "fault"
            waiters, self._waiters = self._waiters, None
        if self.trace is not None:
            end_flight(self)
        hub = PROCESS.hub
        if hub is not None:
            hub.forget(self)
        self._wake(waiters)


#: Objects used by work that faulted: kept forever rather than freed under a dead context.
_leaked: list[list[Any]] = []


def _store32(address: int, value: int) -> None:
    """The fallback of ``_reactor.store32`` (no native module: no reactor reads the word)."""
    import ctypes

    ctypes.c_uint32.from_address(address).value = value


def _zero(address: int, nbytes: int) -> None:
    """Fill ``nbytes`` of host memory at ``address`` with zeros (the hub's new slab)."""
    import ctypes

    ctypes.memset(address, 0, nbytes)


class Hub(HubCore):
    """Process-wide completion machinery: the slot slab, the reactor, the host-callback
    fallback, waiting (spin, arm, finish, hand-over) and fault detection. The early
    wake's spin (``spin_early``, which a loop's ``wake.Timer`` calls), the release of
    what a finished completion used (``release``, which its finish calls), a parked
    await's set-up (``park``, ``watch``, ``arm``) and its suspension (``suspend``) are the
    native base's (``HubCore``).

    >>> get_hub().block(comp)           # what fut.wait() does after its checks
    """

    def __init__(self, native: Any = _reactor) -> None:
        backend = get_backend()
        #: ``CUASYNC_HOST_SYNC``, and the host-task sync mode it asks of every host callback.
        self.host_sync = CONFIG.host_sync
        self.host_task_mode = _host_task_mode(backend, self.host_sync)  # first: it may raise
        #: The native module, or None for a hub without the reactor (every await through
        #: a host callback: the tests of that fallback build one).
        self.native = native
        self.backend = backend
        self.stats = Stats()
        self.lock = threading.RLock()  # reentrant: finalizers may run inside its sections
        self.nslots = CONFIG.slots
        self.slab = backend.host_alloc(4 * self.nslots)
        # Every slot's generations start at 0, and a wait for generation g is a cyclic
        # greater-or-equal: a word left over in recycled pinned memory could satisfy it
        # before the GPU writes it (a gate open at once, a completion landed early).
        _zero(self.slab, 4 * self.nslots)
        #: The slab's slots: the one owner of claiming, arming and releasing them (its
        #: calls run under the GIL, so without a lock; the native core shares it).
        self.slots = _ledger_type(self.slab, self.nslots)
        self.stats.slots_total = self.nslots
        self.stats.native = native is not None
        self.callback_pending: set[Completion] = set()
        #: Host-callback completions by the id their native host function pushes.
        self.signals: dict[int, Completion] = {}
        self._last_signal = 0
        self.reactor: Any = None
        #: How long the early wake's spin for a launch or a library call keeps the GIL
        #: (:data:`SPIN_HOLD_NS`; 0 where a Python thread writes the flags: the emulator).
        self.spin_hold_ns = 0 if backend.python_writes_flags else SPIN_HOLD_NS
        if native is not None:  # (None: a hub without the reactor, host callbacks only)
            self.reactor = native.Reactor(
                self.slab,
                self.nslots,
                stale_ns=CONFIG.stale_us * 1000,
                stale_max_ns=max(CONFIG.stale_us * 1000, 20_000_000),
                backoff_max_ns=100_000,
            )
            atexit.register(self._close_at_exit)  # before the slab goes away with the process
        #: Whether awaits use flag slots (else host callbacks); the benchmarks flip it.
        self.use_reactor = self.reactor is not None and self.host_sync == "reactor"
        #: The native thread that makes the launches of bursts of awaits (CUDA with the
        #: native module, once bursts step aside), or None.
        self.submitter: Any = None
        #: Whether an await in a burst steps aside, its launch queued (``CUASYNC_SUBMITTER``).
        self.step_aside = False
        if CONFIG.submitter:
            self.enable_bursts()
        self.stats.reactor = self.use_reactor
        self.stats.host_sync = self.host_sync
        #: Inline spin before suspending, in microseconds (``CUASYNC_SPIN_BUDGET_US``).
        self.spin_budget_us = CONFIG.spin_budget_us
        self._memops: dict[int, bool] = {}
        self._last_probe: dict[int, float] = {}
        self._probe_interval = CONFIG.stale_us / 1e6
        self._exhaustion_logged = False
        self._faults_logged: set[int] = set()
        #: Per device: when a probe was last logged, and how many probes it has had.
        self._probes_logged: dict[int, tuple[float, int]] = {}
        #: The native module's express submission of launches (``_reactor.Express``), or
        #: None: every op then takes the generic path (see :mod:`.express`). The op
        #: layer above this module makes it (``PROCESS.make_core``, handed over when
        #: :mod:`.express` is imported, which attaches it to a hub made before).
        make_core = PROCESS.make_core
        self.express = None if make_core is None else make_core(self)
        self._core = self.express  # (its counters, even while a test swaps it out)
        # Last: it uses the reactor, and it is the one thread the hub starts.
        self.background = BackgroundWatcher(self)
        if self.reactor is not None:
            # Reports for a queue closed with slots still armed (a loop that went away)
            # go to the background watcher instead of being dropped. So do the stale
            # reports of long work: the watcher probes for faults, and a loop is woken
            # only by completions (each wake-up can make the loop's timers late: see
            # docs/completion.md, "Stale reports").
            self.reactor.set_orphan_queue(self.background.queue)
            self.reactor.set_stale_queue(self.background.queue)

    def enable_bursts(self) -> None:
        """Let awaits in a burst step aside, their launches made by the native submitter
        where the backend has one (``CUASYNC_SUBMITTER=on`` does it at start-up). Its
        thread starts at the first burst; from then on every driver call of the backend
        first waits for the launches it has queued."""
        if self.use_reactor and self.submitter is None:
            self.submitter = self.backend.make_submitter(self.reactor, self.slab)
        self.step_aside = True

    # -- submission side (under the execution lock) --------------------------------------
    #: Set at interpreter exit, when the reactor closes: the flag words can no longer be
    #: read, and the background watcher stops instead of failing on them.
    closed = False

    def _close_at_exit(self) -> None:
        self.closed = True
        background = getattr(self, "background", None)  # (None: its __init__ failed first)
        if background is not None:
            background.kick()  # (it stops: see BackgroundWatcher._run)
        if self.submitter is not None:
            # What is queued is launched (at most a few ms); a thread stuck in the driver
            # (a stream held by a gate nobody opens) is left to the process's end.
            self.submitter.close(0.5)
            self.native.set_launch_fence(None)
        if self.reactor is not None:
            self.reactor.close()

    def stream_memops(self, ordinal: int) -> bool:
        """Whether device ``ordinal`` takes stream memory ops (the flag writes), asked of
        the backend once; ``_memops`` holds the answers, read inline on every submission.

        >>> hub.stream_memops(0)
        True
        """
        memops = self._memops.get(ordinal)
        if memops is None:
            memops = self._memops[ordinal] = self.backend.supports_stream_memops(ordinal)
        return memops

    def attach(self, ctx: ExecutionContext, out: Output[Any]) -> Completion:
        """Create the completion of ``ctx`` and enqueue its notification after the work."""
        comp = Completion(ctx, out)
        if ctx.capturing:
            raise InternalError("completions cannot be attached while capturing")
        slot = -1
        if self.use_reactor:
            ordinal = ctx.device.ordinal
            memops = self._memops.get(ordinal)
            if memops is None:
                memops = self.stream_memops(ordinal)
            if memops:
                claimed = self.slots.claim()
                if claimed is not None:
                    slot, gen, address = claimed
                else:
                    self.stats.fallbacks += 1
                    if not self._exhaustion_logged:
                        self._exhaustion_logged = True
                        log.warning(
                            "all %d completion slots are in use; further awaits complete "
                            "through host callbacks until slots free up (logged once; raise "
                            "CUASYNC_SLOTS, cuasync.stats().fallbacks counts them)",
                            self.nslots,
                        )
        deferred = ctx.deferred
        ctx.deferred = None  # launched once: a failed launch is not tried again on release
        if slot < 0:
            if deferred is not None:
                self.backend.launch_kernel(*deferred)
            self._attach_callback(comp)
            return comp
        comp.slot, comp.gen, comp.address = slot, gen, address
        comp.armed_at = time.monotonic()
        self.slots.arm(slot, comp)
        try:
            if deferred is not None:  # a lone launch: it and the flag write in one call
                kernel, grid, block, shared_mem, stream, args, errors = deferred
                self.backend.launch_kernel(
                    kernel, grid, block, shared_mem, stream, args, errors, address, gen
                )
            else:
                self.backend.write_value32(ctx.stream.handle, address, gen)
        except BaseException:
            self.slots.release(slot)
            comp.slot = -1
            raise
        return comp

    def _attach_callback(self, comp: Completion) -> None:
        """Complete ``comp`` through a host function enqueued after its work.

        With the native module, the host function is C (``HOST_SIGNAL_FN``): it pushes
        an id to the background watcher's signal queue and takes no GIL. A host function
        that needs the GIL can deadlock the driver against any thread that holds the GIL
        while the driver waits for that host function; without the native module there
        is no other way, and its Python is kept to the minimum.
        """
        background = self.background
        with self.lock:
            self.callback_pending.add(comp)
        comp.armed_at = time.monotonic()
        try:
            if background.signals is not None:
                with self.lock:
                    comp.signal = self._next_signal()
                    self.signals[comp.signal] = comp
                fn, mode = self.native.HOST_SIGNAL_FN, self.host_task_mode
                if mode is None:
                    self.backend.launch_host_signal(comp.stream.handle, fn, comp.signal)
                else:
                    self.backend.launch_host_signal(comp.stream.handle, fn, comp.signal, mode)
            else:

                def landed() -> None:
                    # On a driver thread: only record the landing. Finishing frees memory
                    # and runs map functions (driver calls): the background watcher does it.
                    comp.landed_by_callback = True
                    background.finish_soon(comp)

                if self.host_task_mode is None:
                    self.backend.launch_host_func(comp.stream.handle, landed)
                else:
                    self.backend.launch_host_func(comp.stream.handle, landed, self.host_task_mode)
        except BaseException:
            self.forget(comp)
            comp.signal = 0
            raise
        background.kick()  # it probes host callbacks that make no progress

    def _next_signal(self) -> int:
        """A free 32-bit signal id, never 0 (under the lock)."""
        sid = self._last_signal
        while True:
            sid = sid % 0xFFFFFFFF + 1
            if sid not in self.signals:
                self._last_signal = sid
                return sid

    def on_signal(self, sid: int) -> None:
        """The host function of signal ``sid`` ran: its work is done."""
        with self.lock:
            comp = self.signals.pop(sid, None)
        if comp is not None:
            self.on_callback(comp)

    def on_callback(self, comp: Completion) -> None:
        """The host function of ``comp`` has run: finish it (not on a driver thread)."""
        comp.landed_by_callback = True
        comp.finish(CALLBACK)

    # -- host-written words (cuasync.testing gates) -----------------------------------------
    def claim_word(self) -> tuple[int, int, int]:
        """A slab word for the host to write: ``(slot, address, value)``.

        ``value`` is the word's next generation, not written yet: a stream told to wait
        for it (``stream_wait_value32``) waits until :meth:`release_word` writes it.
        Counted in ``slots_armed`` until then, so leak checks see a gate left closed.
        """
        claimed = self.slots.claim()
        if claimed is None:
            raise DeviceError(
                f"all {self.nslots} flag slots are in use; open some gates or raise CUASYNC_SLOTS"
            )
        slot, value, address = claimed
        return slot, address, value

    def claim_words(self, n: int) -> list[tuple[int, int, int]]:
        """``n`` words of :meth:`claim_word`, all or none: a failure part-way releases
        the ones already claimed (nothing waits on them yet)."""
        words: list[tuple[int, int, int]] = []
        try:
            for _ in range(n):
                words.append(self.claim_word())
        except BaseException:
            for slot, _, value in words:
                self.release_word(slot, value)
            raise
        return words

    def release_word(self, slot: int, value: int) -> None:
        """Write ``value`` into a claimed word (a release store) and give the slot back.

        Reusing the slot at once is safe: every later write to the word is a higher
        generation, which still satisfies a wait for ``value`` that has not run yet.
        """
        address = self.slab + 4 * slot
        if self.native is not None and not self.closed:
            self.native.store32(address, value)
        else:  # no native module, or exiting (the slab is no reactor's any more)
            _store32(address, value)
        self.slots.release(slot)

    # -- waiting (awaits enter through the module function ``wait``) -----------------------
    def block(self, comp: Completion, spin_us: int | None = None) -> None:
        """Block the calling thread until ``comp`` is finished (the thread "adapter").

        The background watcher observes it; a fault check every 0.5 s makes sure a
        faulted device never leaves the thread waiting forever.
        """
        if self.settle(comp, spin_us):
            return
        done = threading.Event()
        comp.add_waiter(lambda _: done.set())
        self.watch_in_background(comp)
        while not done.wait(0.5):
            if comp.poll():
                break

    def settle(self, comp: Completion, spin_us: int | None = None) -> bool:
        """Finish ``comp`` inline if it lands within the spin; True once finished.

        By default the spin is ``CUASYNC_SPIN_BUDGET_US``, and none at all when earlier
        work on the stream is still pending (many concurrent awaits): spinning would
        only burn the budget.
        """
        if comp.state != PENDING:
            return comp.state >= DONE
        if spin_us is None:
            spin_us = self.spin_budget_us
            if spin_us and comp.stream._completed < comp.seq - 1:
                spin_us = 0
        if comp.slot >= 0 and self.native is not None:  # spin, GIL released
            landed = self.native.spin_wait(comp.address, comp.gen, spin_us * 1000)
        else:
            landed = comp.landed()
        if landed:
            comp.finish(INLINE)
        return comp.state >= DONE

    def unquiet(self, comp: Completion, adapter: LoopAdapter) -> None:
        """Have the reactor watch ``comp``'s slot at once (armed quiet and watched for a
        loop's wake that could not be set)."""
        with comp._lock:
            if comp.state == PENDING and comp.watcher is adapter and self.reactor.disarm(comp.slot):
                self.arm(comp, adapter.queue)

    def open_queue(self, adapter: LoopAdapter) -> Any:
        """The reactor queue of the loop of ``adapter``, made and watched at its first arm."""
        queue = self.native.LoopQueue()
        try:
            adapter.watch_fd(queue.fileno(), lambda: self.drain(queue))
        except BaseException:
            queue.close()
            raise
        adapter.queue = queue
        return queue

    def watch_in_background(self, comp: Completion) -> None:
        """Make sure ``comp`` is observed, and what it uses released, with nobody awaiting.

        Moves it from whichever loop watched it to the background watcher. Never blocks
        and never starts a thread (destructors call it); does nothing once the process is
        exiting (the reactor closed at exit, or the interpreter finalizing: the driver
        releases all).
        """
        if comp.state != PENDING or comp.slot < 0 or self.reactor is None:
            return  # finished, or a host callback will finish it
        if self.closed or sys.is_finalizing():
            return  # (a closed reactor's flag words can no longer be read)
        background = self.background
        with comp._lock:
            if comp.state != PENDING:
                return
            watcher = comp.watcher
            if watcher is background:
                return
            if watcher is not None:
                # False: it was already pushed to that queue, so it has landed (see below).
                self.reactor.disarm(comp.slot)
            comp.watcher = background
            landed = comp.landed()
            if not landed:
                self.arm(comp, background.queue)  # under the lock: see arm
        if landed:
            comp.finish(INLINE)

    def detach(self, adapter: LoopAdapter) -> None:
        """The loop of ``adapter`` is going away: the background watcher takes over."""
        queue = adapter.queue
        if queue is None:
            return
        for comp in self.slots.completions():
            if comp is not None and comp.watcher is adapter:
                self.watch_in_background(comp)
        # Nothing is armed to it any more; what it still holds has landed. Reports that
        # race with the close go to the background watcher (the reactor's orphan queue).
        self.handle_reports(*queue.close())

    def drain(self, queue: Any) -> None:
        """Finish what the reactor reported on ``queue`` (called by the queue's owner)."""
        done, stale = queue.drain()
        if done:
            self.stats.reactor_batches += 1
        self.handle_reports(done, stale)

    def handle_reports(self, done: list[int], stale: list[int]) -> None:
        """Finish the completed slots and probe the stale ones."""
        for slots, handle in ((done, self.on_landed), (stale, self.on_stale)):
            for slot in slots:
                try:
                    handle(slot)
                except Exception:  # one bad entry must not lose the rest of the batch
                    log.exception("cuasync: error while handling completion slot %d", slot)

    def on_landed(self, slot: int) -> None:
        comp = self.slots.completion(slot)
        # A slot can be reported after its completion was finished another way and the
        # slot reused: only a completion whose own generation has landed is finished
        # (perhaps before the reactor saw it: release disarms it).
        if comp is not None and comp.landed():
            comp.finish(REACTOR)

    # -- faults: every way of telling "not yet" from "never" ------------------------------
    # A faulted device never lands its flags nor runs its host functions. It is found by
    # submission (raise_if_faulted), by polling (check_fault), by the reactor's stale
    # reports (on_stale) and by the watcher's clock for host callbacks (probe_callbacks);
    # all end in fail_device.
    def check_fault(self, comp: Completion) -> None:
        """``comp`` has not landed: fail it (and its device) if the device has faulted.

        Queries the stream only for work pending longer than ``CUASYNC_STALE_US``, at
        most once per device per that interval (see :meth:`probe`).
        """
        fault = self.backend.device_fault(comp.device.ordinal)
        if fault is not None:
            self.fail_device(comp.device, fault)
        elif time.monotonic() - comp.armed_at > self._probe_interval:
            self.probe(comp)

    def on_stale(self, slot: int) -> None:
        """The reactor saw no progress on ``slot`` for a while: probe its stream."""
        comp = self.slots.completion(slot)
        if comp is not None:
            self.probe(comp)

    def _log_probe(self, ordinal: int, stream: Any, now: float) -> None:
        """Log a probe at DEBUG: a device's first, then at most one line per
        :data:`PROBE_LOG_INTERVAL` (each line numbers the probe, so the count shows)."""
        last, count = self._probes_logged.get(ordinal, (-PROBE_LOG_INTERVAL, 0))
        count += 1
        if now - last < PROBE_LOG_INTERVAL:
            self._probes_logged[ordinal] = (last, count)
            return
        self._probes_logged[ordinal] = (now, count)
        log.debug(
            "probing %r of a completion with no progress for a fault (probe %d of device "
            "%d; this line at most once per %g s)",
            stream, count, ordinal, PROBE_LOG_INTERVAL,
        )  # fmt: skip

    def probe_callbacks(self, stale: float) -> None:
        """Probe the streams of host-callback completions pending longer than ``stale``
        seconds (the background watcher's clock calls it)."""
        now = time.monotonic()
        with self.lock:
            old = [c for c in self.callback_pending if now - c.armed_at > stale]
        for comp in old:
            self.probe(comp)

    def probe(self, comp: Completion) -> None:
        """Query the stream of a completion that is making no progress, to find faults.

        A device fault is sticky for the whole context, so one probe per device per
        ``CUASYNC_STALE_US`` is enough however many slots are stale: with many long
        kernels in flight the loop is not kept busy probing.
        """
        stream = comp.stream
        if stream._capturing or comp.state != PENDING:
            return
        ordinal = comp.device.ordinal
        now = time.monotonic()
        if now - self._last_probe.get(ordinal, -1.0) < self._probe_interval:
            return
        self._last_probe[ordinal] = now
        self.stats.stale_probes += 1
        if log.isEnabledFor(logging.DEBUG):
            self._log_probe(ordinal, stream, now)
        try:
            # The background watcher probes while the stream's own thread may begin a
            # capture, during which a query is illegal (and on a GPU would invalidate
            # the capture): the stream's lock orders the two (graph._begin takes it).
            with stream._lock:
                if stream._capturing:
                    return
                if stream.handle == PER_THREAD_STREAM:
                    # Handle 2 names the querying thread's own per-thread stream, not
                    # the one the work went to: ask the context (a fault is sticky for
                    # all of it) through the legacy stream, and learn nothing of idleness.
                    self.backend.stream_query(LEGACY_STREAM)
                    idle = False
                else:
                    idle = self.backend.stream_query(stream.handle)
        except DeviceFaultError as exc:
            self.fail_device(comp.device, exc)
        except DeviceError as exc:
            fault = self.backend.device_fault(ordinal)
            if fault is None and getattr(exc, "code", None) in _CAPTURE_CODES:
                return  # a capture by another thread's library, say: not a fault
            self.fail_device(comp.device, fault if fault is not None else exc)
        else:
            if idle and comp.slot < 0:
                # Its host function has run (it is a command of the idle stream), but its
                # signal was lost (no memory for the queue): finish it here.
                self.on_callback(comp)

    def fail_device(self, device: Any, error: BaseException) -> None:
        """Resolve every pending completion of ``device`` with ``error``."""
        with self.lock:
            victims = [c for c in self.slots.completions() if c.device is device]
            victims += [c for c in self.callback_pending if c.device is device]
        if victims:
            self.stats.faults += 1
        if device.ordinal not in self._faults_logged:
            self._faults_logged.add(device.ordinal)
            log.warning(
                "device %d faulted; failing its %d pending completions: %s",
                device.ordinal,
                len(victims),
                error,
            )
        for comp in victims:
            if comp.slot >= 0 and self.reactor is not None:
                self.reactor.disarm(comp.slot)
            comp.fail(fresh(error))  # one object per waiter: each is raised on its own

    # -- bookkeeping -------------------------------------------------------------------------
    # ``release(comp, path)`` is the native base's (``HubCore``): what a finished
    # completion used, given back (the path's counter, the slot back to the ledger),
    # called by its finish; a host-callback completion's entries go here:
    def _release_callback(self, comp: Completion) -> None:
        """A finished host-callback completion: out of the pending set and the signal
        table."""
        with self.lock:
            self.callback_pending.discard(comp)
            if comp.signal:
                self.signals.pop(comp.signal, None)

    def forget(self, comp: Completion) -> None:
        """A failed completion: its slot is retired (its flag may never land)."""
        with self.lock:
            if comp.slot >= 0:
                self.slots.retire(comp.slot)
            self.callback_pending.discard(comp)
            if comp.signal:
                self.signals.pop(comp.signal, None)

    def slots_in_use(self) -> int:
        """Flag slots claimed and not given back (completions and host-written words);
        retired ones (their work faulted) are not counted."""
        return self.slots.in_use

    def snapshot(self) -> Stats:
        stats = Stats(**vars(self.stats))
        if self._core is not None:  # what the native core settled itself
            stats.completed_inline += self._core.completed_inline
            stats.burst_awaits += self._core.burst_awaits
            stats.burst_handed_over = self._core.burst_handed_over
            stats.spins_skipped_long += self._core.parked_at_once
        stats.slots_armed = self.slots_in_use()
        stats.callbacks_pending = len(self.callback_pending)
        if self.reactor is not None:
            stats.reactor_wakeups = self.reactor.wakeups
        if self.submitter is not None:
            stats.launches_queued = self.submitter.launched
        return stats


#: What a query of a stream that is capturing (or whose capture failed) returns.
_CAPTURE_CODES = frozenset({Code.STREAM_CAPTURE_UNSUPPORTED, Code.STREAM_CAPTURE_INVALIDATED})

#: The process's hub is ``PROCESS.hub`` (None until :func:`get_hub` makes it): a field
#: of the native module's ``PROCESS``, which an await reads in C.
_hub_lock = threading.Lock()
#: Hubs of the parent process, kept (never freed) in a forked child: freeing one would
#: join a reactor thread that does not exist in the child.
_forked_hubs: list[Hub] = []


def _after_fork_in_child() -> None:
    global _hub_lock
    _hub_lock = threading.Lock()  # another thread of the parent may have held it
    hub, PROCESS.hub = PROCESS.hub, None
    if hub is not None:
        _forked_hubs.append(hub)
        if hub.reactor is not None:
            atexit.unregister(hub._close_at_exit)
        if hub.submitter is not None:  # its thread is the parent's: nothing waits for it
            hub.native.set_launch_fence(None)
            hub.backend.forget_submitter()


os.register_at_fork(after_in_child=_after_fork_in_child)


#: ``CUASYNC_HOST_SYNC`` values that ask for a host-task sync mode (``cuLaunchHostFunc_v2``).
_HOST_TASK_MODES = {"callback-spin": HOST_TASK_SPINWAIT, "callback-block": HOST_TASK_BLOCKING}


def _host_task_mode(backend: Backend, host_sync: str) -> int | None:
    """The ``CUhostTaskSyncMode`` ``host_sync`` asks for (None: plain ``cuLaunchHostFunc``);
    raises when the backend cannot do it, rather than quietly running another mode."""
    mode = _HOST_TASK_MODES.get(host_sync)
    if mode is not None:
        problem = backend.host_task_modes_problem()
        if problem is not None:
            raise BackendUnavailableError(
                f"CUASYNC_HOST_SYNC={host_sync} completes awaits through cuLaunchHostFunc_v2 "
                f"with a host-task sync mode, which this machine cannot do: {problem}. Upgrade "
                "the driver and cuda-bindings, or set CUASYNC_HOST_SYNC=callback (the "
                "driver's default mode) or reactor (the default)"
            )
    return mode


def get_hub() -> Hub:
    """The process's completion hub, made at the first call (``PROCESS.hub``)."""
    hub = PROCESS.hub
    if hub is None:
        with _hub_lock:
            if PROCESS.hub is None:
                PROCESS.hub = Hub()
            hub = PROCESS.hub
    return hub


#: While awaits skip their spin (long work, other tasks ready), one in this many spins
#: anyway, so that a loop whose work got short again goes back to finishing inline.
_RESPIN_EVERY = 64


def wait(comp: Completion, adapter: LoopAdapter) -> Generator[Any, Any, Any]:
    """The body of every ``await`` on the loop of ``adapter``: settle, else suspend until
    finished; returns the output (or raises the work's error).

    A cancelled suspension (or a loop going away) hands the completion to the
    background watcher: the work goes on and what it uses is released when it lands.
    A module function, not a method: it is the hottest path of the package.
    """
    if comp.state < DONE:
        hub = PROCESS.hub or get_hub()
        spin_us = await_spin_us(hub, adapter, comp.stream, comp.seq)
        settled = hub.settle(comp, spin_us or 0)
        if spin_us is not None:
            adapter.long_ops = not settled
        if not settled:  # (its wait began before the spin, which ran its whole budget)
            since = time.monotonic_ns() - (spin_us or 0) * 1000
            return (yield from hub.suspend(comp, adapter, since))
    return comp.result()


def await_spin_us(hub: Hub, adapter: LoopAdapter, stream: Any, seq: int) -> int | None:
    """How long an await of submission ``seq`` on ``stream`` spins before it parks, in
    microseconds; None: skipped, because the last spin on this loop ran out and other
    tasks are ready to run.

    Skipping there keeps the spin from holding up the other ready tasks' submissions.
    (Work that lands within the budget keeps spinning even in a burst: finishing inline
    costs less than a wake. One in _RESPIN_EVERY spins anyway, to learn when work got
    short again.) No spin either when earlier work on the stream is still pending (many
    concurrent awaits): it would only burn the budget.
    """
    spin_us = hub.spin_budget_us
    if not spin_us:
        return 0
    if adapter.long_ops and adapter.others_ready():
        adapter.skips += 1
        if adapter.skips % _RESPIN_EVERY != 0:
            hub.stats.spins_skipped += 1
            return None
    if stream._completed < seq - 1:
        return 0
    return spin_us


def work_in_flight() -> bool:
    """Whether any submission is still pending (a flag slot armed or a host callback
    outstanding); False before the completion machinery exists (it is not created)."""
    hub = PROCESS.hub
    return hub is not None and (hub.slots_in_use() > 0 or bool(hub.callback_pending))


def raise_if_faulted(device: Device) -> None:
    """Submission's fault check: on a faulted device, fail its pending work and raise.

    Called before anything is enqueued (it never creates the hub): a faulted device
    fails fast, with the same error its pending futures resolve with.
    """
    fault = get_backend().device_fault(device.ordinal)
    if fault is not None:
        hub = PROCESS.hub
        if hub is not None:
            hub.fail_device(device, fault)
        raise fresh(fault)


def stats() -> Stats:
    """Counters of the completion machinery.

    >>> s = cuasync.stats()
    >>> s.completed_inline, s.completed_reactor, s.slots_armed
    """
    hub = get_hub()
    return hub.snapshot()


# (what the native core asks where the hub has no answer for a device yet)
PROCESS.stream_memops = Hub.stream_memops
