"""Waking an await of real-length work near its expected completion: the policy, in one place.

An await whose work did not land within the inline spin parks. Left to the reactor, the
loop's thread sleeps in ``epoll`` until the reactor sees the flag and writes the loop's
eventfd: the reactor's nap plus a cross-thread wake, 90-170 us over ``.sync()`` on an
H200 host. Here the loop's thread also wakes *itself* shortly before the work is expected
to land, through a ``timerfd`` of its own loop (the kernel's high-resolution timer:
nanosecond deadlines, no timer slack), and spins on the flag for a bounded window, so
that the landing is seen by a thread already awake (docs/completion.md, "Waking for
real-length work").

The expected landing is learned per *key* (a kernel and its grid for a launch, a library
call and its kind for a call: the stream waited for, for ``cuasync.wait(torch_stream)``;
the stream's handle for other awaits): the time from the start of the wait (the
submission made, before any inline spin: an await that spun and one that parked at once
expect the same landing, however long its Python took to park) to landing, measured
exactly when a spin saw the flag land and bounded otherwise (:class:`Estimate`). No
estimate yet, earlier work pending on the stream, a platform without ``timerfd``, or
``CUASYNC_WAKE=reactor``: the await parks as before.

A wake due milliseconds after the wait began is preceded by a pre-wake
(:attr:`Policy.prewake_ns` before it), which only sets the timer again: a thread that
slept that long runs its first Python several times slower on a busy host.
A launch whose estimate is steady and long (:attr:`Policy.park_at_once_ns`) parks at
once, without the inline spin (its kernel's ``parked_grid``, read by the native core);
one whose landing no spin saw spins again the next time.
The reactor is armed for every parked await, planned or not, so a mis-estimate is
today's await: too early, the wake's window ends and the reactor reports the landing;
too late, the reactor wakes the loop before the timer does; a fault is probed as before.
Never a hang, never an unbounded spin (one window is at most its lead, itself at most
:attr:`Policy.lead_max_ns`, and :attr:`Policy.spin_max_ns`).

>>> entry = hub.park(comp, adapter, waiter, key, since)   # hub.suspend: plan, arm, set
>>> resumed(entry)                                        # after the task resumes: learn
"""

from __future__ import annotations

import ctypes
import sys
from typing import Any

from .._config import CONFIG
from .._native import NATIVE, Estimate, Pending, TimerCore, WakePolicyCore

# (``Estimate``, the learned time to landing of one key and its wake's window, and
# ``Pending``, one parked await's times, are native: the native core reads them; their
# docstrings say how samples move an estimate and what each time is.)

__all__ = [
    "POLICY", "Estimate", "Pending", "Policy", "Timer", "is_launch",
    "cancel", "estimate", "forget", "plan", "resumed", "timerfd", "window",
]  # fmt: skip


