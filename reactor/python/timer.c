/*
 * A loop's early-wake timer (TimerCore, the base of cuasync/_core/wake.py's Timer): one
 * timerfd of the loop and the heap of the wakes parked on it, earliest first. Setting a
 * wake, taking one off and firing the due ones run no Python of their own; firing calls
 * the hub's spin_early for each due wake (and, for a pre-wake, its completion's landed).
 * The fd is the timer's: close() or the timer's dealloc closes it (close(2) never
 * blocks on a timerfd).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <unistd.h>
#ifdef __linux__
#include <sys/timerfd.h>
#endif

#include "cores.h"
#include "module.h"
#include "wake.h"

typedef struct {
    PyObject_HEAD
    Pending **heap; /* strong references, a binary min-heap by at */
    Py_ssize_t n, cap;
    int fd, closed;
    long long armed;  /* the deadline the timerfd holds (0: disarmed) */
    long long set_ns; /* when it was set to it (a deadline already past fires from then) */
    long long late_ns;
} TimerCore;

#define TIMER(o) ((TimerCore *)(o))

/* -- the timerfd ------------------------------------------------------------------------ */

int
set_timerfd(int fd, unsigned long long at)
{
#ifdef __linux__
    struct itimerspec spec = {{0, 0}, {(time_t)(at / 1000000000ull), (long)(at % 1000000000ull)}};
    return timerfd_settime(fd, TFD_TIMER_ABSTIME, &spec, NULL) == 0;
#else
    (void)fd;
    (void)at;
    return 0;
#endif
}

/* Set the timerfd to expire at deadline (0: disarmed): 1, or 0 where the kernel refused
 * (closed; no timerfd on this platform). */
static int
fd_set_deadline(TimerCore *self, long long deadline)
{
    self->armed = deadline;
    if (deadline)
        self->set_ns = (long long)now_ns();
    return !self->closed && set_timerfd(self->fd, deadline > 0 ? (unsigned long long)deadline : 0);
}

/* Read the expiration count (none: it was set again since it became readable). */
static void
fd_drain(TimerCore *self)
{
    uint64_t count;
    if (!self->closed) {
        ssize_t got = read(self->fd, &count, sizeof count); /* (EAGAIN: not expired) */
        (void)got;
    }
}

/* -- the heap ------------------------------------------------------------------------- */

static void
sift_up(TimerCore *self, Py_ssize_t i)
{
    Pending **h = self->heap, *e = h[i];
    while (i > 0) {
        Py_ssize_t parent = (i - 1) / 2;
        if (h[parent]->at <= e->at)
            break;
        h[i] = h[parent];
        i = parent;
    }
    h[i] = e;
}

static void
sift_down(TimerCore *self, Py_ssize_t i)
{
    Pending **h = self->heap, *e = h[i];
    Py_ssize_t n = self->n;
    for (;;) {
        Py_ssize_t child = 2 * i + 1;
        if (child >= n)
            break;
        if (child + 1 < n && h[child + 1]->at < h[child]->at)
            child++;
        if (e->at <= h[child]->at)
            break;
        h[i] = h[child];
        i = child;
    }
    h[i] = e;
}

