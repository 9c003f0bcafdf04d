/*
 * A parked await (HubCore's methods, the base of completion.py's Hub): its suspension
 * (HubCore.suspend: the Suspension iterator every await that did not land in its spin
 * delegates to), its set-up in one call from it (HubCore.park, .watch and .arm: its
 * waiter added to the completion, its slot armed to the loop's reactor queue, its early
 * wake planned and set on the loop's timer), and the waiter an asyncio loop's park()
 * gives (FutureWaker). The reactor is armed for every parked await; the wake only makes
 * an awake thread see the landing first (docs/completion.md).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include "cores.h"
#include "module.h"
#include "wake.h"

/* (names the set-up reads and calls: the hub's, the adapter's, the completion's) */
static PyObject *s_reactor, *s_queue, *s_open_queue, *s_watcher, *s_background,
    *s_watch_in_background, *s_arm, *s_watch, *s_unquiet;

static int
intern_park_names(void)
{
    static const interned_name names[] = {
        {&s_reactor, "reactor"},     {&s_queue, "queue"},
        {&s_open_queue, "open_queue"}, {&s_watcher, "watcher"},
        {&s_background, "background"}, {&s_watch_in_background, "watch_in_background"},
        {&s_arm, "arm"},             {&s_watch, "watch"},
        {&s_unquiet, "unquiet"},
    };
    return s_unquiet != NULL ? 0 : INTERN_ALL(names);
}

/* The completion argument of a HubCore method: 0, or -1 with a TypeError set */
static int
check_completion(const char *method, PyObject *comp)
{
    PyTypeObject *completion_t = REGISTERED(COMPLETION);
    if (completion_t != NULL && PyObject_TypeCheck(comp, completion_t))
        return 0;
    PyErr_Format(PyExc_TypeError, "%s() takes a Completion, not %.100s", method,
                 Py_TYPE(comp)->tp_name);
    return -1;
}

/* -- HubCore.arm ---------------------------------------------------------------------- */

PyObject *
hub_arm(PyObject *hub, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 2 || nargs > 4)
        return PyErr_Format(PyExc_TypeError, "arm() takes 2 to 4 arguments (%zd given)", nargs);
    if (check_completion("arm", args[0]) < 0 || intern_park_names() < 0)
        return NULL;
    CompletionCore *c = COMPLETION(args[0]);
    PyObject *reactor = PyObject_GetAttr(hub, s_reactor);
    if (reactor == NULL)
        return NULL;
    PyObject *slot = PyLong_FromSsize_t(c->slot), *gen = PyLong_FromUnsignedLong(c->gen);
    int r = -1;
    if (slot != NULL && gen != NULL) {
        c->armed_at = (double)now_ns() / 1e9; /* (time.monotonic) */
        PyObject *call[6] = {reactor, slot, gen, args[1], NULL, NULL};
        for (Py_ssize_t i = 2; i < nargs; i++)
            call[i + 2] = args[i];
        r = call_dropped(s_arm, call, (size_t)nargs + 2);
    }
    Py_XDECREF(gen);
    Py_XDECREF(slot);
    Py_DECREF(reactor);
    return r < 0 ? NULL : Py_NewRef(Py_None);
}

const char hub_arm_doc[] =
    "arm($self, comp, queue, quiet_until=0, watched=False, /)\n--\n\n"
    "Hand ``comp``'s slot to the reactor; ``queue`` is the LoopQueue that will see it land "
    "(``quiet_until``, ``watched``: see :meth:`watch`). Called under ``comp._lock`` with "
    "``comp`` pending: its finish leaves PENDING under that lock before :meth:`release` "
    "disarms, so no arm can follow the disarm and the slot goes back to the free list "
    "with nothing armed on it.";

/* -- HubCore.watch -------------------------------------------------------------------- */

/* (what the step under the completion's lock reads) */
typedef struct {
    PyObject *hub, *adapter, *queue, *quiet_until, *watched;
} arming;

/* (under comp's lock) comp, pending and watched by nobody, armed for the adapter's loop
 * (hub.arm: a spy set on the hub sees it): 0; 0 where it is finished, or watched by that
 * loop or the background watcher already; 1 where another loop watches it (the caller
 * moves it to the background watcher); -1 an error */