class Policy(WakePolicyCore):
    """The parameters of the early wake (every one here; ``POLICY`` is the process's).

    ``on``: ``CUASYNC_WAKE=timer`` (the default; ``reactor``: today's park). Times in ns.
    The numbers are native fields (``WakePolicyCore``), which :class:`Estimate`,
    :func:`window` and the native core read.

    >>> POLICY.on = False     # the A/B of tools/probes/wake_parts.py: today's behaviour
    """

    @property
    def on(self) -> bool:
        """Whether awaits wake early (read from ``CUASYNC_WAKE`` at first use)."""
        on = self._on
        if on < 0:
            on = self._on = int(CONFIG.wake == "timer" and _LIBC is not None)
        return bool(on)

    @on.setter
    def on(self, value: bool) -> None:
        self._on = int(bool(value) and _LIBC is not None)
        if not self._on:  # (no wake then: every await spins before it parks)
            _unhint_all()

    def __init__(self) -> None:
        self._on = -1  # (read at first use: ``on``)
        #: Work expected sooner than this after the wait began is left to the reactor (a
        #: timer wake and a spin cost about what they save).
        self.min_estimate_ns = 60_000
        #: A launch whose kernel and grid (a library call and its kind) have a steady
        #: estimate at least this long parks at once, where it is also at least four
        #: inline spin budgets (the budget in force at the await): the 20 us inline spin
        #: would only burn a fifth of a 0.3 ms await's CPU.
        self.park_at_once_ns = 100_000
        #: Wake this long before the expected landing, beyond the loop's measured timer
        #: lateness (:attr:`Timer.late_ns`). (15 us until session 48: on an H100 host,
        #: 5 us spun 9 us less per 0.3 ms await at the same p50 and p90,
        #: ``tools/probes/wake_parts.py tune``.)
        self.lead_ns = 5_000
        #: The lead, lateness included, is at most this (it bounds the CPU per await).
        self.lead_max_ns = 200_000
        #: The spin goes on this long past the expected landing, at least (and twice the
        #: estimate's deviation)...
        self.tolerance_ns = 30_000
        #: ...and a steady estimate's window spans at most this much beyond its lead (the
        #: estimate's spread: a deviation before it, the tolerance or two after it); a wider
        #: spread gets the short look of an unsteady estimate. (Until session 52 the window,
        #: lead included, was cut at 400 us: the torch service's waits of 4-8 ms of
        #: contended work, steady by their share of deviation, spun 250 us a wake, half of
        #: them in vain, while its ``/health`` probes waited behind the spin.)
        self.spin_max_ns = 200_000
        #: Estimates kept; past it the table starts again (keys are kernels and streams).
        self.max_keys = 4096
        #: The lateness a loop's timer is assumed to have before it is measured.
        self.late_ns = 40_000
        #: How a loop's measured lateness follows its wakes: a later one moves it up by
        #: 1/2**``late_up_shift`` of the difference, an earlier one down by
        #: 1/2**``late_down_shift`` (1 and 4: it follows the high side). Following the
        #: mean (3 and 3) spun less: 1.8 % of a core at 0.3 ms on average over six H100
        #: runs of ``tools/probes/wake_parts.py tune``, -1.8 to 7.1, at the same p50;
        #: but where the lateness varies it wakes later than the landing more often
        #: (the 2-core CI host, 5 ms of work: 44-61 % of awaits landed before their
        #: wake, against 29-33 %), which is latency, the line still missed on busy hosts.
        self.late_up_shift = 1
        self.late_down_shift = 4
        #: How much later than the landing the reactor's report reaches the task, at
        #: least (its nap and the loop's wake): a missed window learns from the report.
        self.report_lag_ns = 60_000
        #: The reactor leaves a planned await's slot alone until its window ends (no
        #: spin, no scans: the loop's timer watches it), when its estimate is steady
        #: (deviation at most 1/8 of it); False: it scans as for any parked await.
        self.quiet = True
        #: ...for at most this long after parking (what work that got shorter than a
        #: steady estimate can wait for its report; longer work is scanned for as
        #: before, by the reactor's long naps).
        self.quiet_max_ns = 20_000_000
        #: A wake due at least :attr:`prewake_min_ns` after the wait began is preceded by
        #: one this long before it (0: none), which only sets the timer again: a thread that
        #: slept milliseconds runs its first Python several times slower (its caches gone
        #: cold on a busy host), and a landing seen by a thread that just woke from a
        #: sleep that long is resumed that much later.
        self.prewake_ns = 300_000
        self.prewake_min_ns = 1_000_000


#: Whether ``timerfd`` is there (Linux): made through libc (``os.timerfd_create`` is
#: Python 3.13+; once per loop), set by the native module (on every planned await).
_LIBC: Any = None
if sys.platform.startswith("linux") and hasattr(NATIVE, "set_timer"):
    try:
        _LIBC = ctypes.CDLL(None, use_errno=True)
        _LIBC.timerfd_create  # noqa: B018
    except (OSError, AttributeError):  # pragma: no cover - a libc without it
        _LIBC = None

_CLOCK_MONOTONIC, _TFD_NONBLOCK, _TFD_CLOEXEC = 1, 0o4000, 0o2000000


def timerfd() -> int:
    """A new non-blocking ``CLOCK_MONOTONIC`` timerfd, set with ``NATIVE.set_timer`` (-1:
    none here, or the kernel refused). The caller closes it.

    >>> fd = timerfd(); NATIVE.set_timer(fd, monotonic_ns() + 300_000)
    """
    if _LIBC is None:
        return -1
    return int(_LIBC.timerfd_create(_CLOCK_MONOTONIC, _TFD_NONBLOCK | _TFD_CLOEXEC))


#: key -> Estimate, for the whole process (an estimate is the work's, not the loop's).
_estimates: dict[Any, Estimate] = {}


