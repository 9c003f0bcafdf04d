/*
 * What the native op core's files share (express.c: launches, upload.c: small uploads):
 * the Express object, the submission modes, and the small helpers both use. Included
 * after Python.h and reactor.h.
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

/* What the native fast paths of Allocation read (alloc.c). */
typedef struct alloc_shape alloc_shape;

/* the __slots__ of an ExecutionContext */
typedef struct {
    Py_ssize_t accesses, capturing, checks, deferred, device, errors, fuse, retained, seq, stream;
} context_offsets;

/* What every launch reads of the hub, the trace module and the backend (hub_allows, the
 * backend's fast_launch and current, the spin budget), kept while none of it can have
 * changed: CPython before 3.13 gives a dict a new version tag on every change, and a
 * type a new tp_version_tag when a class attribute (a default an instance dict lacks)
 * changes. Elsewhere nothing is kept, and each launch reads them. */
#if PY_VERSION_HEX < 0x030D0000
#define CORE_STATE_KEPT 1
#else
#define CORE_STATE_KEPT 0
#endif
typedef struct {
    int valid;
    uint64_t tags[3];            /* the hub's, the trace module's, the backend's dict */
    unsigned int types[2];       /* the hub's and the backend's type */
    int allows;                  /* hub_allows() */
    PyObject *fast_launch, *current, *budget;
} core_state;

