/*
 * A Completion's finish (CompletionCore.finish, the base of cuasync/_core/completion.py's
 * Completion): the work landed, so its output is realized, what it used is released
 * (the hub's release: the counters, the slot back to the ledger) and its waiters are
 * called. Every path that sees work land ends here (an inline spin, the reactor's report,
 * the early wake, a host callback, a blocking wait), on the thread that saw it. Python
 * runs only where the completion asks for it: its trace, its checks, an output with a
 * function of its own, and the waiters.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "cores.h"
#include "ledger.h"
#include "module.h"

/* Completion states (completion.py: PENDING, FINISHING, DONE, FAILED) */
enum { PENDING = 0, FINISHING = 1, DONE = 2, FAILED = 3 };

/* -- the names the finish and the release read; the finish's steps ------------------------- */

/* (names the finish and the release read and call: the completion's, its context's and
 * output's, the hub's, the counters') */
static PyObject *s_lock, *s_acquire, *s_release, *s_state, *s_value, *s_error, *s_path,
    *s_waiters, *s_abandoned, *s_trace, *s_end_flight, *s_run_checks, *s_get, *s_seq, *s_checks,
    *s_errors, *s_completed, *s_stats, *s_watcher, *s_reactor, *s_disarm, *s_release_callback,
    *s_completed_inline, *s_completed_reactor, *s_early_wakes, *s_early_late,
    *s_completed_host_callback, *s_completed_blocking, *s_raised, *s_fresh;
static PyObject *i_states[4];

static int
intern_finish_names(void)
{
    static const interned_name names[] = {
        {&s_lock, "_lock"}, {&s_acquire, "acquire"}, {&s_release, "release"},
        {&s_state, "state"}, {&s_value, "value"}, {&s_error, "error"}, {&s_path, "path"},
        {&s_waiters, "_waiters"}, {&s_abandoned, "abandoned"}, {&s_trace, "trace"},
        {&s_end_flight, "_end_flight"}, {&s_run_checks, "_run_checks"}, {&s_get, "get"},
        {&s_seq, "seq"}, {&s_checks, "checks"}, {&s_errors, "errors"},
        {&s_completed, "_completed"}, {&s_stats, "stats"}, {&s_watcher, "watcher"},
        {&s_reactor, "reactor"}, {&s_disarm, "disarm"},
        {&s_release_callback, "_release_callback"}, {&s_completed_inline, "completed_inline"},
        {&s_completed_reactor, "completed_reactor"}, {&s_early_wakes, "early_wakes"},
        {&s_early_late, "early_late"}, {&s_completed_host_callback, "completed_host_callback"},
        {&s_completed_blocking, "completed_blocking"}, {&s_raised, "raised"},
        {&s_fresh, "_fresh"},
    };
    if (s_fresh != NULL)
        return 0;
    if (INTERN_ALL(names) < 0)
        return -1;
    for (int i = 0; i < 4; i++)
        if (i_states[i] == NULL && (i_states[i] = PyLong_FromLong(i)) == NULL)
            return -1;
    return 0;
}

/* lock.acquire() or lock.release(): 0 or -1 */
static int
lock_call(PyObject *lock, PyObject *name)
{
    PyObject *r = PyObject_CallMethodNoArgs(lock, name);
    Py_XDECREF(r);
    return r == NULL ? -1 : 0;
}

int
completion_state(PyObject *comp)
{
    if (intern_finish_names() < 0)
        return -1;
    PyObject *state = PyObject_GetAttr(comp, s_state);
    if (state == NULL)
        return -1;
    long v = PyLong_AsLong(state);
    Py_DECREF(state);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (v < PENDING || v > FAILED) {
        PyErr_Format(PyExc_ValueError, "a completion's state is 0 to 3, not %ld", v);
        return -1;
    }
    return (int)v;
}

