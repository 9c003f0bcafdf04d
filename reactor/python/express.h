/*
 * What the native op core's files share (express.c: launches, upload.c: small uploads):
 * the Express object, the submission modes, and the small helpers both use. Included
 * after Python.h and module.h.
 */
#ifndef CUASYNC_EXPRESS_H
#define CUASYNC_EXPRESS_H

#include <structmember.h>

#include "cores.h"
#include "ledger.h"

/* (MODE_FUTURE: Express.submit's, a launch with no spin whose future is made here;
 * MODE_BURST: an await in a burst, its launch queued for the submitter, no spin) */
enum { MODE_NO_SPIN = 0, MODE_AWAIT = 1, MODE_BLOCK = 2, MODE_FUTURE = 3, MODE_BURST = 4 };

/* the raised exception, kept while the failure handler runs (3.11 has no
 * PyErr_GetRaisedException) */
typedef struct {
    PyObject *type, *value, *tb;
} saved_error;

static inline void
save_error(saved_error *e)
{
    PyErr_Fetch(&e->type, &e->value, &e->tb);
}

static inline void
restore_error(saved_error *e)
{
    PyErr_Restore(e->type, e->value, e->tb);
}

/* Small uploads the core takes (upload.c): sources of at most UPLOAD_MAX bytes, staged
 * in pinned blocks of 2**UPLOAD_MIN_CLASS bytes and up (the staging pool's classes), at
 * most UPLOAD_KEEP idle blocks kept per class. */
#define UPLOAD_MAX (64 * 1024)
#define UPLOAD_MIN_CLASS 12
#define UPLOAD_CLASSES 5
#define UPLOAD_KEEP 4

/* (alloc_shape, what the native fast paths of Allocation read: cores.h) */

typedef struct {
    PyObject_HEAD
    PyObject *hub, *backend, *stats, *memops; /* hub: a HubCore, backend a BackendCore */
    PyObject *lock; /* the module's EXEC_LOCK (an ExecLock) */
    PyObject *process; /* the module's PROCESS (a ProcessCore) */
    SlotLedger *slots; /* hub.slots: the only owner of the slab's slots */
    PyObject *box_type, *generic, *spin_us, *failed, *abandon, *one, *minus_one;
    PyObject *no_args;
    /* interned names of numpy's attributes it reads (a foreign type's API) */
    PyObject *s_itemsize, *s_shape;
    unsigned long long launches, native_launches, declined, completed_inline;
    unsigned long long burst_awaits, burst_queued, burst_handed_over, parked_at_once;
    /* a small upload's (upload.c): the lease type, idle pinned staging blocks by size
     * class */
    PyObject *lease_t;
    PyObject *blocks[UPLOAD_CLASSES];
    unsigned long long uploads, staging_reuses;
    PyObject *dims_grid, *dims_block; /* the last launch's grid and block tuples, */
    unsigned int dims[6];             /* read: a Launcher's are the same objects */
} Express;

/* An attribute's truth: 1, 0, or -1 with an error set. */
static inline int
attr_true(PyObject *o, PyObject *name)
{
    PyObject *v = PyObject_GetAttr(o, name);
    if (v == NULL)
        return -1;
    int t = v == Py_True ? 1 : v == Py_False ? 0 : PyObject_IsTrue(v);
    Py_DECREF(v);
    return t;
}

long current_ordinal_of(PyObject *o);

/* An await's loop adapter's long_ops (the adapter an AdapterCore): 1, 0, or -1 with a
 * TypeError. */
static inline int
adapter_long_ops(PyObject *adapter)
{
    if (!is_adapter(adapter)) {
        PyErr_Format(PyExc_TypeError, "an await's loop adapter must be an AdapterCore, not %.100s",
                     Py_TYPE(adapter)->tp_name);
        return -1;
    }
    return ADAPTER(adapter)->long_ops;
}

