/*
 * A parked await's set-up (HubCore.park, .watch and .arm, the base of completion.py's
 * Hub): its waiter added to the completion, its slot armed to the loop's reactor queue,
 * and its early wake planned and set on the loop's timer, in one call from the await's
 * generator (completion.suspend). The reactor is armed for every parked await; the wake
 * only makes an awake thread see the landing first (docs/completion.md).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

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
    "Set up the parked await of ``comp`` on the loop of ``adapter`` (completion.suspend, "
    "before it suspends): its early wake planned (``wake.plan(self, comp, adapter, key, "
    "since)``), ``waiter`` added and the slot armed (:meth:`watch`, quiet while the wake "
    "watches it), the wake set on the loop's timer (where the timer refuses it, the "
    "reactor watches the slot at once: ``unquiet``). Returns the await's "
    "``wake.Pending``, or None where the wake does not follow it. On an error nothing of "
    "the wake is left set (the caller hands the completion to the background watcher).";