int
completion_watcher(PyObject *comp, PyObject **watcher)
{
    *watcher = NULL;
    int state = completion_state(comp);
    if (state != PENDING)
        return state < 0 ? -1 : 0;
    if (intern_finish_names() < 0 || (*watcher = PyObject_GetAttr(comp, s_watcher)) == NULL)
        return -1;
    return 1;
}

int
completion_locked(PyObject *comp, locked_fn f, void *arg)
{
    if (intern_finish_names() < 0)
        return -1;
    PyObject *lock = PyObject_GetAttr(comp, s_lock);
    if (lock == NULL)
        return -1;
    if (lock_call(lock, s_acquire) < 0) {
        Py_DECREF(lock);
        return -1;
    }
    int r = f(comp, arg);
    SAVE_ERROR(saved);
    int released = lock_call(lock, s_release);
    Py_DECREF(lock);
    if (released < 0) {
        DROP_ERROR(saved);
        return -1;
    }
    RESTORE_ERROR(saved);
    return r;
}

/* (under the lock) waiter appended to comp's _waiters where comp is not finished: 1;
 * 0 finished (the caller calls it), -1 an error */
static int
keep_waiter(PyObject *comp, void *waiter)
{
    int state = completion_state(comp);
    if (state >= DONE || state < 0)
        return state < 0 ? -1 : 0;
    PyObject *waiters = PyObject_GetAttr(comp, s_waiters);
    if (waiters == NULL)
        return -1;
    int r;
    if (waiters == Py_None) /* (one alone, as most are: no list) */
        r = PyObject_SetAttr(comp, s_waiters, (PyObject *)waiter);
    else if (PyList_CheckExact(waiters))
        r = PyList_Append(waiters, (PyObject *)waiter);
    else {
        PyObject *both = PyList_New(2);
        if (both != NULL) {
            PyList_SET_ITEM(both, 0, Py_NewRef(waiters));
            PyList_SET_ITEM(both, 1, Py_NewRef((PyObject *)waiter));
        }
        r = both == NULL ? -1 : PyObject_SetAttr(comp, s_waiters, both);
        Py_XDECREF(both);
    }
    Py_DECREF(waiters);
    return r < 0 ? -1 : 1;
}

int
completion_add_waiter(PyObject *comp, PyObject *waiter)
{
    int kept = completion_locked(comp, keep_waiter, waiter);
    if (kept != 0)
        return kept < 0 ? -1 : 0;
    PyObject *r = PyObject_CallOneArg(waiter, comp); /* (finished: called now) */
    Py_XDECREF(r);
    return r == NULL ? -1 : 0;
}

PyObject *
completion_result(PyObject *self, PyObject *Py_UNUSED(arg))
{
    int state = completion_state(self);
    if (state < 0)
        return NULL;
    if (state < DONE)
        return PyErr_Format(PyExc_RuntimeError,
                            "cuasync internal error: a completion's result was read while it "
                            "was %s (slot %zd); please report this",
                            state == PENDING ? "pending" : "finishing", COMPLETION(self)->slot);
    if (state == DONE)
        return PyObject_GetAttr(self, s_value);
    PyObject *error = PyObject_GetAttr(self, s_error);
    if (error == NULL)
        return NULL;
    if (!PyExceptionInstance_Check(error)) {
        PyErr_Format(PyExc_TypeError, "a failed completion's error is a %.100s, not an exception",
                     Py_TYPE(error)->tp_name);
        Py_DECREF(error);
        return NULL;
    }
    PyObject *raised = PyObject_GetAttr(self, s_raised);
    int again = raised == NULL ? -1 : PyObject_IsTrue(raised);
    Py_XDECREF(raised);
    if (again == 0 && PyObject_SetAttr(self, s_raised, Py_True) < 0)
        again = -1;
    if (again > 0) { /* (a fresh copy each time after the first: see _exceptions.fresh) */
        PyObject *call[2] = {self, error};
        Py_SETREF(error, PyObject_VectorcallMethod(s_fresh, call,
                                                   2 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL));
    }
    if (again >= 0 && error != NULL)
        PyErr_SetObject((PyObject *)Py_TYPE(error), error);
    Py_XDECREF(error);
    return NULL;
}