/* What every launch reads of the hub and the backend (their native base types' fields)
 * and the tracing switch: *allows, 1 when flag slots are in use, tracing is off and no
 * fault was seen (the core's case); then new references in *fast (the backend's native
 * launch, or None), *current (its current-context record, or None) and *budget (the
 * spin budget). 0, or -1 with an error set. */
static inline int
launch_state(Express *self, int *allows, PyObject **fast, PyObject **current, PyObject **budget)
{
    HubCore *hub = HUB(self->hub);
    BackendCore *backend = BACKEND(self->backend);
    *fast = *current = *budget = NULL;
    *allows = hub->use_reactor && !cuasync_tracing && !backend->fault_seen;
    if (!*allows)
        return 0;
    if (hub->spin_budget_us == NULL) {
        PyErr_SetString(PyExc_AttributeError, "the hub has no spin_budget_us");
        return -1;
    }
    *fast = Py_NewRef(backend->fast_launch != NULL ? backend->fast_launch : Py_None);
    *current = Py_NewRef(backend->current != NULL ? backend->current : Py_None);
    *budget = Py_NewRef(hub->spin_budget_us);
    return 0;
}

/* launch_state's *allows alone (an upload's check): 1, 0, never an error. */
static inline int
state_allows(Express *self)
{
    return HUB(self->hub)->use_reactor && !cuasync_tracing && !BACKEND(self->backend)->fault_seen;
}

/* The hub's spin budget: a new reference, or NULL with an error set. */
static inline PyObject *
state_budget(Express *self)
{
    PyObject *budget = HUB(self->hub)->spin_budget_us;
    if (budget == NULL)
        PyErr_SetString(PyExc_AttributeError, "the hub has no spin_budget_us");
    return Py_XNewRef(budget);
}

/* express._settle for work that landed within its spin, done in C: the stream's
 * completed number, the slot back on the free list, the counter (Hub.snapshot adds it to
 * stats().completed_inline). 0, or -1 with the error set (the slot not given back). */
static inline int
settle_inline(Express *self, PyObject *stream, Py_ssize_t slot, long long seqv, PyObject *seq)
{
    PyObject *completed = STREAM(stream)->completed;
    long long done = completed == NULL || !PyLong_CheckExact(completed)
                         ? LLONG_MIN : PyLong_AsLongLong(completed);
    if (done == -1 && PyErr_Occurred())
        return -1; /* (a completed number past 2**63: the slot stays out) */
    if (done < seqv)
        field_set(&STREAM(stream)->completed, Py_NewRef(seq));
    if (ledger_release(self->slots, slot) < 0)
        return -1;
    self->completed_inline++;
    return 0;
}

static inline PyObject *
generic(Express *self)
{
    self->declined++;
    return Py_NewRef(self->generic);
}

/* the lock's acquire(False) / release() */
int exec_lock_try(PyObject *o);
void exec_lock_release(PyObject *o);
int is_exec_lock(PyObject *o);

/* The execution lock (an ExecLock) without a method call: 1 taken, 0 held elsewhere. */
static inline int
try_lock(Express *self)
{
    return exec_lock_try(self->lock);
}

/* 0 (releasing an ExecLock cannot fail). */
static inline int
unlock(Express *self)
{
    exec_lock_release(self->lock);
    return 0;
}

/* unlock() with an error already set: that error stays. */
static inline void
unlock_keeping_error(Express *self)
{
    unlock(self);
}

/* Native fast paths of Allocation (alloc.c): what they read, and a small upload's
 * allocation from the block cache (Py_None: not the case, the caller calls Allocation). */
PyObject *alloc_small(alloc_shape *a, PyObject *device, Py_ssize_t nbytes, PyObject *stream,
                      PyObject *seq, PyObject *pool_var);