static int
arm_unwatched(PyObject *comp, void *arg)
{
    arming *a = arg;
    PyObject *watcher;
    int pending = completion_watcher(comp, &watcher);
    if (pending <= 0)
        return pending;
    if (watcher == Py_None) {
        Py_DECREF(watcher);
        if (PyObject_SetAttr(comp, s_watcher, a->adapter) < 0)
            return -1;
        PyObject *call[5] = {a->hub, comp, a->queue, a->quiet_until, a->watched};
        return call_dropped(s_arm, call, 5);
    }
    int mine = watcher == a->adapter;
    PyObject *background = mine ? NULL : PyObject_GetAttr(a->hub, s_background);
    if (!mine && background == NULL) {
        Py_DECREF(watcher);
        return -1;
    }
    mine = mine || watcher == background;
    Py_XDECREF(background);
    Py_DECREF(watcher);
    return mine ? 0 : 1;
}

/* hub.watch's steps (see hub_watch_doc): 0 or -1 */
static int
watch(PyObject *hub, PyObject *comp, PyObject *adapter, PyObject *waiter, PyObject *quiet_until,
      PyObject *watched)
{
    if (completion_add_waiter(comp, waiter) < 0)
        return -1;
    if (COMPLETION(comp)->slot < 0) /* a host callback's: the watcher finishes it */
        return 0;
    PyObject *reactor = PyObject_GetAttr(hub, s_reactor);
    if (reactor == NULL)
        return -1;
    Py_DECREF(reactor);
    if (reactor == Py_None)
        return 0;
    PyObject *queue = PyObject_GetAttr(adapter, s_queue);
    if (queue == Py_None) { /* the loop's first armed slot (outside the lock: Python runs) */
        Py_DECREF(queue);
        queue = PyObject_CallMethodOneArg(hub, s_open_queue, adapter);
    }
    if (queue == NULL)
        return -1;
    arming a = {hub, adapter, queue, quiet_until, watched};
    int moved = completion_locked(comp, arm_unwatched, &a);
    Py_DECREF(queue);
    if (moved <= 0)
        return moved;
    PyObject *r = PyObject_CallMethodOneArg(hub, s_watch_in_background, comp);
    Py_XDECREF(r);
    return r == NULL ? -1 : 0;
}

PyObject *
hub_watch(PyObject *hub, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 3 || nargs > 5)
        return PyErr_Format(PyExc_TypeError, "watch() takes 3 to 5 arguments (%zd given)",
                            nargs);
    if (check_completion("watch", args[0]) < 0 || intern_park_names() < 0)
        return NULL;
    PyObject *zero = PyLong_FromLong(0);
    if (zero == NULL)
        return NULL;
    int r = watch(hub, args[0], args[1], args[2], nargs > 3 ? args[3] : zero,
                  nargs > 4 ? args[4] : Py_False);
    Py_DECREF(zero);
    return r < 0 ? NULL : Py_NewRef(Py_None);
}

const char hub_watch_doc[] =
    "watch($self, comp, adapter, waiter, quiet_until=0, watched=False, /)\n--\n\n"
    "Call ``waiter`` once ``comp`` is finished, observed by the loop of ``adapter``. A flag "
    "slot is armed to the loop's queue (not scanned for before ``quiet_until``, a "
    "``time.monotonic_ns()`` up to which the loop's early wake watches it; ``watched``: "
    "that wake looks at it before then, so the reactor's thread is not woken for it); "
    "one already armed to another loop moves to the background watcher, which wakes the "
    "waiters of every loop. A host-callback completion needs no arming: the watcher "
    "finishes it.";

/* -- HubCore.park --------------------------------------------------------------------- */

/* The set-up of a planned entry (a new reference) or of none: the waiter and the arm
 * (hub.watch, looked up: a spy set on the hub sees it), then the wake set on the loop's
 * timer; where the timer refuses it, the reactor watches the slot at once
 * (hub.unquiet). 0 or -1 (the wake taken off again on an error after it was set). */