typedef struct {
    PyObject_HEAD
    PyObject *hub, *backend, *stats, *memops, *lock, *local, *trace;
    SlotLedger *slots; /* hub.slots: the only owner of the slab's slots */
    PyObject *hub_dict, *trace_dict, *backend_dict; /* __dict__s of the hub, trace, backend */
    PyObject *box_type, *generic, *spin_us, *failed, *abandon, *one, *minus_one;
    PyTypeObject *launch_t, *stream_t, *tensor_t, *alloc_t, *prepared_t;
    /* what a future is made of (Express.submit): express._completion_of's types */
    PyTypeObject *completion_t, *context_t, *ready_t, *future_t;
    PyObject *no_args;
    context_offsets cx;
    Py_ssize_t r_value, f_comp; /* _Ready._value, DeviceFuture._comp */
    /* interned names of the attributes read on every call */
    PyObject *s_use_reactor, *s_enabled, *s_fault_seen, *s_fast_launch, *s_current,
        *s_ordinal, *s_const, *s_readonly, *s_itemsize, *s_spin_budget_us, *s_long_ops,
        *s_completed_inline, *s_acquire, *s_release, *s_active, *s_launch_kernel,
        *s_launch_failed, *s_use;
    /* the Completion attributes a future's sets (as Completion.__init__ and
     * express._completion_of do) */
    PyObject *s_ctx, *s_out, *s_stream, *s_device, *s_seq, *s_slot, *s_gen, *s_address,
        *s_armed_at;
    PyObject *s_context_handle, *s_context_handles;
    unsigned long long launches, native_launches, declined, completed_inline;
    unsigned long long burst_awaits, burst_queued, burst_handed_over;
    /* a small upload's (upload.c; Express.set_upload) */
    PyTypeObject *upload_t, *work_t, *node_t, *block_t; /* HostUploadOp, _HostUpload, ... */
    PyObject *acquire, *upload_failed, *upload_abandon, *pageable_dict, *lease_t;
    PyObject *blocks[UPLOAD_CLASSES]; /* idle pinned staging blocks, by size class */
    Py_ssize_t u_node, u_output, u_device, n_value, w_source, w_dtype, b_address;
    PyObject *s_shape, *s_forced, *s_copy_and_write, *s_native_copy, *s_host_remap;
    alloc_shape *shape; /* the allocation of an upload (NULL: Allocation() every time) */
    PyObject *pool_var; /* pools._selected */
    unsigned long long uploads, staging_reuses;
    core_state state;                 /* the reads of every launch, kept (below) */
    PyObject *dims_grid, *dims_block; /* the last launch's grid and block tuples, */
    unsigned int dims[6];             /* read: a Launcher's are the same objects */
    struct upload_builder *builder; /* from_host's op built in C (Express.set_builder) */
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

/* An instance attribute read from the instance's __dict__ (no type lookup: the hub's
 * and the trace module's attributes are plain ones); the attribute itself when the
 * dict has no such key (a class default). A new reference, or NULL with an error. */
static inline PyObject *
dict_attr(PyObject *dict, PyObject *obj, PyObject *name)
{
    PyObject *v = PyDict_GetItemWithError(dict, name);
    if (v != NULL)
        return Py_NewRef(v);
    return PyErr_Occurred() ? NULL : PyObject_GetAttr(obj, name);
}

static inline int
dict_true(PyObject *dict, PyObject *obj, PyObject *name)
{
    PyObject *v = dict_attr(dict, obj, name);
    if (v == NULL)
        return -1;
    int t = v == Py_True ? 1 : v == Py_False ? 0 : PyObject_IsTrue(v);
    Py_DECREF(v);
    return t;
}

long current_ordinal_of(PyObject *o);

/* The hub's and the backend's state the core needs: flag slots in use,
 * no tracing, no fault seen. 1 the core's case, 0 not, -1 an error. */
static inline int
hub_allows(Express *self)
{
    int t;
    if ((t = dict_true(self->hub_dict, self->hub, self->s_use_reactor)) <= 0 ||
        (t = !dict_true(self->trace_dict, self->trace, self->s_enabled)) <= 0 ||
        (t = !dict_true(self->backend_dict, self->backend, self->s_fault_seen)) <= 0)
        return t < 0 || PyErr_Occurred() ? -1 : 0;
    return 1;
}

/* A dict's version tag (CORE_STATE_KEPT: a new one on every change of the dict). */
static inline uint64_t
dict_tag(PyObject *d)
{
#if CORE_STATE_KEPT
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#endif
    return ((PyDictObject *)d)->ma_version_tag;
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif
#else
    (void)d;
    return 0;
#endif
}

/* A type's attribute-cache version: 0 when it has none (then nothing is kept). */
static inline unsigned int
type_tag(PyObject *o)
{
    PyTypeObject *t = Py_TYPE(o);
    return PyType_HasFeature(t, Py_TPFLAGS_VALID_VERSION_TAG) ? t->tp_version_tag : 0;
}

static inline void
core_state_clear(core_state *s)
{
    s->valid = 0;
    Py_CLEAR(s->fast_launch);
    Py_CLEAR(s->current);
    Py_CLEAR(s->budget);
}

/* This launch's reads (new references in *fast, *current, *budget, set only when
 * *allows): from self->state while nothing they come from changed, else read again
 * (and kept, CORE_STATE_KEPT). 0, or -1 with an error set. */
static inline int
launch_state(Express *self, int *allows, PyObject **fast, PyObject **current, PyObject **budget)
{
    core_state *s = &self->state;
    *fast = *current = *budget = NULL;
    uint64_t tags[3] = {dict_tag(self->hub_dict), dict_tag(self->trace_dict),
                        dict_tag(self->backend_dict)};
    unsigned int types[2] = {type_tag(self->hub), type_tag(self->backend)};
    if (CORE_STATE_KEPT && s->valid && tags[0] == s->tags[0] && tags[1] == s->tags[1] &&
        tags[2] == s->tags[2] && types[0] == s->types[0] && types[1] == s->types[1]) {
        if ((*allows = s->allows)) {
            *fast = Py_NewRef(s->fast_launch);
            *current = Py_NewRef(s->current);
            *budget = Py_NewRef(s->budget);
        }
        return 0;
    }
    core_state_clear(s);
    int t = hub_allows(self);
    if (t < 0)
        return -1;
    *allows = t;
    if (t) {
        *fast = dict_attr(self->backend_dict, self->backend, self->s_fast_launch);
        *current = *fast == NULL ? NULL
                                 : dict_attr(self->backend_dict, self->backend, self->s_current);
        *budget = *current == NULL ? NULL
                                   : dict_attr(self->hub_dict, self->hub, self->s_spin_budget_us);
        if (*budget == NULL) {
            Py_CLEAR(*fast);
            Py_CLEAR(*current);
            return -1;
        }
    }
    /* kept (the tags read before the reads: a change made by them is seen next time) */
    if (CORE_STATE_KEPT && types[0] != 0 && types[1] != 0) {
        s->tags[0] = tags[0], s->tags[1] = tags[1], s->tags[2] = tags[2];
        s->types[0] = types[0], s->types[1] = types[1];
        s->allows = t;
        /* (XSETREF: another thread may have filled it while the reads ran Python code) */
        Py_XSETREF(s->fast_launch, Py_XNewRef(*fast));
        Py_XSETREF(s->current, Py_XNewRef(*current));
        Py_XSETREF(s->budget, Py_XNewRef(*budget));
        s->valid = 1;
    }
    return 0;
}

/* hub_allows() and the hub's spin budget (a new reference, or NULL with an error set),
 * through the kept state: for the paths that need no more of it (an upload). */
static inline int
state_allows(Express *self)
{
    int t;
    PyObject *fast, *current, *budget;
    if (launch_state(self, &t, &fast, &current, &budget) < 0)
        return -1;
    Py_XDECREF(fast);
    Py_XDECREF(current);
    Py_XDECREF(budget);
    return t;
}

static inline PyObject *
state_budget(Express *self)
{
    int t;
    PyObject *fast, *current, *budget;
    if (launch_state(self, &t, &fast, &current, &budget) < 0)
        return NULL;
    Py_XDECREF(fast);
    Py_XDECREF(current);
    return t ? budget : dict_attr(self->hub_dict, self->hub, self->s_spin_budget_us);
}

/* express._settle for work that landed within its spin, done in C: the stream's
 * completed number, the slot back on the free list, the counter (Hub.snapshot adds it to
 * stats().completed_inline). 0, or -1 with the error set (the slot not given back). */
static inline int
settle_inline(Express *self, PyObject *stream, Py_ssize_t slot, long long seqv, PyObject *seq)
{
    PyObject *completed = STREAM(stream)->completed;
    if (completed == NULL || !PyLong_CheckExact(completed) || PyLong_AsLongLong(completed) < seqv)
        field_set(&STREAM(stream)->completed, Py_NewRef(seq));
    if (PyErr_Occurred() || ledger_release(self->slots, slot) < 0)
        return -1; /* (a completed number past 2**63: the slot stays out) */
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

/* lock.acquire(blocking), ``acquire`` the interned method name: 1 taken, 0 not (not
 * blocking), -1 an error. (A blocking acquire passes no argument: threading's locks
 * parse their arguments by keyword, and an empty tuple is the cheapest to parse.) */
static inline int
call_acquire(PyObject *acquire, PyObject *lock, int blocking)
{
    PyObject *args[2] = {lock, Py_False};
    PyObject *r = PyObject_VectorcallMethod(acquire, args,
                                            (blocking ? 1 : 2) | PY_VECTORCALL_ARGUMENTS_OFFSET,
                                            NULL);
    if (r == NULL)
        return -1;
    int got = r == Py_True;
    Py_DECREF(r);
    return got;
}

static inline int
try_lock(Express *self)
{
    int fast = exec_lock_try(self->lock); /* an ExecLock: no method call */
    return fast >= 0 ? fast : call_acquire(self->s_acquire, self->lock, 0);
}

static inline int unlock(Express *self);

/* unlock() with an error already set: that error is the one that stays. */
static inline void
unlock_keeping_error(Express *self)
{
    saved_error e;
    save_error(&e);
    if (unlock(self) < 0)
        PyErr_Clear();
    restore_error(&e);
}

static inline int
unlock(Express *self)
{
    if (is_exec_lock(self->lock)) {
        exec_lock_release(self->lock);
        return 0;
    }
    PyObject *r = PyObject_VectorcallMethod(self->s_release, &self->lock,
                                            1 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return 0;
}

/* Native fast paths of Allocation (alloc.c): what they read, and a small upload's
 * allocation from the block cache (Py_None: not the case, the caller calls Allocation). */
alloc_shape *alloc_shape_new(PyObject *alloc_t, PyObject *stream_t, PyObject *cache,
                             PyObject *backends);
void alloc_shape_free(alloc_shape *a);
int alloc_shape_traverse(alloc_shape *a, visitproc visit, void *arg);
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

/* Spin (the GIL released) until the flag word at address reaches gen or budget_us have
 * passed; 1 landed. */
int spin_on_flag(uintptr_t address, uint32_t gen, long long budget_us);

/* Express.upload (upload.c) and the Express attributes it sets up (set_upload). */
PyObject *Express_upload(Express *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *Express_set_upload(Express *self, PyObject *args, PyObject *kwds);
PyObject *Express_get_staging_idle(Express *self, void *closure);
PyObject *Express_get_staging_reuses(Express *self, void *closure);
PyObject *Express_drop_staging(Express *self, PyObject *arg);
PyObject *Express_set_builder(Express *self, PyObject *args, PyObject *kwds);
PyObject *Express_build_upload(Express *self, PyObject *array);
int upload_traverse(Express *self, visitproc visit, void *arg);
void upload_clear(Express *self);

#endif