const char completion_result_doc[] =
    "result($self, /)\n--\n\n"
    "The output of finished work; raises its error (the error itself the first time, a "
    "fresh copy chained to it after that: ``_fresh``). Read before the work finished "
    "(which no path of cuasync's should do: an await resumes only once it is), it raises "
    "RuntimeError rather than pass None off as an output.";

PyObject *
completion_add_waiter_method(PyObject *self, PyObject *waiter)
{
    return completion_add_waiter(self, waiter) < 0 ? NULL : Py_NewRef(Py_None);
}

const char completion_add_waiter_doc[] =
    "add_waiter($self, waiter, /)\n--\n\n"
    "Call ``waiter(self)`` once finished (now, where it is already): on the thread that "
    "finishes it, outside its lock.";

/* Step 1, under the lock: PENDING -> FINISHING, its ctx and out taken (new references in
 * *ctx and *out). 1 taken, 0 not pending (someone else finishes it), -1 an error. */
static int
take_pending(PyObject *self, PyObject **ctx, PyObject **out)
{
    int state = completion_state(self);
    if (state != PENDING)
        return state < 0 ? -1 : 0;
    if (PyObject_SetAttr(self, s_state, i_states[FINISHING]) < 0)
        return -1;
    CompletionCore *c = COMPLETION(self);
    *ctx = c->ctx != NULL ? c->ctx : Py_NewRef(Py_None);
    *out = c->out != NULL ? c->out : Py_NewRef(Py_None);
    c->ctx = Py_NewRef(Py_None);
    c->out = Py_NewRef(Py_None);
    return 1;
}

/* The work's output, or NULL with *error set to why not (a new reference: the context's
 * first error, or what realizing the output raised); -1 on an error of finish's own.
 * Dropped (the completion abandoned: nobody will read it), the checks run and the output
 * is not realized: a cancelled await's map or inspect never runs (*value NULL). */
static int
realize(PyObject *self, PyObject *ctx, PyObject *out, int dropped, PyObject **value,
        PyObject **error)
{
    *value = *error = NULL;
    PyObject *checks = PyObject_GetAttr(ctx, s_checks);
    if (checks == NULL)
        return -1;
    int any = PyObject_IsTrue(checks);
    Py_DECREF(checks);
    if (any < 0)
        return -1;
    PyObject *errors = PyObject_GetAttr(ctx, s_errors);
    if (errors == NULL)
        return -1;
    int failed = PyObject_IsTrue(errors);
    if (failed < 0) {
        Py_DECREF(errors);
        return -1;
    }
    if (any && !failed) { /* (completion._run_checks: the first error goes to its box) */
        PyObject *run = PyObject_GetAttr(self, s_run_checks);
        PyObject *r = run == NULL ? NULL : PyObject_CallOneArg(run, ctx);
        Py_XDECREF(run);
        if (r == NULL) {
            Py_DECREF(errors);
            return -1;
        }
        Py_DECREF(r);
        Py_SETREF(errors, PyObject_GetAttr(ctx, s_errors)); /* (its box, made now) */
        if (errors == NULL || (failed = PyObject_IsTrue(errors)) < 0) {
            Py_XDECREF(errors);
            return -1;
        }
    }
    if (failed) {
        *error = PySequence_GetItem(errors, 0);
        Py_DECREF(errors);
        return *error == NULL ? -1 : 0;
    }
    Py_DECREF(errors);
    if (dropped)
        return 0;
    /* an output known at submission (the core's own Output, output._Ready: its value
     * given, no function) is read here; any other runs its get(), whose error is kept as
     * the work's */
    PyTypeObject *output_t = REGISTERED(OUTPUT);
    if (output_t != NULL && PyObject_TypeCheck(out, output_t) && OUTPUT(out)->fn == NULL &&
        OUTPUT(out)->value != NULL) { /* (no function ever: its value was given) */
        *value = Py_NewRef(OUTPUT(out)->value);
        return 0;
    }
    *value = PyObject_CallMethodNoArgs(out, s_get);
    if (*value == NULL)
        *error = take_error();
    return 0;
}

