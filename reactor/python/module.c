/*
 * The Python face of cuasync._reactor: the LoopQueue and Reactor types over the queue
 * cores (queue.c) and the reactor (reactor.c), and the module definition.  The word
 * helpers and driver fast paths are in driver.c.  Design notes: README.md.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "memo.h"
#include "module.h"
#include "wake.h"
#include "ledger.h"
#include "cores.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
typedef struct {
    PyTypeObject *reactor_type;
    PyTypeObject *queue_type;
    PyTypeObject *submitter_type;
    PyObject *exec_lock; /* EXEC_LOCK: cuasync's execution lock (context.LOCK) */
    PyObject *process;   /* PROCESS: the state an await reads (a ProcessCore) */
    dlpack_codes codes;  /* (dlpack.c) */
    alloc_shape *shape;  /* what Allocation's finalizer reads (alloc.c), once made */
} modstate;

dlpack_codes *
module_dlpack_codes(PyTypeObject *defining_class)
{
    modstate *st = (modstate *)PyType_GetModuleState(defining_class);
    return st == NULL ? NULL : &st->codes;
}

PyObject *
module_exec_lock(PyTypeObject *defining_class)
{
    modstate *st = (modstate *)PyType_GetModuleState(defining_class);
    if (st != NULL && st->exec_lock == NULL)
        PyErr_SetString(PyExc_SystemError, "the module has no execution lock");
    return st == NULL ? NULL : st->exec_lock;
}

PyObject *
module_process(PyTypeObject *defining_class)
{
    modstate *st = (modstate *)PyType_GetModuleState(defining_class);
    if (st != NULL && st->process == NULL)
        PyErr_SetString(PyExc_SystemError, "the module has no PROCESS");
    return st == NULL ? NULL : st->process;
}

static struct PyModuleDef reactor_module;

PyObject *
process_of(PyObject *o)
{
    PyObject *m = PyType_GetModuleByDef(Py_TYPE(o), &reactor_module);
    modstate *st = m == NULL ? NULL : (modstate *)PyModule_GetState(m);
    if (st != NULL && st->process == NULL)
        PyErr_SetString(PyExc_SystemError, "the module has no PROCESS");
    return st == NULL ? NULL : st->process;
}

alloc_shape **
module_alloc_shape(PyObject *process)
{
    PyObject *m = PyType_GetModuleByDef(Py_TYPE(process), &reactor_module);
    modstate *st = m == NULL ? NULL : (modstate *)PyModule_GetState(m);
    return st == NULL ? NULL : &st->shape;
}

/* -- LoopQueue --------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    qcore *core;
} LoopQueue;

static PyObject *
LoopQueue_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, ":LoopQueue", kwlist))
        return NULL;
    LoopQueue *self = (LoopQueue *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    if ((self->core = qcore_new()) == NULL) {
        PyErr_SetFromErrno(PyExc_OSError);
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

static void
LoopQueue_dealloc(LoopQueue *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    if (self->core != NULL) {
        /* Entries nobody took are discarded; slots still armed to this queue keep the
         * core alive and report to the reactor's orphan queue from now on. */
        qcore_discard(self->core);
        qcore_decref(self->core);
    }
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static PyObject *
LoopQueue_fileno(LoopQueue *self, PyObject *Py_UNUSED(ignored))
{
    int fd = qcore_fileno(self->core);
    if (fd < 0) {
        PyErr_SetString(PyExc_ValueError, "fileno() on a closed LoopQueue");
        return NULL;
    }
    return PyLong_FromLong(fd);
}

static PyObject *
u32_list(const uint32_t *v, size_t n)
{
    PyObject *list = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; list != NULL && i < n; i++) {
        PyObject *x = PyLong_FromUnsignedLong(v[i]);
        if (x == NULL)
            Py_CLEAR(list);
        else
            PyList_SET_ITEM(list, (Py_ssize_t)i, x);
    }
    return list;
}

/* (completed, stale) as lists; NULL with MemoryError if any allocation fails */
static PyObject *
pair_of_lists(const uint32_t *done, size_t nd, const uint32_t *stale, size_t ns)
{
    PyObject *result = NULL, *dl = u32_list(done, nd), *sl = NULL;
    if (dl != NULL && (sl = u32_list(stale, ns)) != NULL)
        result = PyTuple_Pack(2, dl, sl);
    Py_XDECREF(dl);
    Py_XDECREF(sl);
    return result;
}

#define DRAIN_INLINE 128

/* The lists are built between the two halves of the take, outside the queue mutex;
 * if that fails, the entries stay queued and signalled (queue.c). */
static PyObject *
LoopQueue_drain(LoopQueue *self, PyObject *Py_UNUSED(ignored))
{
    uint32_t buf[DRAIN_INLINE];
    qtake t;
    switch (qcore_take_begin(self->core, buf, DRAIN_INLINE, &t)) {
    case TAKE_CLOSED:
        PyErr_SetString(PyExc_ValueError, "drain() on a closed LoopQueue");
        return NULL;
    case TAKE_NOMEM:
        return PyErr_NoMemory();
    }
    PyObject *result = pair_of_lists(t.v, t.nd, t.v + t.nd, t.ns);
    if (!qcore_take_end(self->core, &t, result != NULL) && result != NULL)
        Py_SETREF(result, pair_of_lists(NULL, 0, NULL, 0)); /* close() returned them */
    return result;
}

static PyObject *
LoopQueue_close(LoopQueue *self, PyObject *Py_UNUSED(ignored))
{
    u32vec done, stale;
    qcore_close_take(self->core, &done, &stale);
    PyObject *result = pair_of_lists(done.v, done.n, stale.v, stale.n);
    if (result == NULL) {
        qcore_untake(self->core, &done, &stale); /* for a later close() */
        return NULL;
    }
    u32vec_free(&done);
    u32vec_free(&stale);
    return result;
}