#: ``plan(hub, comp, adapter, key, since=0)``: follow the await of ``comp`` about to park on
#: ``adapter``'s loop, which began to wait for it at ``since`` (``time.monotonic_ns()``; 0:
#: now): its :class:`Pending`, or None (not followed). Its ``due`` is set where ``key`` has
#: an estimate, for the loop's timer; without one, the await only
#: teaches the estimate. Native (``_reactor.plan_wake``; its docstring has the rules);
#: ``HubCore.park`` plans, arms the slot (quiet until the entry's ``quiet`` time, not
#: waking the reactor's thread where the entry is ``watched``) and sets the wake in one
#: call. The price of the quiet time: work that got shorter than a steady estimate is
#: reported when the wake looks (one late await; the next estimate is no longer steady).
plan = NATIVE.plan_wake


#: ``window(est, lead)``: a wake's ``(due, until, quiet)`` for work expected ``est`` after its
#: wait began, ``lead`` before it (``Estimate.window``, native; it follows ``POLICY``).
#: A steady estimate is looked for from its early side and spun for through its spread,
#: the reactor quiet meanwhile, where that spread is at most :attr:`Policy.spin_max_ns`
#: (whatever the lead, which follows the loop's timer lateness, not the work). Any other
#: (work sharing the device with other streams, queued behind others' work, or steady
#: but milliseconds long and spread over hundreds of microseconds) gets a short look
#: around the expected landing, the reactor scanning as for any parked await: spinning
#: through its spread cost a loop serving 32 requests at a time most of its time, and
#: held up its other requests meanwhile.
window = Estimate.window


#: ``cancel(entry)``: the await of ``entry`` was cancelled: its wake taken off the timer,
#: nothing of it left armed there (the hub's ``suspend`` calls it, then hands the
#: completion to the background watcher). Native (``_reactor.cancel_wake``).
cancel = NATIVE.cancel_wake


#: ``resumed(entry)``: the await of ``entry`` resumed (its work landed): its wake taken off
#: the timer, and its key's estimate learnt from its times; for a launch's key, its
#: kernel's ``parked_grid`` hint set while the estimate is steady and long (on evidence:
#: a spin saw the landing, or a window ended before it) and dropped otherwise, so that a
#: landing no spin saw (the work may have got short) lets the next await spin again.
#: Native (``_reactor.resumed``), as ``is_launch(key)`` is: whether ``key`` is a launch's
#: (its kernel and grid; a library call and its kind).
resumed = NATIVE.resumed
is_launch = NATIVE.is_launch


def _unhint_all() -> None:
    """Every launch spins before it parks again (estimates forgotten, the wake off)."""
    for key in _estimates:
        if is_launch(key):
            key[0].parked_grid = None


def forget() -> None:
    """Drop every estimate (tests; a service whose work changed shape for good): every
    launch spins before it parks again until its work is learnt long anew."""
    _unhint_all()
    _estimates.clear()


def estimate(key: Any) -> int | None:
    """The learned time from the start of a wait to landing of ``key`` in ns, or None."""
    est = _estimates.get(key)
    return None if est is None else est.ns


class Timer(TimerCore):
    """One loop's ``timerfd`` (``fd``, owned: :meth:`close` or the timer's collection
    closes it) and the heap of the wakes parked on that loop, earliest first.

    Watched by the loop (``adapter.watch_timer``); :meth:`fire` runs on the loop's
    thread: each due wake is spun for (``HubCore.spin_early``: a flag that lands within its
    window is finished there; a window that ends first leaves it to the reactor), a due
    pre-wake only sets the timer again for its wake. ``late_ns`` follows how late its
    wakes run (their high side: up fast, down slowly; :attr:`Policy.late_up_shift`),
    which the lead of the next wakes covers. ``add``, ``remove``, ``fire`` and ``close``
    are native (``TimerCore``): a parked await sets its wake, and the wake fires, with no
    Python frame of their own.

    >>> timer = Timer.open(adapter)      # plan() makes a loop's timer at its first wake
    >>> timer.add(entry); timer.remove(entry)
    """

    @classmethod
    def open(cls, adapter: Any) -> Timer | None:
        """The timer of ``adapter``'s loop, made and watched now; None where it cannot be."""
        fd = timerfd()
        if fd < 0:
            return None
        timer = cls(fd)
        try:
            adapter.watch_timer(timer)
        except BaseException:
            timer.close()
            raise
        adapter.timer = timer
        return timer


POLICY = Policy()
NATIVE.set_wake_policy(POLICY, _estimates, forget, Timer.open)