/* stream._completed = max(stream._completed, seq) (Stream._mark_completed): 0 or -1 */
static int
mark_completed(PyObject *stream, PyObject *seq)
{
    if (is_stream(stream)) {
        PyObject *completed = STREAM(stream)->completed;
        int later = completed == NULL ? 1 : PyObject_RichCompareBool(seq, completed, Py_GT);
        if (later > 0)
            field_set(&STREAM(stream)->completed, Py_NewRef(seq));
        return later < 0 ? -1 : 0;
    }
    PyObject *completed = PyObject_GetAttr(stream, s_completed); /* (another kind of stream) */
    int later = completed == NULL ? -1 : PyObject_RichCompareBool(seq, completed, Py_GT);
    Py_XDECREF(completed);
    return later > 0 ? PyObject_SetAttr(stream, s_completed, seq) : later;
}

/* The waiters taken from _waiters, called (one alone, or a list of them): 0 or -1 */
static int wake_waiters(PyObject *self, PyObject *waiters);

PyObject *
completion_wake_method(PyObject *self, PyObject *waiters)
{
    return wake_waiters(self, waiters) < 0 ? NULL : Py_NewRef(Py_None);
}

const char completion_wake_doc[] =
    "_wake($self, waiters, /)\n--\n\n"
    "Call the waiters taken from ``_waiters`` (finished: outside the lock), each with this "
    "completion: one alone, a list of them (in order; one that raises stops the rest, as "
    "in a loop), or None.";

static int
wake_waiters(PyObject *self, PyObject *waiters)
{
    if (waiters == Py_None)
        return 0;
    if (!PyList_CheckExact(waiters)) {
        PyObject *r = PyObject_CallOneArg(waiters, self);
        Py_XDECREF(r);
        return r == NULL ? -1 : 0;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(waiters); i++) {
        PyObject *r = PyObject_CallOneArg(PyList_GET_ITEM(waiters, i), self);
        Py_XDECREF(r);
        if (r == NULL)
            return -1;
    }
    return 0;
}

/* Step 3, under the lock: the outcome stored, DONE or FAILED, the waiters taken (a new
 * reference in *waiters). 0 or -1. */
static int
store_outcome(PyObject *self, PyObject *value, PyObject *error, PyObject *path,
              PyObject **waiters)
{
    if (PyObject_SetAttr(self, s_value, value) < 0 ||
        PyObject_SetAttr(self, s_error, error != NULL ? error : Py_None) < 0 ||
        PyObject_SetAttr(self, s_path, path) < 0 ||
        PyObject_SetAttr(self, s_state, i_states[error == NULL ? DONE : FAILED]) < 0)
        return -1;
    if ((*waiters = PyObject_GetAttr(self, s_waiters)) == NULL)
        return -1;
    return PyObject_SetAttr(self, s_waiters, Py_None);
}

/* -- HubCore.release: what a finished completion used, given back ---------------------- */

/* The counter of a finish's path (completion.py's INLINE, REACTOR, EARLY, EARLY_LATE,
 * CALLBACK; anything else a blocking wait's): 0 or -1 */
static int
count_path(PyObject *stats, PyObject *path)
{
    static const struct {
        const char *path;
        PyObject **counter;
    } paths[] = {
        {"inline", &s_completed_inline},        {"reactor", &s_completed_reactor},
        {"early_wake", &s_early_wakes},         {"early_wake_late", &s_early_wakes},
        {"host_callback", &s_completed_host_callback},
    };
    if (PyUnicode_Check(path))
        for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++)
            if (PyUnicode_CompareWithASCIIString(path, paths[i].path) == 0) {
                if (stats_count(stats, *paths[i].counter, 1, 0) < 0)
                    return -1;
                return i == 3 ? stats_count(stats, s_early_late, 1, 0) : 0; /* (late: both) */
            }
    return stats_count(stats, s_completed_blocking, 1, 0);
}

