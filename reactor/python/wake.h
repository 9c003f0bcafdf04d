/*
 * What the early wake's C files share (wake.c: the policy, estimates, plan and learning;
 * timer.c: a loop's timer): the policy's fields and one parked await's times. Included
 * after Python.h.
 */
#ifndef CUASYNC_WAKE_H
#define CUASYNC_WAKE_H

/* wake.Policy's native base: every number of the early wake (times in ns). */
typedef struct {
    PyObject_HEAD
    long long min_estimate_ns, park_at_once_ns, lead_ns, lead_max_ns, tolerance_ns,
        spin_max_ns, max_keys, late_ns, late_up_shift, late_down_shift, report_lag_ns,
        quiet_max_ns, prewake_ns, prewake_min_ns;
    char quiet;
    int on; /* -1: not read yet (wake.Policy.on reads CUASYNC_WAKE at first use) */
} WakePolicyCore;

/* One parked await the early wake follows (wake.Pending). */
typedef struct {
    PyObject_HEAD
    PyObject *hub, *comp, *adapter, *key, *timer; /* (timer: None while it has no wake set) */
    long long parked, since, due, at, until, quiet, lo, seen, looked, resumed, hold;
} Pending;

/* Whether entry's wake looks at its slot before its quiet time ends (Pending.watched). */
int pending_watched(const Pending *entry);
/* The policy set_wake_policy named (borrowed), or NULL with a RuntimeError set. */
WakePolicyCore *wake_policy(void);
/* Whether o is a Pending (a type set_wake_policy looked up: 0 before). */
int is_pending(PyObject *o);

/* Set the timerfd fd to expire once at ``at`` (CLOCK_MONOTONIC ns; 0 disarms it): 1, or 0
 * where the kernel refused (a closed fd; no timerfd on this platform). */
int set_timerfd(int fd, unsigned long long at);
/* wake.plan(hub, comp, adapter, key[, since]) (wake.c; its arguments checked there): the
 * await's Pending, or None (not followed); NULL with an error set. */
PyObject *wake_plan(PyObject *const *args, Py_ssize_t nargs);
/* wake.resumed(entry) and cancel_wake(entry) (wake.c; entry checked there): the await
 * resumed (its key's estimate learnt), or was cancelled (its wake taken off its timer);
 * 0, or -1 with an error set. */
int wake_resumed(PyObject *entry);
int wake_cancel(PyObject *entry);
/* Whether key is a launch's: (prepared kernel, grid), a library call and its kind. */
int is_launch_key(PyObject *key);
/* timer.c: a loop's timerfd and the heap of its wakes (wake.Timer's base). */
extern PyType_Spec TimerCore_spec;
/* Set entry's wake on timer (a TimerCore: the caller checks it), at entry->at: 1; 0 where
 * the timer could not be set (closed; the kernel refused: nothing looks at the slot
 * then); -1 with an error set. */
int timer_add(PyObject *timer, Pending *entry);
/* Take entry's wake off timer (a TimerCore: the caller checks it); 0, or -1 with an error
 * set. */
int timer_remove(PyObject *timer, Pending *entry);
/* Whether o is a TimerCore (of this module's type). */
int is_timer(PyObject *o);


#endif