static int
set_up(PyObject *hub, PyObject *comp, PyObject *adapter, PyObject *waiter, Pending *entry)
{
    long long quiet = entry == NULL ? 0 : entry->quiet;
    int watched = entry != NULL && pending_watched(entry);
    PyObject *quiet_until = PyLong_FromLongLong(quiet);
    if (quiet_until == NULL)
        return -1;
    PyObject *call[6] = {hub, comp, adapter, waiter, quiet_until, watched ? Py_True : Py_False};
    int r = call_dropped(s_watch, call, 6);
    Py_DECREF(quiet_until);
    if (r < 0 || entry == NULL || !entry->due)
        return r;
    if (!is_timer(entry->timer)) {
        PyErr_Format(PyExc_TypeError, "park: the wake's timer is a %.100s, not a Timer",
                     Py_TYPE(entry->timer)->tp_name);
        return -1;
    }
    int added = timer_add(entry->timer, entry);
    if (added != 0)
        return added < 0 ? -1 : 0;
    Py_SETREF(entry->timer, Py_NewRef(Py_None)); /* refused: no wake; the reactor looks */
    entry->due = 0;
    PyObject *unquiet[3] = {hub, comp, adapter};
    return call_dropped(s_unquiet, unquiet, 3);
}

PyObject *
hub_park(PyObject *hub, PyObject *const *args, Py_ssize_t nargs)
{
    if (check_nargs("park", nargs, 5) < 0 || check_completion("park", args[0]) < 0 ||
        intern_park_names() < 0)
        return NULL;
    PyObject *comp = args[0], *adapter = args[1], *waiter = args[2];
    PyObject *plan[5] = {hub, comp, adapter, args[3], args[4]};
    PyObject *entry = wake_plan(plan, 5);
    if (entry == NULL)
        return NULL;
    if (entry != Py_None && !is_pending(entry)) {
        PyErr_Format(PyExc_TypeError, "park: the plan is a %.100s, not a Pending",
                     Py_TYPE(entry)->tp_name);
        Py_DECREF(entry);
        return NULL;
    }
    if (set_up(hub, comp, adapter, waiter, entry == Py_None ? NULL : (Pending *)entry) < 0)
        Py_CLEAR(entry);
    return entry;
}

const char hub_park_doc[] =
    "park($self, comp, adapter, waiter, key, since, /)\n--\n\n"
    "Set up the parked await of ``comp`` on the loop of ``adapter`` (its suspension's, "
    "before it suspends): its early wake planned (``wake.plan(self, comp, adapter, key, "
    "since)``), ``waiter`` added and the slot armed (:meth:`watch`, quiet while the wake "
    "watches it), the wake set on the loop's timer (where the timer refuses it, the "
    "reactor watches the slot at once: ``unquiet``). Returns the await's "
    "``wake.Pending``, or None where the wake does not follow it. On an error nothing of "
    "the wake is left set (the caller hands the completion to the background watcher).";

/* -- The parked await: HubCore.suspend --------------------------------------------------
 *
 * The one suspension of every await whose work did not land in its spin (the generic
 * path's completion.wait, a launch's await, the native LaunchAwait's): an iterator that
 * parks on its first step (the completion finished where it has landed since; else the
 * loop's wake-up and suspension from adapter.park(), the set-up in hub.park), then
 * delegates to the loop's suspension (an asyncio future's iterator, trio's reschedule)
 * until it returns, and returns the completion's result. Cancelled (throw, close), or
 * dropped unfinished: the wake taken off its timer and the completion handed to the
 * background watcher (the work goes on; what it uses is released once it lands); for a
 * launch's await, its output also abandoned and the op letting go of its arguments. */

typedef struct {
    PyObject_HEAD
    PyObject *hub, *comp, *adapter, *op, *inner, *entry; /* (op, inner, entry: NULL while none) */
    long long since;
    char state, running;
} Suspension;

#define SUSPENSION_OBJECTS 6
enum { SUSPENSION_FRESH, SUSPENSION_PARKED, SUSPENSION_DONE };

static PyTypeObject *g_suspension_t;
static PyObject *g_resolve_future; /* (_reactor.resolve_future: FutureWaker's, below) */
static PyObject *s_park, *s_finish, *s_inline, *s_result, *s_abandon, *s_handle, *s_stream,
    *s_prepared, *s_grid;