PyObject *
hub_release(PyObject *hub, PyObject *const *args, Py_ssize_t nargs)
{
    if (check_nargs("release", nargs, 2) < 0 || intern_finish_names() < 0)
        return NULL;
    PyObject *comp = args[0], *path = args[1];
    PyTypeObject *completion_t = REGISTERED(COMPLETION);
    if (completion_t == NULL || !PyObject_TypeCheck(comp, completion_t))
        return PyErr_Format(PyExc_TypeError, "release() takes a Completion, not %.100s",
                            Py_TYPE(comp)->tp_name);
    PyObject *stats = HUB(hub)->stats;
    if (stats == NULL || count_path(stats, path) < 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_RuntimeError, "release: the hub has no stats");
        return NULL;
    }
    Py_ssize_t slot = COMPLETION(comp)->slot;
    if (slot < 0) { /* a host callback's: the hub's pending set and signal table (Python) */
        PyObject *r = PyObject_CallMethodOneArg(hub, s_release_callback, comp);
        return r;
    }
    PyObject *watcher = PyObject_GetAttr(comp, s_watcher);
    if (watcher == NULL)
        return NULL;
    Py_DECREF(watcher);
    if (watcher != Py_None) {
        /* It was armed: take it back before the slot is free, even on the reactor path. A
         * drain can hold a report left over from the slot's previous user, which finishes
         * this one once its own flag has landed but before the reactor has seen it: its
         * entry is still armed then, and the slot's next user would find it so ("slot N is
         * already armed"). */
        PyObject *reactor = PyObject_GetAttr(hub, s_reactor);
        PyObject *n = reactor == NULL ? NULL : PyLong_FromSsize_t(slot);
        PyObject *r = n == NULL ? NULL : PyObject_CallMethodOneArg(reactor, s_disarm, n);
        Py_XDECREF(n);
        Py_XDECREF(reactor);
        if (r == NULL)
            return NULL;
        Py_DECREF(r);
    }
    PyObject *slots = HUB(hub)->slots;
    if (slots == NULL || ledger_check(slots, "the hub's slots") < 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_RuntimeError, "release: the hub has no slot ledger");
        return NULL;
    }
    Py_INCREF(slots); /* (the dropped completion's last reference may run Python) */
    int released = ledger_release((SlotLedger *)slots, slot);
    Py_DECREF(slots);
    return released < 0 ? NULL : Py_NewRef(Py_None);
}

const char hub_release_doc[] =
    "release($self, comp, path, /)\n--\n\n"
    "What the finished ``comp`` used, given back (its finish calls it): the counter of "
    "``path`` (``completed_inline``, ``completed_reactor``, ``early_wakes`` and "
    "``early_late``, ``completed_host_callback``, else ``completed_blocking``) counted, "
    "its slot taken back from the reactor where it was armed and returned to the ledger; "
    "a host-callback completion's entries dropped (``_release_callback``).";