static int
heap_push(TimerCore *self, Pending *entry)
{
    if (self->n == self->cap) {
        Py_ssize_t cap = self->cap ? 2 * self->cap : 8;
        Pending **heap = PyMem_Realloc(self->heap, (size_t)cap * sizeof *heap);
        if (heap == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        self->heap = heap;
        self->cap = cap;
    }
    self->heap[self->n++] = (Pending *)Py_NewRef(entry);
    sift_up(self, self->n - 1);
    return 0;
}

/* Take the entry at i out of the heap: a reference the caller owns. */
static Pending *
heap_take(TimerCore *self, Py_ssize_t i)
{
    Pending *e = self->heap[i];
    Pending *last = self->heap[--self->n];
    if (i < self->n) {
        self->heap[i] = last;
        sift_down(self, i);
        sift_up(self, i);
    }
    return e;
}

/* Set the timerfd to the heap's earliest wake, or disarm it (read where it had expired,
 * so that the loop is not woken for nothing). */
static void
rearm(TimerCore *self)
{
    if (self->n) {
        if (self->heap[0]->at != self->armed)
            fd_set_deadline(self, self->heap[0]->at);
    }
    else if (self->armed) {
        int expired = self->armed <= (long long)now_ns();
        fd_set_deadline(self, 0);
        if (expired)
            fd_drain(self);
    }
}

/* -- the type ------------------------------------------------------------------------- */

static PyObject *
TimerCore_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    int fd;
    static char *kwlist[] = {"fd", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "i:Timer", kwlist, &fd))
        return NULL;
    if (fd < 0)
        return PyErr_Format(PyExc_ValueError, "a Timer's fd must be a timerfd, not %d", fd);
    WakePolicyCore *p = wake_policy();
    TimerCore *self = p == NULL ? NULL : (TimerCore *)type->tp_alloc(type, 0);
    if (self == NULL) { /* (the fd was given to it: closed, as its dealloc would) */
        close(fd);
        return NULL;
    }
    self->fd = fd;
    self->late_ns = p->late_ns;
    return (PyObject *)self;
}

static int
TimerCore_traverse(PyObject *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    for (Py_ssize_t i = 0; i < TIMER(self)->n; i++)
        Py_VISIT(TIMER(self)->heap[i]);
    return 0;
}

static int
TimerCore_clear(PyObject *self)
{
    TimerCore *t = TIMER(self);
    while (t->n) {
        Pending *e = t->heap[--t->n];
        Py_DECREF(e);
    }
    return 0;
}

static void
TimerCore_dealloc(PyObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    TimerCore_clear(self);
    TimerCore *t = TIMER(self);
    PyMem_Free(t->heap);
    if (!t->closed)
        close(t->fd);
    tp->tp_free(self);
    Py_DECREF(tp);
}

/* an argument that must be a Pending: 0, or -1 with a TypeError */
static int
check_pending(const char *method, PyObject *arg)
{
    if (is_pending(arg))
        return 0;
    PyErr_Format(PyExc_TypeError, "Timer.%s() takes a wake.Pending, not %.100s", method,
                 Py_TYPE(arg)->tp_name);
    return -1;
}

int
timer_add(PyObject *self, Pending *entry)
{
    TimerCore *t = TIMER(self);
    if (t->closed)
        return 0;
    if (entry->at <= 0) {
        PyErr_Format(PyExc_ValueError, "Timer.add(): a wake's at must be a "
                     "time.monotonic_ns() deadline, not %lld", entry->at);
        return -1;
    }
    if (heap_push(t, entry) < 0)
        return -1;
    if (t->heap[0] == entry && !fd_set_deadline(t, entry->at))
        return timer_remove(self, entry) < 0 ? -1 : 0;
    return 1;
}

static PyObject *
TimerCore_add(PyObject *self, PyObject *arg)
{
    if (check_pending("add", arg) < 0)
        return NULL;
    int added = timer_add(self, (Pending *)arg);
    return added < 0 ? NULL : PyBool_FromLong(added);
}

int
timer_remove(PyObject *self, Pending *entry)
{
    TimerCore *t = TIMER(self);
    for (Py_ssize_t i = 0; i < t->n; i++)
        if (t->heap[i] == entry) {
            Py_DECREF(heap_take(t, i));
            rearm(t);
            return 0;
        }
    return 0;
}