static int
intern_suspension_names(void)
{
    static const interned_name names[] = {
        {&s_park, "park"},         {&s_finish, "finish"},     {&s_inline, "inline"},
        {&s_result, "result"},     {&s_abandon, "abandon"},   {&s_handle, "handle"},
        {&s_stream, "stream"},     {&s_prepared, "_prepared"}, {&s_grid, "_grid"},
    };
    return s_grid != NULL ? 0 : INTERN_ALL(names);
}

int
park_types_init(PyObject *module)
{
    PyObject *t = PyObject_GetAttrString(module, "Suspension");
    if (t == NULL)
        return -1;
    Py_XSETREF(g_suspension_t, (PyTypeObject *)t);
    PyObject *resolve = PyObject_GetAttrString(module, "resolve_future");
    if (resolve == NULL)
        return -1;
    Py_XSETREF(g_resolve_future, resolve);
    return 0;
}

PyObject *
suspension_new(PyObject *hub, PyObject *comp, PyObject *adapter, long long since, PyObject *op)
{
    if (g_suspension_t == NULL || intern_park_names() < 0 || intern_suspension_names() < 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_RuntimeError, "the Suspension type is not made yet");
        return NULL;
    }
    if (check_completion("suspend", comp) < 0)
        return NULL;
    Suspension *self = PyObject_GC_New(Suspension, g_suspension_t);
    if (self == NULL)
        return NULL;
    Py_INCREF(g_suspension_t); /* (a heap type: its instances hold it) */
    self->hub = Py_NewRef(hub);
    self->comp = Py_NewRef(comp);
    self->adapter = Py_NewRef(adapter);
    self->op = op == NULL || op == Py_None ? NULL : Py_NewRef(op);
    self->inner = self->entry = NULL;
    self->since = since;
    self->state = SUSPENSION_FRESH;
    self->running = 0;
    PyObject_GC_Track(self);
    return (PyObject *)self;
}

/* (done: what it holds let go) */
static void
suspension_done(Suspension *self)
{
    self->state = SUSPENSION_DONE;
    fields_clear((PyObject *)self, SUSPENSION_OBJECTS);
}

/* Cancelled, failed or dropped before its completion was read: its wake off the timer,
 * the completion to the background watcher, and a launch's output abandoned, its op
 * letting go of its arguments (express._let_go's reasons). The error set on entry (the
 * cancellation) is kept; one of these steps' own is reported as unraisable. */
static void
suspension_let_go(Suspension *self)
{
    SAVE_ERROR(saved);
    if (self->entry != NULL && self->entry != Py_None && wake_cancel(self->entry) < 0)
        PyErr_WriteUnraisable((PyObject *)self);
    PyObject *call[2] = {self->hub, self->comp};
    if (self->hub != NULL && call_dropped(s_watch_in_background, call, 2) < 0)
        PyErr_WriteUnraisable((PyObject *)self);
    if (self->op != NULL) { /* (a local array: the call may change its items for a while) */
        PyObject *abandon[1] = {self->comp};
        if (call_dropped(s_abandon, abandon, 1) < 0 || launch_let_go(self->op) < 0)
            PyErr_WriteUnraisable((PyObject *)self);
    }
    suspension_done(self);
    RESTORE_ERROR(saved);
}

/* The completion is finished: its result (the output, or the work's error raised). */
static PySendResult
suspension_result(Suspension *self, PyObject **result)
{
    *result = PyObject_CallMethodNoArgs(self->comp, s_result);
    suspension_done(self);
    return *result == NULL ? PYGEN_ERROR : PYGEN_RETURN;
}

/* The loop's suspension returned: the work landed (the wake learns its time). */
static PySendResult
suspension_resumed(Suspension *self, PyObject **result)
{
    Py_CLEAR(self->inner);
    if (self->entry != NULL && self->entry != Py_None && wake_resumed(self->entry) < 0) {
        suspension_done(self);
        return PYGEN_ERROR;
    }
    return suspension_result(self, result);
}