static PyObject *
LoopQueue_get_pending(LoopQueue *self, void *Py_UNUSED(closure))
{
    return PyLong_FromSize_t(qcore_pending(self->core)); /* lock-free */
}

static PyMethodDef LoopQueue_methods[] = {
    {"fileno", (PyCFunction)LoopQueue_fileno, METH_NOARGS,
     "fileno($self, /)\n--\n\nThe fd to watch for readability (eventfd; a pipe's read end off Linux)."},
    {"drain", (PyCFunction)LoopQueue_drain, METH_NOARGS,
     "drain($self, /)\n--\n\n"
     "Clear the fd, then pop every pending entry: (completed, stale) lists of slot ids. On "
     "MemoryError nothing is popped."},
    {"close", (PyCFunction)LoopQueue_close, METH_NOARGS,
     "close($self, /)\n--\n\n"
     "Close the fd and pop the entries still pending, atomically with closing: (completed, "
     "stale) lists of slot ids; later calls return empty lists. Slots still armed to this "
     "queue report to the reactor's orphan queue from now on."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef LoopQueue_getset[] = {
    {"pending", (getter)LoopQueue_get_pending, NULL, "entries waiting to be drained", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot LoopQueue_slots[] = {
    {Py_tp_new, (void *)LoopQueue_new},
    {Py_tp_dealloc, (void *)LoopQueue_dealloc},
    {Py_tp_methods, LoopQueue_methods},
    {Py_tp_getset, LoopQueue_getset},
    {Py_tp_doc, (void *)"LoopQueue()\n--\n\nPer-event-loop completion queue with an eventfd wake-up."},
    {0, NULL},
};

static PyType_Spec LoopQueue_spec = {
    .name = "cuasync._reactor.LoopQueue",
    .basicsize = sizeof(LoopQueue),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = LoopQueue_slots,
};

/* -- Reactor ----------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    reactor r;
} Reactor;

static PyObject *
Reactor_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"address",        "nslots",  "stale_ns",
                             "stale_max_ns",   "spin_ns", "backoff_max_ns",
                             "long_ns",        "long_backoff_max_ns", NULL};
    unsigned long long address = 0;
    Py_ssize_t nslots = 0;
    long long o[6] = {2000000, 50000000, 50000, 200000, 10000000, 2000000}; /* defaults */
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O&n|$LLLLLL:Reactor", kwlist, conv_u64,
                                     &address, &nslots, &o[0], &o[1], &o[2], &o[3], &o[4],
                                     &o[5]))
        return NULL;
    char hex[24]; /* PyErr_Format has no %llx before 3.12 */
    snprintf(hex, sizeof hex, "0x%llx", address);
    if (address == 0 || (address & 3u) != 0) {
        PyErr_Format(PyExc_ValueError,
                     "address must be a non-zero, 4-byte aligned host address, got %s", hex);
        return NULL;
    }
    if (nslots <= 0 || nslots > INT32_MAX) {
        PyErr_Format(PyExc_ValueError, "nslots must be in [1, 2**31), got %zd", nslots);
        return NULL;
    }
    if (address > (unsigned long long)(UINTPTR_MAX - 4 * (uintptr_t)nslots)) {
        PyErr_Format(PyExc_ValueError, "a slab of %zd words does not fit at %s", nslots, hex);
        return NULL;
    }
    for (int i = 0; i < 6; i++) {
        if (o[i] < 0) {
            PyErr_Format(PyExc_ValueError, "%s must be >= 0, got %lld", kwlist[i + 2], o[i]);
            return NULL;
        }
    }
    reactor_params p = {(uint64_t)o[0], (uint64_t)o[1], (uint64_t)o[2],
                        (uint64_t)o[3], (uint64_t)o[4], (uint64_t)o[5]};
    Reactor *self = (Reactor *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    if (reactor_init(&self->r, (_Atomic uint32_t *)(uintptr_t)address, (uint32_t)nslots, &p) <
            0 ||
        slab_register(self, (uintptr_t)address, (uintptr_t)address + 4 * (uintptr_t)nslots) <
            0) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    return (PyObject *)self;
}

static void
Reactor_dealloc(Reactor *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    slab_unregister(self);
    /* The thread never needs the GIL, so joining while holding it cannot deadlock;
     * it takes at most one sleep of the thread. */
    reactor_destroy(&self->r);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static int
parse_slot(Reactor *self, PyObject *o, uint32_t *slot)
{
    long long v = -1;
    int failed = get_i64(o, &v) < 0;
    if (failed && !PyErr_ExceptionMatches(PyExc_OverflowError))
        return -1;
    if (failed || v < 0 || v >= (long long)self->r.nslots) {
        PyErr_Clear();
        if (failed)
            PyErr_Format(PyExc_ValueError, "slot must be in [0, %u), got a larger int",
                         self->r.nslots);
        else
            PyErr_Format(PyExc_ValueError, "slot must be in [0, %u), got %lld", self->r.nslots,
                         v);
        return -1;
    }
    *slot = (uint32_t)v;
    return 0;
}

/* the core of a LoopQueue argument; NULL with TypeError for anything else */
static qcore *
queue_core(Reactor *self, PyObject *o, const char *what)
{
    modstate *st = (modstate *)PyType_GetModuleState(Py_TYPE(self));
    if (st == NULL)
        return NULL;
    if (!PyObject_TypeCheck(o, st->queue_type)) {
        PyErr_Format(PyExc_TypeError, "%s must be a LoopQueue, not %.100s", what,
                     Py_TYPE(o)->tp_name);
        return NULL;
    }
    return ((LoopQueue *)o)->core;
}

/* METH_FASTCALL: arm() runs on every await that suspends (see driver.c) */
static PyObject *
Reactor_arm(Reactor *self, PyObject *const *args, Py_ssize_t nargs)
{
    uint32_t slot, expected;
    qcore *q;
    unsigned long long quiet_until = 0;
    int thread_err = 0, watched = 0;
    if (nargs < 3 || nargs > 5) {
        PyErr_Format(PyExc_TypeError, "arm() takes 3 to 5 arguments (%zd given)", nargs);
        return NULL;
    }
    if (parse_slot(self, args[0], &slot) < 0 || get_u32(args[1], "expected", &expected) < 0 ||
        (q = queue_core(self, args[2], "queue")) == NULL)
        return NULL;
    if (nargs == 5 && (watched = PyObject_IsTrue(args[4])) < 0)
        return NULL;
    if (nargs >= 4) {
        PyObject *n = PyNumber_Index(args[3]);
        if (n == NULL)
            return NULL;
        quiet_until = PyLong_AsUnsignedLongLong(n); /* OverflowError if negative */
        Py_DECREF(n);
        if (quiet_until == (unsigned long long)-1 && PyErr_Occurred())
            return NULL;
    }
    switch (reactor_arm(&self->r, slot, expected, q, quiet_until, watched, &thread_err)) {
    case ARM_OK:
        Py_RETURN_NONE;
    case ARM_CLOSED:
        PyErr_SetString(PyExc_RuntimeError, "the Reactor is closed");
        return NULL;
    case ARM_BUSY:
        PyErr_Format(PyExc_RuntimeError, "slot %u is already armed", slot);
        return NULL;
    case ARM_NOMEM:
        return PyErr_NoMemory();
    default:
        errno = thread_err;
        PyErr_SetFromErrno(PyExc_RuntimeError);
        return NULL;
    }
}

static PyObject *
Reactor_disarm(Reactor *self, PyObject *arg)
{
    uint32_t slot;
    if (parse_slot(self, arg, &slot) < 0)
        return NULL;
    return PyBool_FromLong(reactor_disarm(&self->r, slot));
}

/* set_orphan_queue and set_stale_queue: an open LoopQueue, or None */
static PyObject *
set_queue(Reactor *self, PyObject *arg, const char *what, int (*set)(reactor *, qcore *))
{
    qcore *q = NULL;
    if (arg != Py_None && (q = queue_core(self, arg, what)) == NULL)
        return NULL;
    if (q != NULL && qcore_is_closed(q)) {
        PyErr_Format(PyExc_ValueError, "%s must be open, got a closed LoopQueue", what);
        return NULL;
    }
    if (set(&self->r, q) < 0 && q != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "the Reactor is closed");
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *
Reactor_set_orphan_queue(Reactor *self, PyObject *arg)
{
    return set_queue(self, arg, "the orphan queue", reactor_set_orphan);
}

static PyObject *
Reactor_set_stale_queue(Reactor *self, PyObject *arg)
{
    return set_queue(self, arg, "the stale queue", reactor_set_stale_queue);
}

static PyObject *
Reactor_close(Reactor *self, PyObject *Py_UNUSED(ignored))
{
    slab_unregister(self);
    Py_BEGIN_ALLOW_THREADS
    reactor_shutdown(&self->r);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyObject *
Reactor_get_armed(Reactor *self, void *Py_UNUSED(closure))
{
    return PyLong_FromSize_t(reactor_narmed(&self->r));
}

static PyObject *
Reactor_get_parked(Reactor *self, void *Py_UNUSED(closure))
{
    return PyBool_FromLong(atomic_load_explicit(&self->r.parked, memory_order_acquire));
}

#define COUNTER(name)                                                                      \
    static PyObject *Reactor_get_##name(Reactor *self, void *Py_UNUSED(closure))           \
    {                                                                                      \
        return PyLong_FromUnsignedLongLong(                                                \
            atomic_load_explicit(&self->r.name, memory_order_relaxed));                    \
    }
COUNTER(wakeups)
COUNTER(completed)
COUNTER(stale_reports)
COUNTER(dropped)
COUNTER(scans)
COUNTER(backoff_ns)

static PyMethodDef Reactor_methods[] = {
    {"arm", (PyCFunction)(void (*)(void))Reactor_arm, METH_FASTCALL,
     "arm($self, slot, expected, queue, quiet_until=0, watched=False, /)\n--\n\n"
     "Watch slot until (int32)(word - expected) >= 0, then push it onto queue (pushed at once "
     "if already reached). quiet_until: a time.monotonic_ns() before which the slot need not "
     "be scanned for (its loop's early wake watches it; while every armed slot is quiet the "
     "thread neither spins nor scans; at most a minute ahead: a later time is taken as that). "
     "watched: the loop's early wake looks at the slot before quiet_until and arms it again "
     "if it has not landed: a parked or napping thread is not woken for it. ValueError: slot "
     "out of range; RuntimeError: already "
     "armed or closed; TypeError: queue is not a LoopQueue."},
    {"disarm", (PyCFunction)Reactor_disarm, METH_O,
     "disarm($self, slot, /)\n--\n\nStop watching slot without notifying; True if it was armed."},
    {"set_orphan_queue", (PyCFunction)Reactor_set_orphan_queue, METH_O,
     "set_orphan_queue($self, queue, /)\n--\n\n"
     "Reports of slots armed to a closed queue go to queue instead (None: they are dropped "
     "and counted in dropped)."},
    {"set_stale_queue", (PyCFunction)Reactor_set_stale_queue, METH_O,
     "set_stale_queue($self, queue, /)\n--\n\n"
     "Every stale report goes to queue while it is open, so that the queues slots are armed "
     "to are woken only by completions (None: each slot's own queue, the default)."},
    {"close", (PyCFunction)Reactor_close, METH_NOARGS,
     "close($self, /)\n--\n\nStop and join the thread (GIL released), drop all armed slots and "
     "unregister the slab; idempotent."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Reactor_getset[] = {
    {"armed", (getter)Reactor_get_armed, NULL, "number of armed slots", NULL},
    {"parked", (getter)Reactor_get_parked, NULL, "whether the thread is parked", NULL},
    {"wakeups", (getter)Reactor_get_wakeups, NULL,
     "times an arm had to wake the thread (from parked, or from a long nap)", NULL},
    {"completed", (getter)Reactor_get_completed, NULL, "completions pushed", NULL},
    {"stale_reports", (getter)Reactor_get_stale_reports, NULL, "stale reports pushed", NULL},
    {"dropped", (getter)Reactor_get_dropped, NULL,
     "armed slots dropped because their queue was closed and no orphan queue was open", NULL},
    {"scans", (getter)Reactor_get_scans, NULL, "passes over the armed slots", NULL},
    {"backoff_ns", (getter)Reactor_get_backoff_ns, NULL,
     "the thread's current sleep between scans (0 while spinning or parked)", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot Reactor_slots[] = {
    {Py_tp_new, (void *)Reactor_new},
    {Py_tp_dealloc, (void *)Reactor_dealloc},
    {Py_tp_methods, Reactor_methods},
    {Py_tp_getset, Reactor_getset},
    {Py_tp_doc, (void *)"Reactor(address, nslots, *, stale_ns=2_000_000, "
                        "stale_max_ns=50_000_000, spin_ns=50_000, backoff_max_ns=200_000, "
                        "long_ns=10_000_000, long_backoff_max_ns=2_000_000)\n--\n\n"
                        "Watches armed uint32 flag words of a host slab on one native thread."},
    {0, NULL},
};

static PyType_Spec Reactor_spec = {
    .name = "cuasync._reactor.Reactor",
    .basicsize = sizeof(Reactor),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = Reactor_slots,
};

/* -- Submitter --------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    subcore *core; /* NULL once closed */
    PyObject *reactor; /* the Reactor whose slab holds the flags */
    uint32_t nslots;
} Submitter;

static PyObject *
Submitter_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"reactor", "capacity", "spin_ns", NULL};
    PyObject *reactor_obj;
    Py_ssize_t capacity = 16384;
    long long spin_ns = 50000;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|$nL:Submitter", kwlist, &reactor_obj,
                                     &capacity, &spin_ns))
        return NULL;
    modstate *st = (modstate *)PyType_GetModuleState(type);
    if (st == NULL)
        return NULL;
    if (!PyObject_TypeCheck(reactor_obj, st->reactor_type)) {
        PyErr_Format(PyExc_TypeError, "reactor must be a Reactor, not %.100s",
                     Py_TYPE(reactor_obj)->tp_name);
        return NULL;
    }
    if (capacity < 1 || capacity > 65536) {
        PyErr_Format(PyExc_ValueError, "capacity must be in [1, 65536], got %zd", capacity);
        return NULL;
    }
    if (spin_ns < 0) {
        PyErr_SetString(PyExc_ValueError, "spin_ns must be >= 0");
        return NULL;
    }
    sub_entry entry = driver_entry_points();
    if (!entry.launch_kernel || !entry.write_value32 || !entry.ctx_set_current ||
        !entry.stream_synchronize) {
        PyErr_SetString(PyExc_RuntimeError,
                        "a Submitter needs the launch_kernel, write_value32, ctx_set_current "
                        "and stream_synchronize entry points (call set_entry_points)");
        return NULL;
    }
    reactor *r = &((Reactor *)reactor_obj)->r;
    Submitter *self = (Submitter *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->core = subcore_new(r->words, r->nslots, (uint32_t)capacity, (uint64_t)spin_ns, &entry);
    if (self->core == NULL) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    self->reactor = Py_NewRef(reactor_obj);
    self->nslots = r->nslots;
    return (PyObject *)self;
}

/* Never blocks for long: a thread still in the driver after 0.1 s is left to finish. */
static void
Submitter_close_core(Submitter *self, uint64_t timeout_ns)
{
    subcore *c = self->core;
    if (c == NULL)
        return;
    self->core = NULL;
    Py_BEGIN_ALLOW_THREADS
    subcore_close(c, timeout_ns);
    Py_END_ALLOW_THREADS
    subcore_drop(c);
}

static void
Submitter_dealloc(Submitter *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    Submitter_close_core(self, 100000000);
    Py_CLEAR(self->reactor);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static int
Submitter_traverse(Submitter *self, visitproc visit, void *arg)
{
    Py_VISIT(self->reactor);
    Py_VISIT(Py_TYPE(self));
    return 0;
}

static subcore *
open_core(Submitter *self)
{
    if (self->core == NULL)
        PyErr_SetString(PyExc_RuntimeError, "the Submitter is closed");
    return self->core;
}

static int
parse_sub_slot(Submitter *self, PyObject *o, uint32_t *slot)
{
    if (get_u32(o, "slot", slot) < 0)
        return -1;
    if (*slot >= self->nslots) {
        PyErr_Format(PyExc_ValueError, "slot must be in [0, %u), got %u", self->nslots, *slot);
        return -1;
    }
    return 0;
}

/* METH_FASTCALL: push() runs for every launch of a burst */
static PyObject *
Submitter_push(Submitter *self, PyObject *const *args, Py_ssize_t nargs)
{
    subcore *c = open_core(self);
    if (c == NULL || check_nargs("push", nargs, 14) < 0)
        return NULL;
    launch_config cfg;
    unsigned long long context;
    const char *recs;
    Py_ssize_t n;
    sub_rec rec;
    if (get_launch_config(args, &cfg) < 0 || get_u64(args[9], &context) < 0 ||
        check_layout(args[10], args[11], &recs, &n) < 0 ||
        parse_sub_slot(self, args[12], &rec.slot) < 0 ||
        get_u32(args[13], "value", &rec.value) < 0)
        return NULL;
    if (n > SUB_PARAMS_MAX || layout_extent(recs, n) > SUB_BLOCK_MAX)
        return PyLong_FromLong(-1); /* too many or too large parameters: the caller's */
    _Alignas(16) unsigned char block[PARAM_BLOCK_MAX];
    void *slots[PARAM_COUNT_MAX];
    if (pack_params(recs, n, args[11], block, slots) < 0)
        return NULL;
    rec.function = (uintptr_t)cfg.function;
    rec.stream = (uintptr_t)cfg.stream;
    rec.context = (uintptr_t)context;
    rec.gx = cfg.gx, rec.gy = cfg.gy, rec.gz = cfg.gz;
    rec.bx = cfg.bx, rec.by = cfg.by, rec.bz = cfg.bz;
    rec.shmem = cfg.shmem;
    rec.nparams = (uint32_t)n;
    for (Py_ssize_t i = 0; i < n; i++)
        rec.offsets[i] = (uint16_t)((unsigned char *)slots[i] - block);
    memcpy(rec.block, block, SUB_BLOCK_MAX);
    int thread_err = 0;
    uint64_t ticket = 0;
    switch (subcore_push(c, &rec, &ticket, &thread_err)) {
    case SUB_OK:
        return PyLong_FromUnsignedLongLong(ticket);
    case SUB_FULL:
        return PyLong_FromLong(-1);
    case SUB_CLOSED:
        PyErr_SetString(PyExc_RuntimeError, "the Submitter is closed");
        return NULL;
    default:
        errno = thread_err;
        PyErr_SetFromErrno(PyExc_RuntimeError);
        return NULL;
    }
}

static PyObject *
Submitter_status(Submitter *self, PyObject *arg)
{
    uint32_t slot;
    subcore *c = open_core(self);
    if (c == NULL || parse_sub_slot(self, arg, &slot) < 0)
        return NULL;
    return PyLong_FromLong(subcore_status(c, slot));
}

static PyObject *
Submitter_fence(Submitter *self, PyObject *Py_UNUSED(ignored))
{
    subcore *c = self->core;
    if (c == NULL || subcore_pending(c) == 0) /* the path of every fenced driver call */
        Py_RETURN_NONE;
    subcore_retain(c); /* (a close() on another thread meanwhile drops the object's) */
    Py_BEGIN_ALLOW_THREADS
    subcore_fence(c);
    Py_END_ALLOW_THREADS
    subcore_drop(c);
    Py_RETURN_NONE;
}

static PyObject *
Submitter_close(Submitter *self, PyObject *const *args, Py_ssize_t nargs)
{
    double timeout = 1.0;
    if (nargs > 1) {
        PyErr_Format(PyExc_TypeError, "close() takes at most 1 argument (%zd given)", nargs);
        return NULL;
    }
    if (nargs == 1 && (timeout = PyFloat_AsDouble(args[0])) == -1.0 && PyErr_Occurred())
        return NULL;
    if (!(timeout >= 0)) {
        PyErr_SetString(PyExc_ValueError, "timeout must be >= 0 seconds");
        return NULL;
    }
    subcore *c = self->core;
    if (c == NULL)
        Py_RETURN_TRUE;
    self->core = NULL;
    int drained;
    Py_BEGIN_ALLOW_THREADS
    drained = subcore_close(c, (uint64_t)(timeout * 1e9));
    Py_END_ALLOW_THREADS
    subcore_drop(c);
    return PyBool_FromLong(drained);
}

static PyObject *
Submitter_get_pending(Submitter *self, void *Py_UNUSED(closure))
{
    return PyLong_FromUnsignedLongLong(self->core ? subcore_pending(self->core) : 0);
}

static PyObject *
Submitter_get_done(Submitter *self, void *Py_UNUSED(closure))
{
    return PyLong_FromUnsignedLongLong(self->core ? subcore_done(self->core) : UINT64_MAX);
}

static PyObject *
Submitter_get_counter(Submitter *self, void *closure)
{
    uint64_t v[3] = {0, 0, 0};
    if (self->core != NULL)
        subcore_counters(self->core, &v[0], &v[1], &v[2]);
    return PyLong_FromUnsignedLongLong(v[(intptr_t)closure]);
}

static PyObject *
Submitter_get_closed(Submitter *self, void *Py_UNUSED(closure))
{
    return PyBool_FromLong(self->core == NULL);
}

static PyMethodDef Submitter_methods[] = {
    {"push", (PyCFunction)(void (*)(void))Submitter_push, METH_FASTCALL,
     "push($self, function, gx, gy, gz, bx, by, bz, shared_mem, stream, context, layout, args, "
     "slot, value, /)\n--\n\n"
     "Queue a launch (parameters packed now, as launch_packed packs them) and its flag: the "
     "slot's slab word, written with value after the launch. Returns its ticket (the records "
     "pushed before it: it is launched once done > ticket), or -1 when the queue is full or "
     "the parameters are too large (more than 16, or past 256 bytes): the caller launches "
     "it. The thread makes context current, launches on stream and writes the flag; a "
     "failure stores its CUresult in status(slot) and writes the flag itself."},
    {"status", (PyCFunction)Submitter_status, METH_O,
     "status($self, slot, /)\n--\n\n"
     "The result of slot's last queued launch, once its flag reached its value: 0, the "
     "launch's (or cuCtxSetCurrent's) CUresult, or minus cuStreamWriteValue32's."},
    {"fence", (PyCFunction)Submitter_fence, METH_NOARGS,
     "fence($self, /)\n--\n\n"
     "Return once every launch queued before the call was made (GIL released while "
     "waiting); at once when none is queued."},
    {"close", (PyCFunction)(void (*)(void))Submitter_close, METH_FASTCALL,
     "close($self, timeout=1.0, /)\n--\n\n"
     "Stop the thread once it has launched what is queued, waiting up to timeout seconds "
     "(GIL released); False if it was still in the driver then (it finishes on its own). "
     "Later pushes raise RuntimeError; idempotent."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Submitter_getset[] = {
    {"pending", (getter)Submitter_get_pending, NULL, "launches queued and not yet made", NULL},
    {"done", (getter)Submitter_get_done, NULL,
     "records launched (or failed) so far, in push order: a push's ticket is done once this "
     "is past it (lock-free; 2**64 - 1 once closed)", NULL},
    {"launched", (getter)Submitter_get_counter, NULL, "launches made with their flag", (void *)0},
    {"failed", (getter)Submitter_get_counter, NULL,
     "launches (or flag writes) that failed: their status holds the CUresult", (void *)1},
    {"wakeups", (getter)Submitter_get_counter, NULL,
     "times a push woke the parked thread", (void *)2},
    {"closed", (getter)Submitter_get_closed, NULL, "whether close() was called", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot Submitter_slots[] = {
    {Py_tp_new, (void *)Submitter_new},
    {Py_tp_dealloc, (void *)Submitter_dealloc},
    {Py_tp_traverse, (void *)Submitter_traverse},
    {Py_tp_methods, Submitter_methods},
    {Py_tp_getset, Submitter_getset},
    {Py_tp_doc, (void *)"Submitter(reactor, *, capacity=16384, spin_ns=50_000)\n--\n\n"
                        "Makes queued kernel launches and their flag writes on a native "
                        "thread, in push order; flags are words of reactor's slab."},
    {0, NULL},
};

static PyType_Spec Submitter_spec = {
    .name = "cuasync._reactor.Submitter",
    .basicsize = sizeof(Submitter),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_HAVE_GC,
    .slots = Submitter_slots,
};

/* The fence of native launches: changed and read with the GIL held. */
static subcore *g_launch_fence;

subcore *
launch_fence(void)
{
    return g_launch_fence;
}

static PyObject *
mod_set_launch_fence(PyObject *m, PyObject *arg)
{
    modstate *st = (modstate *)PyModule_GetState(m);
    if (st == NULL)
        return NULL;
    subcore *c = NULL;
    if (arg != Py_None) {
        if (!PyObject_TypeCheck(arg, st->submitter_type)) {
            PyErr_Format(PyExc_TypeError, "the launch fence must be a Submitter or None, not "
                         "%.100s", Py_TYPE(arg)->tp_name);
            return NULL;
        }
        if ((c = open_core((Submitter *)arg)) == NULL)
            return NULL;
        subcore_retain(c);
    }
    subcore *old = g_launch_fence;
    g_launch_fence = c;
    if (old != NULL)
        subcore_drop(old);
    Py_RETURN_NONE;
}

/* -- host signals ------------------------------------------------------------------ */

static PyObject *
mod_set_host_signal_queue(PyObject *m, PyObject *arg)
{
    modstate *st = (modstate *)PyModule_GetState(m);
    if (st == NULL)
        return NULL;
    qcore *q = NULL;
    if (arg != Py_None) {
        if (!PyObject_TypeCheck(arg, st->queue_type)) {
            PyErr_Format(PyExc_TypeError, "the host-signal queue must be a LoopQueue or None, "
                         "not %.100s", Py_TYPE(arg)->tp_name);
            return NULL;
        }
        q = ((LoopQueue *)arg)->core;
        if (qcore_is_closed(q)) {
            PyErr_SetString(PyExc_ValueError,
                            "the host-signal queue must be open, got a closed LoopQueue");
            return NULL;
        }
    }
    hostsig_set(q);
    Py_RETURN_NONE;
}

/* build_upload(array): from_host(array)'s op built in C (upload.c), or None. */
static PyObject *
mod_build_upload(PyObject *m, PyObject *array)
{
    modstate *st = (modstate *)PyModule_GetState(m);
    if (st == NULL || st->process == NULL) {
        PyErr_SetString(PyExc_SystemError, "the module has no PROCESS");
        return NULL;
    }
    return upload_build(st->process, array);
}

#ifdef __linux__
/* set_timer(fd, deadline_ns): a timerfd set to expire once at deadline_ns on
 * CLOCK_MONOTONIC (0: disarmed); False where the kernel refused (a closed fd). The bench's
 * bare timer wake sets its own with it (a loop's early-wake timer, timer.c, sets its fd
 * itself). */
static PyObject *
mod_set_timer(PyObject *Py_UNUSED(m), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "set_timer() takes 2 arguments (%zd given)", nargs);
        return NULL;
    }
    long fd = PyLong_AsLong(args[0]);
    if (fd == -1 && PyErr_Occurred())
        return NULL;
    unsigned long long at = PyLong_AsUnsignedLongLong(args[1]); /* OverflowError: < 0 */
    if (at == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    if (fd < 0 || fd > INT_MAX) {
        PyErr_Format(PyExc_ValueError, "fd must be a file descriptor, not %ld", fd);
        return NULL;
    }
    return PyBool_FromLong(set_timerfd((int)fd, at));
}
#endif

static PyMethodDef module_methods[] = {
#ifdef __linux__
    {"set_timer", (PyCFunction)(void (*)(void))mod_set_timer, METH_FASTCALL,
     "set_timer($module, fd, deadline_ns, /)\n--\n\n"
     "Set the timerfd fd to expire once at deadline_ns (time.monotonic_ns(); 0 disarms "
     "it); False where the kernel refused (a closed fd)."},
#endif
    {"build_upload", (PyCFunction)mod_build_upload, METH_O,
     "build_upload($module, array, /)\n--\n\n"
     "cuasync.from_host(array)'s op (a HostUploadOp), built in C for its common case (an "
     "ndarray of a known dtype, the default device, no debug origins); else None. It reads "
     "PROCESS's fields and the classes declared on the core types."},
    {"set_launch_fence", (PyCFunction)mod_set_launch_fence, METH_O,
     "set_launch_fence($module, submitter, /)\n--\n\n"
     "Make launch_and_write, launch_packed and write_value32 wait for the launches queued "
     "on submitter (a Submitter, or None for no fence) before they call the driver, so "
     "that stream order is push order."},
    {"set_host_signal_queue", (PyCFunction)mod_set_host_signal_queue, METH_O,
     "set_host_signal_queue($module, queue, /)\n--\n\n"
     "Make queue (a LoopQueue, or None) the one that HOST_SIGNAL_FN pushes its ids to."},
    {NULL, NULL, 0, NULL},
};

/* -- the module (multi-phase init) ------------------------------------------------- */

static int
module_exec(PyObject *m)
{
    modstate *st = (modstate *)PyModule_GetState(m);
    if (node_kinds_init() < 0)
        return -1;
    st->queue_type = (PyTypeObject *)PyType_FromModuleAndSpec(m, &LoopQueue_spec, NULL);
    st->reactor_type = (PyTypeObject *)PyType_FromModuleAndSpec(m, &Reactor_spec, NULL);
    st->submitter_type = (PyTypeObject *)PyType_FromModuleAndSpec(m, &Submitter_spec, NULL);
    /* the native op core: express.c, upload.c, alloc.c and launcher.c */
    static struct {
        const char *name;
        PyType_Spec *spec;
    } core_types[] = {
        {"Express", &Express_spec},         {"LaunchAwait", &LaunchAwait_spec},
        {"Launcher", &Launcher_spec},       {"KernelCore", &KernelCore_spec},
        {"ExecLock", &ExecLock_spec},
        {"CurrentOrdinal", &CurrentOrdinal_spec},
        {"SlotLedger", &SlotLedger_spec}, {"StreamCore", &StreamCore_spec},
        {"AllocationCore", &AllocationCore_spec}, {"TensorCore", &TensorCore_spec},
        {"PreparedCore", &PreparedCore_spec}, {"OpCore", &OpCore_spec},
        {"HubCore", &HubCore_spec}, {"BackendCore", &BackendCore_spec},
        {"ContextCore", &ContextCore_spec}, {"OutputCore", &OutputCore_spec},
        {"FutureCore", &FutureCore_spec}, {"CompletionCore", &CompletionCore_spec},
        {"NodeCore", &NodeCore_spec}, {"UploadWorkCore", &UploadWorkCore_spec},
        {"ReduceWorkCore", &ReduceWorkCore_spec},
        {"BlockCore", &BlockCore_spec}, {"WatchedCore", &WatchedCore_spec},
        {"AdapterCore", &AdapterCore_spec},
        {"ThreadFlags", &ThreadFlags_spec}, {"DeviceCore", &DeviceCore_spec},
        {"RoundRobinCore", &RoundRobinCore_spec}, {"SingleStreamCore", &SingleStreamCore_spec},
        {"ProcessCore", &ProcessCore_spec}, {"BlockCacheCore", &BlockCacheCore_spec},
        {"Memo", &Memo_spec}, {"OpNodes", &OpNodes_spec}, {"ElementwiseApply", &ElementwiseApply_spec},
        {"ExpressLaunches", &ExpressLaunches_spec}, {"Operator", &Operator_spec},
        {"ElementwiseFunction", &ElementwiseFunction_spec},
        {"ReduceApply", &ReduceApply_spec}, {"LtMatmul", &LtMatmul_spec},
        {"TensorSubmit", &TensorSubmit_spec},
        {"WakePolicyCore", &WakePolicyCore_spec}, {"Estimate", &Estimate_spec},
        {"Pending", &Pending_spec}, {"TimerCore", &TimerCore_spec},
        {"Suspension", &Suspension_spec}, {"FutureWaker", &FutureWaker_spec},
    };
    int express_added = 1;
    for (size_t i = 0; i < sizeof core_types / sizeof core_types[0] && express_added; i++) {
        PyObject *t = PyType_FromModuleAndSpec(m, core_types[i].spec, NULL);
        express_added = t != NULL && PyModule_AddObjectRef(m, core_types[i].name, t) == 0;
        Py_XDECREF(t);
    }
    /* the types under another: LaunchCore and TensorOpCore under OpCore, UploadOpCore
     * under TensorOpCore */
    static struct {
        const char *name, *base;
        PyType_Spec *spec;
    } derived[] = {
        {"LaunchCore", "OpCore", &LaunchCore_spec},
        {"TensorOpCore", "OpCore", &TensorOpCore_spec},
        {"UploadOpCore", "TensorOpCore", &UploadOpCore_spec},
    };
    for (size_t i = 0; i < sizeof derived / sizeof derived[0] && express_added; i++) {
        PyObject *base = PyObject_GetAttrString(m, derived[i].base);
        PyObject *t = base == NULL ? NULL : PyType_FromModuleAndSpec(m, derived[i].spec, base);
        express_added = t != NULL && PyModule_AddObjectRef(m, derived[i].name, t) == 0;
        Py_XDECREF(base);
        Py_XDECREF(t);
    }
    if (express_added &&
        (PyModule_AddFunctions(m, park_methods) < 0 || park_types_init(m) < 0))
        return -1;
    if (!express_added || st->queue_type == NULL || st->reactor_type == NULL ||
        st->submitter_type == NULL ||
        PyModule_AddObjectRef(m, "LoopQueue", (PyObject *)st->queue_type) < 0 ||
        PyModule_AddObjectRef(m, "Reactor", (PyObject *)st->reactor_type) < 0 ||
        PyModule_AddObjectRef(m, "Submitter", (PyObject *)st->submitter_type) < 0 ||
        PyModule_AddFunctions(m, cuasync_driver_methods) < 0 ||
        PyModule_AddFunctions(m, module_methods) < 0 ||
        PyModule_AddFunctions(m, dlpack_methods) < 0 ||
        PyModule_AddFunctions(m, cores_methods) < 0 ||
        PyModule_AddFunctions(m, plan_methods) < 0 ||
        PyModule_AddFunctions(m, wake_methods) < 0 ||
        PyModule_AddFunctions(m, launcher_methods) < 0)
        return -1;
    PyObject *fn = PyLong_FromVoidPtr((void *)hostsig_fn);
    int rc = fn == NULL ? -1 : PyModule_AddObjectRef(m, "HOST_SIGNAL_FN", fn);
    Py_XDECREF(fn);
    if (rc < 0)
        return -1;
    fn = PyLong_FromVoidPtr((void *)dlpack_capsule_destructor);
    rc = fn == NULL ? -1 : PyModule_AddObjectRef(m, "DLPACK_CAPSULE_DESTRUCTOR", fn);
    Py_XDECREF(fn);
    if (rc < 0)
        return -1;
    if (PyModule_AddStringConstant(m, "SOURCE_HASH", CUASYNC_SOURCE_HASH) < 0)
        return -1;
    /* the one execution lock (context.LOCK), which C code that is handed no lock (a
     * DLPack capsule's release) takes too */
    PyObject *lock_t = PyObject_GetAttrString(m, "ExecLock");
    st->exec_lock = lock_t == NULL ? NULL : PyObject_CallNoArgs(lock_t);
    Py_XDECREF(lock_t);
    if (st->exec_lock == NULL || PyModule_AddObjectRef(m, "EXEC_LOCK", st->exec_lock) < 0)
        return -1;
    /* the state an await reads (completion's hub, loops' last loop): Python owns the
     * values, the module the one object that holds them */
    PyObject *process_t = PyObject_GetAttrString(m, "ProcessCore");
    st->process = process_t == NULL ? NULL : PyObject_CallNoArgs(process_t);
    Py_XDECREF(process_t);
    if (st->process == NULL || PyModule_AddObjectRef(m, "PROCESS", st->process) < 0)
        return -1;
#ifdef CUASYNC_HAVE_EVENTFD
    return PyModule_AddIntConstant(m, "HAVE_EVENTFD", 1);
#else
    return PyModule_AddIntConstant(m, "HAVE_EVENTFD", 0);
#endif
}

static int
module_traverse(PyObject *m, visitproc visit, void *arg)
{
    modstate *st = (modstate *)PyModule_GetState(m);
    if (st != NULL) {
        Py_VISIT(st->queue_type);
        Py_VISIT(st->reactor_type);
        Py_VISIT(st->submitter_type);
        Py_VISIT(st->exec_lock);
        Py_VISIT(st->process);
        for (int i = 0; i < st->codes.n; i++)
            Py_VISIT(st->codes.dtype[i]);
        if (alloc_shape_traverse(st->shape, visit, arg) != 0)
            return -1;
    }
    return 0;
}

static int
module_clear(PyObject *m)
{
    modstate *st = (modstate *)PyModule_GetState(m);
    if (st != NULL) {
        Py_CLEAR(st->queue_type);
        Py_CLEAR(st->reactor_type);
        Py_CLEAR(st->submitter_type);
        Py_CLEAR(st->exec_lock);
        Py_CLEAR(st->process);
        alloc_shape_free(st->shape);
        st->shape = NULL;
        for (int i = 0; i < st->codes.n; i++)
            Py_CLEAR(st->codes.dtype[i]);
        st->codes.n = 0;
    }
    return 0;
}

static void
module_free(void *m)
{
    module_clear((PyObject *)m);
}

static PyModuleDef_Slot module_slots[] = {
    {Py_mod_exec, (void *)module_exec},
/* (one interpreter: the classes the core makes, the wake's policy and estimates, the
 * launch fence and the live slabs are process-wide; a subinterpreter's import fails
 * rather than share them under another GIL) */
#ifdef Py_mod_multiple_interpreters
    {Py_mod_multiple_interpreters, Py_MOD_MULTIPLE_INTERPRETERS_NOT_SUPPORTED},
#endif
/* (no Py_mod_gil: the native op core relies on the GIL for the lists and slots it
 * reads, so a free-threaded build re-enables the GIL when it imports this module) */
    {0, NULL},
};

static struct PyModuleDef reactor_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "cuasync._reactor",
    .m_doc = "Native completion reactor of cuasync: watches pinned-host flag words written by "
             "cuStreamWriteValue32 and wakes event loops through eventfds.",
    .m_size = sizeof(modstate),
    .m_slots = module_slots,
    .m_traverse = module_traverse,
    .m_clear = module_clear,
    .m_free = module_free,
};

PyMODINIT_FUNC
PyInit__reactor(void)
{
    return PyModuleDef_Init(&reactor_module);
}