PyObject *
completion_finish(PyObject *self, PyObject *path)
{
    if (intern_finish_names() < 0)
        return NULL;
    PyObject *lock = PyObject_GetAttr(self, s_lock);
    if (lock == NULL)
        return NULL;
    PyObject *ctx = NULL, *out = NULL, *value = NULL, *error = NULL, *waiters = NULL, *r = NULL;
    Py_INCREF(self); /* (held: the waiters may drop the last reference) */
    if (lock_call(lock, s_acquire) < 0)
        goto done;
    int taken = take_pending(self, &ctx, &out);
    if (lock_call(lock, s_release) < 0 || taken < 0)
        goto done;
    if (!taken) {
        r = Py_NewRef(Py_None);
        goto done;
    }
    PyObject *trace = PyObject_GetAttr(self, s_trace);
    if (trace == NULL)
        goto failed;
    if (trace != Py_None) { /* (its NVTX range ends: trace.end_flight) */
        PyObject *end = PyObject_GetAttr(self, s_end_flight);
        PyObject *ended = end == NULL ? NULL : PyObject_CallOneArg(end, self);
        Py_XDECREF(end);
        Py_DECREF(trace);
        if (ended == NULL)
            goto failed;
        Py_DECREF(ended);
    }
    else
        Py_DECREF(trace);
    /* (stream._mark_completed, inline: every op passes here) */
    PyObject *stream = COMPLETION(self)->stream;
    PyObject *seq = PyObject_GetAttr(ctx, s_seq);
    if (seq == NULL)
        goto failed;
    int marked = stream == NULL ? 0 : mark_completed(stream, seq);
    Py_DECREF(seq);
    if (marked < 0)
        goto failed;
    PyObject *abandoned = PyObject_GetAttr(self, s_abandoned);
    int dropped = abandoned == NULL ? -1 : PyObject_IsTrue(abandoned);
    Py_XDECREF(abandoned);
    if (dropped < 0 || realize(self, ctx, out, dropped, &value, &error) < 0)
        goto failed;
    Py_CLEAR(ctx); /* releases every retained object now that the device is done with them */
    Py_CLEAR(out);
    if (dropped || value == NULL)
        Py_XSETREF(value, Py_NewRef(Py_None));
    PyObject *process = process_of(self);
    if (process == NULL)
        goto failed;
    PyObject *hub = PROCESS(process)->hub;
    if (hub != NULL && hub != Py_None) {
        Py_INCREF(hub);
        PyObject *released = PyObject_CallMethodObjArgs(hub, s_release, self, path, NULL);
        Py_DECREF(hub);
        if (released == NULL)
            goto failed;
        Py_DECREF(released);
    }
    if (lock_call(lock, s_acquire) < 0)
        goto failed;
    int stored = store_outcome(self, value, error, path, &waiters);
    if (lock_call(lock, s_release) < 0 || stored < 0)
        goto failed;
    if (wake_waiters(self, waiters) >= 0) /* (a waiter that raised: the others are not
                                               called, as in Python's loop) */
        r = Py_NewRef(Py_None);
    goto done;
failed:
    /* An error of finish's own once it took the completion (its trace's end, a check's
     * lookup, the hub's release): the completion fails with it rather than stay
     * FINISHING with its waiters never called (an await would hang); raised here too. */
    {
        PyObject *exc = take_error();
        PyObject *left = NULL;
        if (lock_call(lock, s_acquire) == 0) {
            int stored = store_outcome(self, Py_None, exc, path, &left);
            if (lock_call(lock, s_release) == 0 && stored == 0)
                wake_waiters(self, left);
        }
        if (waiters != NULL) /* (taken before the step that failed: not called yet) */
            wake_waiters(self, waiters);
        Py_XDECREF(left);
        PyErr_Clear();
        if (exc != NULL)
            PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
        Py_XDECREF(exc);
    }
done:
    Py_XDECREF(waiters);
    Py_XDECREF(value);
    Py_XDECREF(error);
    Py_XDECREF(ctx);
    Py_XDECREF(out);
    Py_DECREF(lock);
    Py_DECREF(self);
    return r;
}

const char completion_finish_doc[] =
    "finish($self, path, /)\n--\n\n"
    "The work completed (``path``: how it was seen: inline, reactor, early_wake, ...): "
    "realize the output (the context's first error instead, where it has one; its checks "
    "run first), release what it used (``hub.release``), store the outcome and call the "
    "waiters. Nothing where it is no longer pending. An error of its own once it took "
    "the completion fails the completion with that error (its waiters called) and is "
    "raised.";