/* What the early wake learns the work's length by: a launch's kernel and grid (its op's
 * _prepared and _grid), else its stream's handle. A new reference, or NULL. */
static PyObject *
suspension_key(Suspension *self)
{
    if (self->op != NULL) {
        PyObject *prepared;
        if (optional_attr(self->op, s_prepared, &prepared) < 0)
            return NULL;
        if (prepared != NULL && prepared != Py_None) {
            PyObject *grid = PyObject_GetAttr(self->op, s_grid);
            PyObject *key = grid == NULL ? NULL : PyTuple_Pack(2, prepared, grid);
            Py_XDECREF(grid);
            Py_DECREF(prepared);
            return key;
        }
        Py_XDECREF(prepared);
    }
    PyObject *stream = PyObject_GetAttr(self->comp, s_stream);
    PyObject *handle = stream == NULL ? NULL : PyObject_GetAttr(stream, s_handle);
    Py_XDECREF(stream);
    return handle;
}

/* The completion's flag word shows it landed (its slot's; a host callback's: no): 1, 0,
 * or -1 with an error set. */
static int
suspension_landed(Suspension *self)
{
    CompletionCore *c = COMPLETION(self->comp);
    if (c->slot < 0)
        return 0;
    _Atomic uint32_t *word;
    if (slab_word(c->address, &word) < 0)
        return -1;
    return gen_reached(load_acquire(word), c->gen);
}

static PySendResult suspension_step(Suspension *self, PyObject *arg, PyObject **result);

/* The first step: finished where it has landed since the spin; else parked (the loop's
 * wake-up and suspension, hub.park's set-up) and the loop's suspension's first step. */