/* The execution lock and a free completion slot claimed from the ledger: 1 both taken
 * (the lock held; *slot a new reference to the slot's number, *s, *gen and *address
 * the claim's); 0 not the core's case (the lock held elsewhere, no free slot, a capture
 * begun meanwhile: nothing held, *result the generic sentinel); -1 an error (nothing
 * held, *result NULL). */
int lock_and_claim(Express *self, PyObject *stream, PyObject **slot, Py_ssize_t *s,
                   uint32_t *gen, uintptr_t *address, PyObject **result);

/* A claimed slot given back when nothing was enqueued, keeping the error already set. */
static inline void
unclaim_keeping_error(Express *self, Py_ssize_t s)
{
    saved_error e;
    save_error(&e);
    if (ledger_release(self->slots, s) < 0)
        PyErr_Clear();
    restore_error(&e);
}

/* Express.upload (upload.c), and the Express attributes it makes (upload_init: the lease
 * type and the staging blocks' free lists; 0, or -1 with an error set). */
PyObject *Express_upload(Express *self, PyObject *const *args, Py_ssize_t nargs);
/* The hub's core (PROCESS.hub's express: a new reference, or NULL with none) and whether
 * awaits in a burst step aside; -1 with a TypeError where PROCESS.hub is not a Hub. */
int hub_core(PyObject *process, PyObject **core, int *step_aside);
/* Express.submit(op, stream) and the core's generic sentinel (borrowed), for launches.c */
PyObject *express_submit(PyObject *core, PyObject *op, PyObject *stream);
PyObject *express_generic(PyObject *core);
/* Express.launch(op, stream, mode, adapter) on core, mode checked by the caller */
PyObject *express_launch_sent(PyObject *core, PyObject *op, PyObject *stream, long mode,
                              PyObject *adapter);
/* Express.look(stream, slot, gen, seq, ticket) on core as a C int (-3: an error set) */
int express_look_at(PyObject *core, PyObject *stream, long long slot, uint32_t gen, PyObject *seq,
                    long long ticket);
int upload_init(Express *self);
PyObject *Express_get_staging_idle(Express *self, void *closure);
PyObject *Express_get_staging_reuses(Express *self, void *closure);
PyObject *Express_drop_staging(Express *self, PyObject *arg);
int upload_traverse(Express *self, visitproc visit, void *arg);
void upload_clear(Express *self);

/* A call the core makes of its backend (fn: a field of BackendCore, borrowed; nargsf
 * may have PY_VECTORCALL_ARGUMENTS_OFFSET): its result, or NULL with an error set. */
static inline PyObject *
backend_call(PyObject *fn, const char *what, PyObject *const *args, size_t nargsf)
{
    if (fn == NULL || fn == Py_None) {
        PyErr_Format(PyExc_AttributeError, "the backend has no %s", what);
        return NULL;
    }
    Py_INCREF(fn); /* (held: the call may replace the field) */
    PyObject *r = PyObject_Vectorcall(fn, args, nargsf, NULL);
    Py_DECREF(fn);
    return r;
}

/* The hub's answer for device ordinal not made yet (a process's first submission on the
 * device): PROCESS.stream_memops(hub, ordinal), as the generic path asks it, so that the
 * first submission is not declined. Py_True or Py_False (borrowed: immortal enough), or
 * NULL with an error set. */
static inline PyObject *
ask_memops(Express *self, PyObject *ordinal)
{
    PyObject *ask = PROCESS(self->process)->stream_memops;
    if (ask == NULL || ask == Py_None) {
        PyErr_SetString(PyExc_RuntimeError, "PROCESS.stream_memops is not set");
        return NULL;
    }
    Py_INCREF(ask);
    PyObject *a[2] = {self->hub, ordinal};
    PyObject *answer = PyObject_Vectorcall(ask, a, 2, NULL);
    Py_DECREF(ask);
    if (answer == NULL)
        return NULL;
    PyObject *memops = answer == Py_True ? Py_True : Py_False;
    Py_DECREF(answer);
    return memops;
}


#endif