static PyObject *
TimerCore_remove(PyObject *self, PyObject *arg)
{
    if (check_pending("remove", arg) < 0 || timer_remove(self, (Pending *)arg) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* (names the timer and the wake read and call: the completion's, the hub's, the
 * adapter's, the counters', and the finish paths' labels, from completion.py) */
static PyObject *s_stats, *s_early_prewakes, *s_landed, *s_spin_early, *s_reactor,
    *s_disarm, *s_drain, *s_queue, *s_arm, *s_finish, *s_others_ready, *s_spin_hold_ns,
    *s_early_spin_ns, *s_early_spin_max_ns, *s_early_misses, *s_early, *s_early_late;

static int
intern_wake_names(void)
{
    static const interned_name names[] = {
        {&s_stats, "stats"}, {&s_early_prewakes, "early_prewakes"}, {&s_landed, "landed"},
        {&s_spin_early, "spin_early"}, {&s_reactor, "reactor"},
        {&s_disarm, "disarm"}, {&s_drain, "drain"}, {&s_queue, "queue"}, {&s_arm, "arm"},
        {&s_finish, "finish"}, {&s_others_ready, "others_ready"},
        {&s_spin_hold_ns, "spin_hold_ns"}, {&s_early_spin_ns, "early_spin_ns"},
        {&s_early_spin_max_ns, "early_spin_max_ns"}, {&s_early_misses, "early_misses"},
        {&s_early, "early_wake"},
        {&s_early_late, "early_wake_late"}, /* (last: the guard below reads it) */
    };
    return s_early_late != NULL ? 0 : INTERN_ALL(names);
}

/* hub.stats.early_prewakes += 1: 0, or -1 with an error set */
static int
count_prewake(PyObject *hub)
{
    PyObject *stats = PyObject_GetAttr(hub, s_stats);
    int r = stats == NULL ? -1 : stats_count(stats, s_early_prewakes, 1, 0);
    Py_XDECREF(stats);
    return r;
}

/* One due entry at the heap's top (a reference held by the caller): a pre-wake moves
 * it to its wake and leaves it in the heap (1), unless its work landed already; else it
 * is taken off and spun for (0). -1 with an error set. */
static int
fire_one(TimerCore *t, Pending *entry)
{
    if (entry->at < entry->due) { /* its pre-wake: the wake itself stays set... */
        entry->at = entry->due;
        sift_down(t, 0); /* (in order again before any Python runs, which may raise) */
        if (count_prewake(entry->hub) < 0)
            return -1;
        PyObject *landed = PyObject_CallMethodNoArgs(entry->comp, s_landed);
        int is = landed == NULL ? -1 : PyObject_IsTrue(landed);
        Py_XDECREF(landed);
        if (is <= 0)
            return is < 0 ? -1 : 1;
        /* ...unless its work landed already (it got shorter): finished now */
    }
    for (Py_ssize_t i = 0; i < t->n; i++)
        if (t->heap[i] == entry) {
            Py_DECREF(heap_take(t, i));
            break;
        }
    Py_SETREF(entry->timer, Py_NewRef(Py_None));
    PyObject *r = PyObject_CallMethodOneArg(entry->hub, s_spin_early, (PyObject *)entry);
    Py_XDECREF(r);
    return r == NULL ? -1 : 0;
}

static PyObject *
TimerCore_fire(PyObject *self, PyObject *Py_UNUSED(unused))
{
    TimerCore *t = TIMER(self);
    WakePolicyCore *p = wake_policy();
    if (p == NULL || intern_wake_names() < 0)
        return NULL;
    if (t->closed)
        Py_RETURN_NONE;
    fd_drain(t);
    t->armed = 0;
    long long now = (long long)now_ns();
    /* the lateness of a wake (not of a pre-wake: the wake's lead is for a warm thread),
     * from its deadline or, for one already past when set, from then */
    if (t->n && t->heap[0]->at <= now && t->heap[0]->at == t->heap[0]->due) {
        long long from = t->heap[0]->at > t->set_ns ? t->heap[0]->at : t->set_ns;
        long long late = now - from;
        int up = (int)p->late_up_shift, down = (int)p->late_down_shift;
        if (late > t->late_ns)
            t->late_ns += (late - t->late_ns) >> (up < 0 ? 0 : up > 62 ? 62 : up);
        else
            t->late_ns -= (t->late_ns - late) >> (down < 0 ? 0 : down > 62 ? 62 : down);
    }
    Py_INCREF(self); /* (held: the spins run Python) */
    int failed = 0;
    while (!failed && t->n && t->heap[0]->at <= now) {
        Pending *entry = (Pending *)Py_NewRef(t->heap[0]);
        int r = fire_one(t, entry);
        Py_DECREF(entry);
        failed = r < 0;
        if (r == 0)
            now = (long long)now_ns();
    }
    rearm(t); /* (the later wakes keep their timer whatever a spin raised) */
    Py_DECREF(self);
    if (failed)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *
TimerCore_close(PyObject *self, PyObject *Py_UNUSED(unused))
{
    TimerCore *t = TIMER(self);
    if (t->closed)
        Py_RETURN_NONE;
    t->closed = 1;
    t->armed = 0;
    while (t->n) {
        Pending *e = t->heap[--t->n];
        Py_SETREF(e->timer, Py_NewRef(Py_None));
        Py_DECREF(e);
    }
    close(t->fd);
    Py_RETURN_NONE;
}

static PyObject *
TimerCore_get_heap(PyObject *self, void *Py_UNUSED(closure))
{
    TimerCore *t = TIMER(self);
    PyObject *list = PyList_New(t->n);
    for (Py_ssize_t i = 0; list != NULL && i < t->n; i++)
        PyList_SET_ITEM(list, i, Py_NewRef(t->heap[i]));
    return list;
}

static PyMethodDef TimerCore_methods[] = {
    {"add", (PyCFunction)TimerCore_add, METH_O,
     "add($self, entry, /)\n--\n\n"
     "Set ``entry``'s wake (a Pending, at ``entry.at``); False where the timer could not be "
     "set (closed; the kernel refused): nothing then looks at its slot, and the caller has "
     "the reactor watch it."},
    {"remove", (PyCFunction)TimerCore_remove, METH_O,
     "remove($self, entry, /)\n--\n\n"
     "Take ``entry``'s wake off (nothing where it has none here)."},
    {"fire", (PyCFunction)TimerCore_fire, METH_NOARGS,
     "fire($self, /)\n--\n\n"
     "The timerfd expired (on the loop's thread): each due wake is taken off and spun for "
     "(``entry.hub.spin_early(entry)``); a due pre-wake only moves its entry to its wake, "
     "unless its work landed already. ``late_ns`` follows how late the first wake ran."},
    {"close", (PyCFunction)TimerCore_close, METH_NOARGS,
     "close($self, /)\n--\n\n"
     "The loop is going away: its wakes are dropped (what they watched is armed in the "
     "reactor, which the hub hands to the background watcher), the fd closed."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef TimerCore_members[] = {
    {"fd", T_INT, offsetof(TimerCore, fd), READONLY, "The timerfd (the timer's own)."},
    {"closed", T_BOOL, offsetof(TimerCore, closed), READONLY, "Whether close() ran."},
    {"armed", T_LONGLONG, offsetof(TimerCore, armed), READONLY,
     "The deadline the timerfd holds (time.monotonic_ns(); 0: disarmed)."},
    {"set_ns", T_LONGLONG, offsetof(TimerCore, set_ns), READONLY,
     "When it was last set (a deadline already past counts its lateness from then)."},
    {"late_ns", T_LONGLONG, offsetof(TimerCore, late_ns), 0,
     "How late its wakes run: up fast, down slowly (Policy.late_up_shift), from the "
     "policy's late_ns."},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef TimerCore_getset[] = {
    {"heap", TimerCore_get_heap, NULL,
     "The wakes set, as a new list in heap order (earliest first).", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot TimerCore_slots[] = {
    {Py_tp_doc, "TimerCore(fd)\n--\n\n"
                "One loop's timerfd (``fd``, owned from now) and the heap of the wakes "
                "parked on it: the base of wake.Timer."},
    {Py_tp_new, TimerCore_new},
    {Py_tp_dealloc, TimerCore_dealloc},
    {Py_tp_traverse, TimerCore_traverse},
    {Py_tp_clear, TimerCore_clear},
    {Py_tp_methods, TimerCore_methods},
    {Py_tp_members, TimerCore_members},
    {Py_tp_getset, TimerCore_getset},
    {0, NULL},
};

PyType_Spec TimerCore_spec = {
    .name = "cuasync._reactor.TimerCore",
    .basicsize = sizeof(TimerCore),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC |
             Py_TPFLAGS_IMMUTABLETYPE,
    .slots = TimerCore_slots,
};

/* -- the wake: a due entry's spin (HubCore.spin_early) --------------------------------- */

/* Whether comp is still pending and watched by adapter (read under its lock): 1, 0, -1 */
static int
still_watched(PyObject *comp, PyObject *adapter)
{
    PyObject *watcher;
    int pending = completion_watcher(comp, &watcher);
    if (pending <= 0)
        return pending;
    Py_DECREF(watcher);
    return watcher == adapter;
}

/* The spin of a wake whose slot is disarmed: 1 once it finished the completion, 0 where
 * its work did not land within its window (the caller arms it again), -1 an error. */
static int
spin_for(PyObject *hub, Pending *entry, _Atomic uint32_t *word, uint32_t gen)
{
    PyObject *comp = entry->comp;
    if (spin_flag(word, gen, 0, 0)) /* landed before the wake: ``seen`` stays 0 */
        return call_dropped(s_finish, (PyObject *[]){comp, s_early_late}, 2) < 0 ? -1 : 1;
    PyObject *ready = PyObject_CallMethodNoArgs(entry->adapter, s_others_ready);
    int others = ready == NULL ? -1 : PyObject_IsTrue(ready);
    Py_XDECREF(ready);
    if (others) { /* a spin would hold them up (many awaits at once) */
        if (others > 0)
            entry->due = 0; /* (learnt from as an await without a wake) */
        return others < 0 ? -1 : 0;
    }
    long long hold = 0;
    if (is_launch_key(entry->key)) { /* the device's work alone: the GIL kept a while */
        PyObject *h = PyObject_GetAttr(hub, s_spin_hold_ns);
        hold = h == NULL ? -1 : PyLong_AsLongLong(h);
        Py_XDECREF(h);
        if (hold == -1 && PyErr_Occurred())
            return -1;
        hold = hold < 0 ? 0 : hold;
    }
    entry->hold = hold;
    long long start = (long long)now_ns(), left = entry->until - start;
    int landed = left > 0 && spin_flag(word, gen, (uint64_t)left, (uint64_t)hold);
    long long end = (long long)now_ns();
    PyObject *stats = HUB(hub)->stats;
    if (stats == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "spin_early: the hub has no stats");
        return -1;
    }
    if (stats_count(stats, s_early_spin_ns, end - start, 0) < 0 ||
        stats_count(stats, s_early_spin_max_ns, end - start, 1) < 0)
        return -1;
    if (landed) {
        entry->seen = end;
        return call_dropped(s_finish, (PyObject *[]){comp, s_early}, 2) < 0 ? -1 : 1;
    }
    if (entry->due) {
        entry->lo = end;
        if (stats_count(stats, s_early_misses, 1, 0) < 0)
            return -1;
    }
    return 0;
}

/* (what the steps under a completion's lock read: the hub and the adapter) */
typedef struct {
    PyObject *hub, *adapter;
} wake_of;

/* (under the lock) where comp is still watched by adapter, its slot taken back from the
 * reactor: 1 (now the wake's to spin on), 2 (the reactor saw the landing first: its
 * report is in the loop's queue); 0 finished, or moved to the background watcher since */
static int
disarm_if_watched(PyObject *comp, void *arg)
{
    PyObject *hub = ((wake_of *)arg)->hub, *adapter = ((wake_of *)arg)->adapter;
    int watched = still_watched(comp, adapter);
    if (watched <= 0)
        return watched;
    PyObject *reactor = PyObject_GetAttr(hub, s_reactor);
    PyObject *slot = reactor == NULL ? NULL : PyLong_FromSsize_t(COMPLETION(comp)->slot);
    PyObject *took = slot == NULL ? NULL : PyObject_CallMethodOneArg(reactor, s_disarm, slot);
    int r = took == NULL ? -1 : PyObject_IsTrue(took);
    Py_XDECREF(took);
    Py_XDECREF(slot);
    Py_XDECREF(reactor);
    return r < 0 ? -1 : r ? 1 : 2;
}

/* (under the lock) where comp is still watched by adapter, its slot armed again to the
 * loop's queue (the reactor reports it, as for any parked await): 0 or -1 */
static int
arm_if_watched(PyObject *comp, void *arg)
{
    PyObject *hub = ((wake_of *)arg)->hub, *adapter = ((wake_of *)arg)->adapter;
    int watched = still_watched(comp, adapter);
    if (watched <= 0)
        return watched;
    PyObject *queue = PyObject_GetAttr(adapter, s_queue);
    int r = queue == NULL ? -1 : call_dropped(s_arm, (PyObject *[]){hub, comp, queue}, 3);
    Py_XDECREF(queue);
    return r;
}

/* HubCore.spin_early(entry): see hub_spin_early_doc */
PyObject *
hub_spin_early(PyObject *hub, PyObject *arg)
{
    if (check_pending("spin_early", arg) < 0 || intern_wake_names() < 0)
        return NULL;
    Pending *entry = (Pending *)Py_NewRef(arg);
    PyObject *comp = Py_NewRef(entry->comp), *adapter = Py_NewRef(entry->adapter), *r = NULL;
    PyTypeObject *completion_t = REGISTERED(COMPLETION);
    if (completion_t == NULL || !PyObject_TypeCheck(comp, completion_t)) {
        PyErr_Format(PyExc_TypeError, "spin_early: the entry's comp must be a Completion, not %.100s",
                     Py_TYPE(comp)->tp_name);
        goto done;
    }
    entry->looked = (long long)now_ns();
    wake_of of = {hub, adapter};
    int mine = completion_locked(comp, disarm_if_watched, &of);
    if (mine < 0)
        goto done;
    if (mine == 2) { /* drained now, not in the loop's next pass (as "other work ready") */
        PyObject *queue = PyObject_GetAttr(adapter, s_queue);
        int drained = queue == NULL ? -1 : call_dropped(s_drain, (PyObject *[]){hub, queue}, 2);
        Py_XDECREF(queue);
        if (drained < 0)
            goto done;
    }
    else if (mine == 1) {
        _Atomic uint32_t *word;
        int spun = slab_word(COMPLETION(comp)->address, &word) < 0
                       ? -1
                       : spin_for(hub, entry, word, COMPLETION(comp)->gen);
        if (spun != 1) { /* not landed (or an error): the reactor reports it */
            SAVE_ERROR(saved);
            if (completion_locked(comp, arm_if_watched, &of) < 0) {
                DROP_ERROR(saved);
                goto done;
            }
            RESTORE_ERROR(saved);
            if (spun < 0)
                goto done;
        }
    }
    r = Py_NewRef(Py_None);
done:
    Py_DECREF(adapter);
    Py_DECREF(comp);
    Py_DECREF(entry);
    return r;
}

const char hub_spin_early_doc[] =
    "spin_early($self, entry, /)\n--\n\n"
    "The early wake of ``entry.comp``'s loop (wake.Timer.fire, on its thread): spin on "
    "the flag until ``entry.until`` and finish the completion here if it lands (its "
    "``seen`` time set where the spin saw the landing itself; ``looked`` when the wake "
    "ran); else arm it again, for the reactor to report. No spin where other work on the "
    "loop is ready to run (``entry.due`` set to 0: learnt from as an await without a "
    "wake). While the loop's thread spins the reactor does not watch the slot, so that "
    "one landing is not reported twice (a report would wake the loop again, and make its "
    "next await find other work ready and skip its spin). The spin of a launch's wake "
    "(its key a kernel and grid, a library call and its kind) keeps the GIL for the "
    "hub's ``spin_hold_ns``; the counters ``early_spin_ns``, ``early_spin_max_ns`` and "
    "``early_misses`` follow.";