static PySendResult
suspension_park(Suspension *self, PyObject **result)
{
    int state = completion_state(self->comp), landed = 0;
    if (state == 0 && (landed = suspension_landed(self)) > 0) {
        PyObject *call[2] = {self->comp, s_inline};
        if (call_dropped(s_finish, call, 2) < 0)
            goto fail;
        state = completion_state(self->comp);
    }
    if (state < 0 || landed < 0)
        goto fail;
    if (state >= 2) /* (DONE, FAILED) */
        return suspension_result(self, result);
    PyObject *pair = PyObject_CallMethodNoArgs(self->adapter, s_park);
    if (pair == NULL)
        goto fail;
    if (!PyTuple_CheckExact(pair) || PyTuple_GET_SIZE(pair) != 2) {
        PyErr_Format(PyExc_TypeError, "adapter.park() must return (waiter, suspend), not %.100s",
                     Py_TYPE(pair)->tp_name);
        Py_DECREF(pair);
        goto fail;
    }
    PyObject *key = suspension_key(self), *since = PyLong_FromLongLong(self->since);
    if (key != NULL && since != NULL) {
        PyObject *call[6] = {self->hub, self->comp, self->adapter, PyTuple_GET_ITEM(pair, 0),
                             key, since};
        self->entry = PyObject_VectorcallMethod(s_park, call,
                                                6 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
        if (self->entry != NULL)
            self->inner = PyObject_CallNoArgs(PyTuple_GET_ITEM(pair, 1));
    }
    Py_XDECREF(key);
    Py_XDECREF(since);
    Py_DECREF(pair);
    if (self->inner == NULL)
        goto fail;
    self->state = SUSPENSION_PARKED;
    return suspension_step(self, Py_None, result);
fail:
    suspension_let_go(self);
    return PYGEN_ERROR;
}

/* A step of the loop's suspension: what it yields goes to the task; its return, the
 * work landed; its error (a cancellation, the loop going away), the completion to the
 * background watcher. */
static PySendResult
suspension_step(Suspension *self, PyObject *arg, PyObject **result)
{
    PyObject *inner = Py_NewRef(self->inner); /* (held while it runs) */
    PySendResult r = PyIter_Send(inner, arg, result);
    Py_DECREF(inner);
    if (r == PYGEN_NEXT)
        return r;
    if (r == PYGEN_RETURN) {
        Py_CLEAR(*result);
        return suspension_resumed(self, result);
    }
    suspension_let_go(self);
    return PYGEN_ERROR;
}

static PySendResult
Suspension_send(Suspension *self, PyObject *arg, PyObject **result)
{
    *result = NULL;
    if (iter_refuse_running(self->running) < 0)
        return PYGEN_ERROR;
    if (self->state == SUSPENSION_DONE) {
        PyErr_SetString(PyExc_RuntimeError, "cannot reuse an already awaited suspension");
        return PYGEN_ERROR;
    }
    if (self->state == SUSPENSION_FRESH && arg != Py_None) {
        PyErr_SetString(PyExc_TypeError, "can't send non-None value to a just-started awaitable");
        return PYGEN_ERROR;
    }
    self->running = 1;
    Py_INCREF(self); /* (alive while its step runs Python code) */
    PySendResult r = self->state == SUSPENSION_FRESH ? suspension_park(self, result)
                                                      : suspension_step(self, arg, result);
    self->running = 0;
    Py_DECREF(self);
    return r;
}

static PyObject *
Suspension_iternext(Suspension *self)
{
    PyObject *result;
    PySendResult r = Suspension_send(self, Py_None, &result);
    return iter_result(r, result, 1);
}

static PyObject *
Suspension_send_method(Suspension *self, PyObject *arg)
{
    PyObject *result;
    PySendResult r = Suspension_send(self, arg, &result);
    return iter_result(r, result, 0);
}

/* throw() and close(): parked, the loop's suspension's own (it raises the exception,
 * or yields again where it declines it, as trio's may), then let go; not yet parked,
 * the completion is let go at once and the exception raised here. */
static PyObject *
Suspension_throw(Suspension *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (iter_may_throw(self->running, nargs) < 0)
        return NULL;
    if (self->state != SUSPENSION_PARKED) {
        if (self->state == SUSPENSION_FRESH) {
            self->running = 1;
            Py_INCREF(self);
            suspension_let_go(self);
            self->running = 0;
            Py_DECREF(self);
        }
        return iter_raise_thrown(args, nargs);
    }
    self->running = 1;
    Py_INCREF(self);
    PyObject *r = iter_throw_into(self->inner, args, nargs);
    if (r == NULL) {
        PyObject *value = NULL;
        if (PyErr_ExceptionMatches(PyExc_StopIteration)) { /* (it returned: landed) */
            PyErr_Clear();
            PySendResult sent = suspension_resumed(self, &value);
            r = iter_result(sent, value, 0);
        }
        else
            suspension_let_go(self);
    }
    self->running = 0;
    Py_DECREF(self);
    return r;
}

static PyObject *
Suspension_close(Suspension *self, PyObject *Py_UNUSED(arg))
{
    if (iter_refuse_running(self->running) < 0)
        return NULL;
    if (self->state == SUSPENSION_DONE)
        Py_RETURN_NONE;
    self->running = 1;
    Py_INCREF(self);
    int failed = self->inner != NULL && iter_close_inner(self->inner) < 0;
    suspension_let_go(self);
    self->running = 0;
    Py_DECREF(self);
    return failed ? NULL : Py_NewRef(Py_None);
}

static PyObject *
Suspension_iter(PyObject *self)
{
    return Py_NewRef(self);
}

static int
Suspension_traverse(PyObject *self, visitproc visit, void *arg)
{
    return fields_traverse(self, SUSPENSION_OBJECTS, visit, arg);
}

static int
Suspension_clear(PyObject *self)
{
    ((Suspension *)self)->state = SUSPENSION_DONE;
    fields_clear(self, SUSPENSION_OBJECTS);
    return 0;
}

/* Dropped unfinished (a task destroyed while parked, a cycle collected): the work goes
 * on, and the background watcher finishes it. */
static void
Suspension_finalize(PyObject *self)
{
    Suspension *s = (Suspension *)self;
    if (s->state == SUSPENSION_DONE || s->running)
        return;
    SAVE_ERROR(saved);
    suspension_let_go(s);
    RESTORE_ERROR(saved);
}

static void
Suspension_dealloc(PyObject *self)
{
    if (PyObject_CallFinalizerFromDealloc(self) < 0)
        return; /* (resurrected) */
    fields_dealloc(self, SUSPENSION_OBJECTS);
}

static PyMethodDef Suspension_methods[] = {
    {"send", (PyCFunction)Suspension_send_method, METH_O, "Send a value into the await."},
    {"throw", (PyCFunction)(void (*)(void))Suspension_throw, METH_FASTCALL,
     "Raise an exception inside the await."},
    {"close", (PyCFunction)Suspension_close, METH_NOARGS, "Close the await."},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot Suspension_slots[] = {
    {Py_tp_dealloc, (void *)Suspension_dealloc},
    {Py_tp_finalize, (void *)Suspension_finalize},
    {Py_tp_traverse, (void *)Suspension_traverse},
    {Py_tp_clear, (void *)Suspension_clear},
    {Py_tp_iter, (void *)Suspension_iter},
    {Py_tp_iternext, (void *)Suspension_iternext},
    {Py_am_send, (void *)Suspension_send},
    {Py_tp_methods, Suspension_methods},
    {Py_tp_doc, (void *)"The parked await of a completion (HubCore.suspend's)."},
    {0, NULL},
};

PyType_Spec Suspension_spec = {
    .name = "cuasync._reactor.Suspension",
    .basicsize = sizeof(Suspension),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_HAVE_GC |
             Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = Suspension_slots,
};

PyObject *
hub_suspend(PyObject *hub, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 2 || nargs > 4)
        return PyErr_Format(PyExc_TypeError, "suspend() takes 2 to 4 arguments (%zd given)",
                            nargs);
    long long since = 0;
    if (nargs > 2 && get_i64(args[2], &since) < 0)
        return NULL;
    return suspension_new(hub, args[0], args[1], since ? since : (long long)now_ns(),
                          nargs > 3 ? args[3] : NULL);
}

const char hub_suspend_doc[] =
    "suspend($self, comp, adapter, since=0, op=None, /)\n--\n\n"
    "The parked await of ``comp`` on the loop of ``adapter`` (``yield from`` it: what "
    "an await does when its spin did not see the work land), its wait begun at ``since`` "
    "(``time.monotonic_ns()``; 0: now); returns ``comp.result()``. Its first step "
    "finishes ``comp`` where it has landed since, else parks: ``adapter.park()``'s "
    "wake-up and suspension, :meth:`park`'s set-up (the early wake's key: the launch "
    "``op``'s kernel and grid, else the stream's handle). Cancelled, or dropped "
    "unfinished: the wake off, ``comp`` to the background watcher, and for a launch "
    "``op``, its output abandoned and its arguments let go.\n\n"
    ">>> return (yield from hub.suspend(comp, adapter, since))";

/* -- The wake-up of a task parked on a loop future: FutureWaker ----------------------
 *
 * What an asyncio or uvloop loop's park() gives as the waiter of a parked await
 * (loops.AsyncioAdapter.park): called with the finished completion, from any thread. On
 * the loop's own thread (an early wake's finish, the loop's drain of the reactor's
 * queue) it resolves the loop's future at once; from another (the background watcher,
 * a pool's thread) through adapter.call_from_thread(resolve_future, fut), which does
 * nothing once the loop is closed. Native: the finish of the work that landed calls it
 * on the path to the task's resumption, with no Python frame. */

typedef struct {
    PyObject_HEAD
    PyObject *adapter, *fut;
    unsigned long thread; /* (the loop's: park() runs on it) */
} FutureWaker;

#define FUTURE_WAKER_OBJECTS 2

static PyObject *s_done, *s_set_result, *s_call_from_thread;

static int
intern_waker_names(void)
{
    static const interned_name names[] = {
        {&s_done, "done"},
        {&s_set_result, "set_result"},
        {&s_call_from_thread, "call_from_thread"},
    };
    return s_call_from_thread != NULL ? 0 : INTERN_ALL(names);
}

/* fut resolved with None where it is not done yet (cancelled meanwhile: left alone): 0
 * or -1 with an error set */
static int
resolve_future(PyObject *fut)
{
    PyObject *done = PyObject_CallMethodNoArgs(fut, s_done);
    if (done == NULL)
        return -1;
    int is_done = PyObject_IsTrue(done);
    Py_DECREF(done);
    if (is_done != 0)
        return is_done < 0 ? -1 : 0;
    PyObject *call[2] = {fut, Py_None};
    return call_dropped(s_set_result, call, 2);
}

static PyObject *
mod_resolve_future(PyObject *Py_UNUSED(module), PyObject *fut)
{
    if (intern_waker_names() < 0 || resolve_future(fut) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *
FutureWaker_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    PyObject *adapter, *fut;
    if (!PyArg_ParseTuple(args, "OO:FutureWaker", &adapter, &fut) ||
        (kwargs != NULL && !PyArg_ValidateKeywordArguments(kwargs)) || intern_waker_names() < 0)
        return NULL;
    if (kwargs != NULL && PyDict_GET_SIZE(kwargs)) {
        PyErr_SetString(PyExc_TypeError, "FutureWaker() takes no keyword arguments");
        return NULL;
    }
    FutureWaker *self = (FutureWaker *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->adapter = Py_NewRef(adapter);
    self->fut = Py_NewRef(fut);
    self->thread = PyThread_get_thread_ident();
    return (PyObject *)self;
}

static PyObject *
FutureWaker_call(PyObject *op, PyObject *args, PyObject *kwargs)
{
    FutureWaker *self = (FutureWaker *)op;
    if (PyTuple_GET_SIZE(args) != 1 || (kwargs != NULL && PyDict_GET_SIZE(kwargs))) {
        PyErr_SetString(PyExc_TypeError, "a FutureWaker takes one argument (the completion)");
        return NULL;
    }
    if (self->fut == NULL) /* (cleared) */
        Py_RETURN_NONE;
    if (PyThread_get_thread_ident() == self->thread)
        return resolve_future(self->fut) < 0 ? NULL : Py_NewRef(Py_None);
    PyObject *call[3] = {self->adapter, g_resolve_future, self->fut};
    return call_dropped(s_call_from_thread, call, 3) < 0 ? NULL : Py_NewRef(Py_None);
}

static int
FutureWaker_traverse(PyObject *self, visitproc visit, void *arg)
{
    return fields_traverse(self, FUTURE_WAKER_OBJECTS, visit, arg);
}

static int
FutureWaker_clear(PyObject *self)
{
    fields_clear(self, FUTURE_WAKER_OBJECTS);
    return 0;
}

static void
FutureWaker_dealloc(PyObject *self)
{
    fields_dealloc(self, FUTURE_WAKER_OBJECTS);
}

static PyMemberDef FutureWaker_members[] = {
    {"adapter", T_OBJECT, offsetof(FutureWaker, adapter), READONLY, "The loop's adapter."},
    {"fut", T_OBJECT, offsetof(FutureWaker, fut), READONLY, "The loop future it resolves."},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot FutureWaker_slots[] = {
    {Py_tp_doc, "FutureWaker(adapter, fut, /)\n--\n\n"
                "The wake-up of a task parked on the loop future ``fut`` (made on the loop's "
                "thread, as this is): called with the finished completion from any thread, "
                "it resolves ``fut`` at once on that thread, else through "
                "``adapter.call_from_thread(resolve_future, fut)``.\n\n"
                ">>> waiter = FutureWaker(adapter, loop.create_future()); waiter(comp)"},
    {Py_tp_new, FutureWaker_new},
    {Py_tp_call, FutureWaker_call},
    {Py_tp_dealloc, FutureWaker_dealloc},
    {Py_tp_traverse, FutureWaker_traverse},
    {Py_tp_clear, FutureWaker_clear},
    {Py_tp_members, FutureWaker_members},
    {0, NULL},
};

PyType_Spec FutureWaker_spec = {
    .name = "cuasync._reactor.FutureWaker",
    .basicsize = sizeof(FutureWaker),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = FutureWaker_slots,
};

PyMethodDef park_methods[] = {
    {"resolve_future", (PyCFunction)mod_resolve_future, METH_O,
     "resolve_future($module, fut, /)\n--\n\n"
     "Resolve the loop future ``fut`` with None, unless it is done (cancelled meanwhile): "
     "what a FutureWaker has its loop call from another thread."},
    {NULL, NULL, 0, NULL},
};
