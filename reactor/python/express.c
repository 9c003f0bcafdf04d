/*
 * The express core of cuasync._reactor: the common case of ``await kernel[g, b](x, n)``
 * (and of its ``sync()`` and ``submit_on``) in one native call.
 *
 * The steps: the checks, the execution lock, the stream's sequence number, the access
 * records of the op's tensors, a completion slot and its generation, the launch with
 * its flag write, the spin, and (landed) the slot given back.  There is no copy of them
 * in Python: cuasync/_core/express.py holds what this core calls back into (the rest of
 * an await that did not land, the failure and abandon handlers).  Express.launch does
 * them reading the objects' fields as members of their native base types (cores.h;
 * the classes it knows by exact type are those recorded when declared), and returns:
 *
 *   - the op's output: the work landed within the spin and is settled;
 *   - a tuple, express.Sent: submitted, and still to be finished by Python;
 *   - for an await whose work did not land within its spin, its Suspension (park.c):
 *     the completion made here, the await to delegate to it;
 *   - the ``generic`` sentinel, having done nothing: the op is not the common case
 *     (the generic path, DeviceOp._start, then takes it, and words any error).
 *
 * No Python code runs while it holds the execution lock, except where Python does the
 * launch (no native launch: the emulator, a stubbed driver), which it does with
 * ``LOCAL.active`` (the C thread-local cuasync_active) set, as the generic path does.  GC-tracked objects it needs under the
 * lock (the access records' tuples) are made before it takes the lock, so that no
 * collection (no finalizer) runs inside.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "module.h"
#include "express.h"

#include <errno.h>
#include <string.h>

static int is_express(PyObject *o);

/* What a launch an await in a burst submitted (MODE_BURST) leaves to its await: the
 * slot to settle once its flag lands, and the submitter that makes it (retained; NULL:
 * launched at once). References are owned. */
typedef struct {
    PyObject *slot, *seq, *box; /* box: NULL where none was made */
    uint32_t index, gen;        /* the slot's, and its flag's generation */
    uintptr_t address;
    subcore *sub;
    uint64_t ticket;
} queued_launch;

static void
queued_release(queued_launch *q)
{
    Py_CLEAR(q->slot);
    Py_CLEAR(q->seq);
    Py_CLEAR(q->box);
    if (q->sub != NULL) {
        subcore_drop(q->sub);
        q->sub = NULL;
    }
}



/* A tensor's device address (Tensor.ptr: alloc.ptr + offset * dtype.itemsize). */
static int
tensor_ptr(Express *self, PyObject *tensor, unsigned long long *out)
{
    PyObject *alloc = TENSOR(tensor)->alloc;
    PyObject *offset = TENSOR(tensor)->offset;
    PyObject *dtype = TENSOR(tensor)->dtype;
    PyObject *ptr = alloc == NULL ? NULL : ALLOCATION(alloc)->ptr;
    if (ptr == NULL || offset == NULL || dtype == NULL || !PyLong_CheckExact(offset)) {
        PyErr_SetString(PyExc_TypeError, "a tensor argument is not fully made");
        return -1;
    }
    long long size = 0, off = PyLong_AsLongLong(offset);
    if (off != 0) { /* (a view into its allocation: numpy's dtype.itemsize, read by name) */
        PyObject *itemsize = off == -1 && PyErr_Occurred()
                                 ? NULL : PyObject_GetAttr(dtype, self->s_itemsize);
        if (itemsize == NULL)
            return -1;
        size = PyLong_AsLongLong(itemsize);
        Py_DECREF(itemsize);
    }
    unsigned long long base = PyLong_AsUnsignedLongLong(ptr);
    if (PyErr_Occurred())
        return -1;
    *out = base + (unsigned long long)(off * size);
    return 0;
}

/* One tuple of ints (grid or block) of 3 into out. */
static int
dim3(PyObject *t, unsigned int *out)
{
    if (t == NULL || !PyTuple_CheckExact(t) || PyTuple_GET_SIZE(t) != 3) /* (NULL: unset) */
        return 0;
    for (int i = 0; i < 3; i++) {
        PyObject *v = PyTuple_GET_ITEM(t, i);
        if (!PyLong_CheckExact(v))
            return 0;
        unsigned long u = PyLong_AsUnsignedLong(v);
        if (PyErr_Occurred()) {
            PyErr_Clear();
            return 0;
        }
        if (u > 0xFFFFFFFFul)
            return 0;
        out[i] = (unsigned int)u;
    }
    return 1;
}

/* How the launch is made: packed here and launched natively; by the backend's
 * fast_launch from Python (a stub of it); by backend.launch_kernel (no fast launch, or
 * the op cannot take it); or, for a library call in place of a kernel (a GEMM: its
 * PreparedCore's call is set), by that call from Python. */
enum { BY_LAUNCH_KERNEL = 0, BY_FAST_LAUNCH, BY_NATIVE, BY_CALL };

/* What a native launch needs, prepared outside the lock. */
typedef struct {
    uintptr_t lk, wv;
    launch_config c;
    _Alignas(16) unsigned char block[PARAM_BLOCK_MAX];
    void *slots[PARAM_COUNT_MAX];
    Py_ssize_t n;
    uint32_t extent; /* the end of the last parameter in block */
} native_launch;

/* Which way the launch goes (BY_*), nl filled for BY_NATIVE; -1 an error (packing). */
static int
launch_kind(Express *self, PyObject *op, PyObject *stream, PyObject *prepared,
            PyObject *fast_launch, PyObject *current, native_launch *nl)
{
    PyObject *call = PREPARED(prepared)->call;
    if (call != NULL && call != Py_None)
        return BY_CALL;
    if (fast_launch == Py_None)
        return BY_LAUNCH_KERNEL;
    PyObject *fast = PREPARED(prepared)->fast;
    if (fast == NULL || !PyTuple_CheckExact(fast) || PyTuple_GET_SIZE(fast) != 2 ||
        STREAM(stream)->owned != Py_True)
        return BY_LAUNCH_KERNEL;
    /* (the backend's current context: a CurrentOrdinal, read without a lookup; any
     * other record, the backend's own launch) */
    long mine = current_ordinal_of(current);
    PyObject *want = PREPARED(prepared)->ordinal;
    long wanted = want != NULL && PyLong_CheckExact(want) ? PyLong_AsLong(want) : -3;
    if (mine == -2 || mine != wanted)
        return BY_LAUNCH_KERNEL;
    if (!is_launch_packed(fast_launch))
        return BY_FAST_LAUNCH;
    unsigned int *g = self->dims, *b = self->dims + 3;
    PyObject *shared = LAUNCH(op)->shared_mem;
    PyObject *handle = STREAM(stream)->handle;
    PyObject *grid = LAUNCH(op)->grid, *block = LAUNCH(op)->block;
    if (grid == NULL || grid != self->dims_grid || block != self->dims_block) {
        Py_CLEAR(self->dims_grid); /* (parsed again: tuples, so the same objects are) */
        Py_CLEAR(self->dims_block);
        if (!dim3(grid, g) || !dim3(block, b))
            return BY_FAST_LAUNCH; /* (the backend's own call checks them, and words it) */
        self->dims_grid = Py_NewRef(grid);
        self->dims_block = Py_NewRef(block);
    }
    if (shared == NULL || !PyLong_CheckExact(shared) || handle == NULL)
        return BY_FAST_LAUNCH;
    launch_config *c = &nl->c; /* (the dims copied before anything can run Python) */
    c->gx = g[0], c->gy = g[1], c->gz = g[2], c->bx = b[0], c->by = b[1], c->bz = b[2];
    if (get_u64(PyTuple_GET_ITEM(fast, 0), &c->function) < 0 ||
        get_u64(handle, &c->stream) < 0)
        return -1;
    unsigned long sm = PyLong_AsUnsignedLong(shared);
    if (PyErr_Occurred() || sm > 0xFFFFFFFFul) {
        PyErr_Clear();
        return BY_FAST_LAUNCH;
    }
    c->shmem = (unsigned int)sm;
    const char *recs;
    PyObject *args = LAUNCH(op)->args;
    if (args == NULL || check_layout(PyTuple_GET_ITEM(fast, 1), args, &recs, &nl->n) < 0)
        return -1;
    nl->extent = layout_extent(recs, nl->n);
    for (Py_ssize_t i = 0; i < nl->n; i++) {
        PyObject *a = PySequence_Fast_ITEMS(args)[i]; /* (a tuple; a list, set by Python) */
        unsigned char *dst = pointer_slot(recs, i, nl->block);
        if (dst != NULL && Py_IS_TYPE(a, REGISTERED(TENSOR))) {
            unsigned long long ptr;
            if (tensor_ptr(self, a, &ptr) < 0)
                return -1;
            memcpy(dst, &ptr, 8);
            nl->slots[i] = dst;
        }
        else if (pack_one(recs, i, a, nl->block, &nl->slots[i]) < 0) {
            return -1;
        }
    }
    if (get_launch_entry_points(1, &nl->lk, &nl->wv) < 0)
        return -1;
    return BY_NATIVE;
}

/* How each tensor's access is recorded: as Allocation.use does it when the tensor was
 * last used on this stream only (here); else by Allocation.use itself (it orders the
 * stream after the others' uses), called under the lock with LOCAL.active set. */
enum { USE_READ = 0, USE_WRITE = 1 };

/* The op's tensors, checked before the lock: each on ``device`` and writable where
 * written (writes: the op's, whether it writes each); uses[i] is USE_READ or USE_WRITE.
 * 1 all can, 0 one cannot (the generic path takes the op). */
static int
check_tensors(PyObject *tensors, PyObject *writes, PyObject *device, char *uses,
              PyObject **allocs)
{
    Py_ssize_t n = PyTuple_GET_SIZE(tensors);
    if (writes == NULL || !PyTuple_CheckExact(writes) || PyTuple_GET_SIZE(writes) != n)
        return 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *tensor = PyTuple_GET_ITEM(tensors, i);
        if (!Py_IS_TYPE(tensor, REGISTERED(TENSOR)))
            return 0;
        PyObject *alloc = TENSOR(tensor)->alloc;
        if (alloc == NULL || !PyObject_TypeCheck(alloc, REGISTERED(ALLOCATION)) ||
            ALLOCATION(alloc)->device != device)
            return 0;
        int is_const = PyTuple_GET_ITEM(writes, i) != Py_True;
        if (!is_const && ALLOCATION(alloc)->readonly)
            return 0;
        allocs[i] = alloc;
        uses[i] = (char)(is_const ? USE_READ : USE_WRITE);
    }
    return 1;
}

/* Under the lock (another thread may have used the tensor meanwhile): whether the
 * access of ``alloc`` needs Allocation.use itself, because a last use on another stream
 * may still be running (then the stream must be ordered after it). Uses that are known
 * to have run (stream_pending) order nothing: the core records the access as
 * Allocation.use would. 1 yes, 0 no, -1 an error. No Python code runs here (Stream has
 * object's hash and equality). */
static int
needs_ordering(PyObject *alloc, PyObject *stream, int write)
{
    PyObject *w = ALLOCATION(alloc)->write;
    PyObject *reads = ALLOCATION(alloc)->reads;
    if (w == NULL || reads == NULL || !PyDict_CheckExact(reads) ||
        (w != Py_None && (!PyTuple_CheckExact(w) || PyTuple_GET_SIZE(w) != 2 ||
                          (PyTuple_GET_ITEM(w, 0) != stream &&
                           stream_pending(PyTuple_GET_ITEM(w, 0), PyTuple_GET_ITEM(w, 1)) != 0))))
        return 1;
    if (!write)
        return 0;
    Py_ssize_t pos = 0;
    PyObject *reader, *at;
    while (PyDict_Next(reads, &pos, &reader, &at))
        if (reader != stream && stream_pending(reader, at) != 0)
            return 1;
    return 0;
}

/* The backend's launch_failed(rc, prepared, grid, block, shared_mem, stream, args,
 * address, gen) (BackendCore's field): it raises why the launch failed (or, made again
 * from Python, it launched). */
static int
launch_failed(Express *self, PyObject *op, PyObject *stream, long rc, PyObject *address,
              PyObject *gen)
{
    PyObject *code = PyLong_FromLong(rc);
    if (code == NULL)
        return -1;
    PyObject *a[10] = {NULL, code, LAUNCH(op)->prepared,
                       LAUNCH(op)->grid, LAUNCH(op)->block,
                       LAUNCH(op)->shared_mem, STREAM(stream)->handle,
                       LAUNCH(op)->args, address, gen};
    PyObject *r = backend_call(BACKEND(self->backend)->launch_failed, "launch_failed", a + 1,
                               9 | PY_VECTORCALL_ARGUMENTS_OFFSET);
    Py_DECREF(code);
    Py_XDECREF(r);
    return r == NULL ? -1 : 0;
}

/* The launch made by Python, under the lock with LOCAL.active set (BY_FAST_LAUNCH,
 * BY_LAUNCH_KERNEL or BY_CALL; the caller clears LOCAL.active). 0, or -1 with the error
 * set. */
static int
python_launch(Express *self, int kind, PyObject *op, PyObject *stream, PyObject *fast_launch,
              PyObject *box, PyObject *address, PyObject *gen)
{
    cuasync_active = 1;
    PyObject *prepared = LAUNCH(op)->prepared, *grid = LAUNCH(op)->grid;
    PyObject *block = LAUNCH(op)->block, *shared = LAUNCH(op)->shared_mem;
    PyObject *handle = STREAM(stream)->handle, *args = LAUNCH(op)->args;
    if (kind == BY_CALL) { /* call(stream, args, errors, flag_address, flag_value) */
        PyObject *call = Py_XNewRef(PREPARED(prepared)->call); /* (read again: held) */
        if (call == NULL || call == Py_None) {
            Py_XDECREF(call);
            PyErr_SetString(PyExc_RuntimeError, "a library call's prepared call was unset");
            return -1;
        }
        PyObject *a[6] = {NULL, handle, args, box, address, gen};
        PyObject *r = PyObject_Vectorcall(call, a + 1, 5 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
        Py_DECREF(call);
        Py_XDECREF(r);
        return r == NULL ? -1 : 0;
    }
    if (kind == BY_LAUNCH_KERNEL) {
        PyObject *a[10] = {NULL, prepared, grid, block, shared, handle, args, box, address,
                           gen};
        PyObject *r = backend_call(BACKEND(self->backend)->launch_kernel, "launch_kernel",
                                   a + 1, 9 | PY_VECTORCALL_ARGUMENTS_OFFSET);
        Py_XDECREF(r);
        return r == NULL ? -1 : 0;
    }
    /* fast_launch(handle, gx, gy, gz, bx, by, bz, shared_mem, stream, layout, args,
     * address, gen) -> rc, as the backend's native launch is called */
    PyObject *fast = PREPARED(prepared)->fast;
    if (fast == NULL || !PyTuple_CheckExact(fast) || PyTuple_GET_SIZE(fast) != 2 ||
        !PyTuple_CheckExact(grid) || PyTuple_GET_SIZE(grid) != 3 || !PyTuple_CheckExact(block) ||
        PyTuple_GET_SIZE(block) != 3) {
        PyErr_SetString(PyExc_TypeError, "a launch's fast path must be (handle, layout), its "
                                         "grid and block 3-tuples");
        return -1;
    }
    PyObject *a[13] = {PyTuple_GET_ITEM(fast, 0), PyTuple_GET_ITEM(grid, 0),
                       PyTuple_GET_ITEM(grid, 1), PyTuple_GET_ITEM(grid, 2),
                       PyTuple_GET_ITEM(block, 0), PyTuple_GET_ITEM(block, 1),
                       PyTuple_GET_ITEM(block, 2), shared, handle, PyTuple_GET_ITEM(fast, 1),
                       args, address, gen};
    PyObject *r = PyObject_Vectorcall(fast_launch, a, 13, NULL);
    if (r == NULL)
        return -1;
    long rc = PyLong_AsLong(r);
    Py_DECREF(r);
    if (rc == -1 && PyErr_Occurred())
        return -1;
    return rc == 0 ? 0 : launch_failed(self, op, stream, rc, address, gen);
}

static PyObject *express_launch(Express *self, PyObject *op, PyObject *stream, long mode,
                                 PyObject *adapter, int *settled, queued_launch *queued);

/* The express.Sent of a launch a burst queued (q): landed None, the submitter's ticket
 * (-1: made at once, whose slot's status word is not its own), its box (None for a
 * native launch: it reports no error later; the submitter's status word says whether it
 * failed, express.settle_look). A new reference, or NULL with an error set (q
 * unchanged). */
static PyObject *
queued_sent(Express *x, queued_launch *q)
{
    PyObject *genv = NULL, *addr = NULL, *ticket = NULL, *sent = NULL;
    if ((genv = PyLong_FromUnsignedLong(q->gen)) == NULL ||
        (addr = PyLong_FromUnsignedLongLong(q->address)) == NULL ||
        (ticket = q->sub != NULL ? PyLong_FromUnsignedLongLong(q->ticket)
                                 : Py_NewRef(x->minus_one)) == NULL)
        goto done;
    sent = PyTuple_Pack(10, x->hub, q->box != NULL ? q->box : Py_None, q->slot, genv, addr,
                        q->seq, Py_None, Py_None, ticket, Py_None);
done:
    Py_XDECREF(genv);
    Py_XDECREF(addr);
    Py_XDECREF(ticket);
    return sent;
}

/* A queued launch nobody will await (q), given to the background watcher
 * (express._core_abandon) to settle once it lands. The error set on entry, if any, is
 * kept; one of the abandon itself is reported as unraisable against ``where`` (the slot
 * is then lost). q's references stay (the caller releases them). */
static void
queued_abandon_to(Express *x, PyObject *op, PyObject *stream, queued_launch *q,
                  PyObject *where)
{
    if (x->abandon == NULL || x->hub == NULL)
        return;
    saved_error e;
    save_error(&e);
    PyObject *genv = PyLong_FromUnsignedLong(q->gen);
    PyObject *addr = PyLong_FromUnsignedLongLong(q->address);
    PyObject *r = NULL;
    if (genv != NULL && addr != NULL) {
        PyObject *a[8] = {x->hub, op, stream, q->box ? q->box : Py_None, q->slot, genv, addr,
                          q->seq};
        r = PyObject_Vectorcall(x->abandon, a, 8, NULL);
    }
    if (r == NULL)
        PyErr_WriteUnraisable(where);
    Py_XDECREF(r);
    Py_XDECREF(genv);
    Py_XDECREF(addr);
    restore_error(&e);
}

/* Express.launch(op, stream, mode, adapter) on core (an Express, checked here), mode
 * checked by the caller: the Sent, None, or the generic sentinel; NULL with an error. */
PyObject *
express_launch_sent(PyObject *core, PyObject *op, PyObject *stream, long mode, PyObject *adapter)
{
    if (!is_express(core)) {
        PyErr_SetString(PyExc_TypeError, "the hub's express is not an Express");
        return NULL;
    }
    Express *self = (Express *)core;
    int settled;
    if (mode != MODE_BURST)
        return express_launch(self, op, stream, mode, adapter, &settled, NULL);
    /* an await in a burst (express._submit_await), or an op handed to asyncio as a
     * future (op_future): queued as LaunchAwait queues it, and left to the caller (its
     * Sent, landed None) to step aside or look, and settle */
    queued_launch q = {0};
    PyObject *r = express_launch(self, op, stream, mode, adapter, &settled, &q);
    if (r != NULL && settled == 2) {
        Py_SETREF(r, queued_sent(self, &q));
        if (r == NULL)
            queued_abandon_to(self, op, stream, &q, (PyObject *)self);
    }
    queued_release(&q);
    return r;
}

static PyObject *
Express_launch(Express *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (check_nargs("launch", nargs, 4) < 0)
        return NULL;
    long mode = PyLong_AsLong(args[2]);
    if (mode == -1 && PyErr_Occurred())
        return NULL;
    if (mode < MODE_NO_SPIN || (mode > MODE_BLOCK && mode != MODE_BURST)) {
        PyErr_Format(PyExc_ValueError, "mode must be 0, 1, 2 or 4, got %ld", mode);
        return NULL;
    }
    return express_launch_sent((PyObject *)self, args[0], args[1], mode, args[3]);
}

/* The Completion of a launch that did not land within its spin (express._completion_of,
 * in C: a future's, MODE_FUTURE, and a parked await's): it retains the op's allocations,
 * has the launch's error box as its context's errors, and takes slot s of the hub's
 * table. A new reference, or NULL with an error set. */
static PyObject *
make_completion(Express *self, PyObject *op, PyObject *stream, PyObject *box,
                Py_ssize_t s, uint32_t gen, uintptr_t address, PyObject *seq)
{
    /* (read again: Python may have run; held, since the allocations below may collect) */
    PyObject *tensors = LAUNCH(op)->tensors;
    PyObject *output = LAUNCH(op)->output;
    PyObject *device = STREAM(stream)->device;
    if (tensors == NULL || !PyTuple_CheckExact(tensors) || output == NULL || device == NULL) {
        PyErr_SetString(PyExc_SystemError, "a launch op changed while it was submitted");
        return NULL;
    }
    Py_INCREF(tensors);
    Py_INCREF(output);
    Py_INCREF(device);
    PyObject *made = NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(tensors);
    PyObject *retained = PyList_New(n);
    if (retained == NULL)
        goto held;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *tensor = PyTuple_GET_ITEM(tensors, i);
        PyObject *alloc = Py_IS_TYPE(tensor, REGISTERED(TENSOR)) ? TENSOR(tensor)->alloc : NULL;
        if (alloc == NULL) {
            Py_DECREF(retained);
            PyErr_SetString(PyExc_SystemError, "a launch op's tensors changed while submitted");
            goto held;
        }
        PyList_SET_ITEM(retained, i, Py_NewRef(alloc));
    }
    PyObject *ctx = REGISTERED(CONTEXT)->tp_alloc(REGISTERED(CONTEXT), 0);
    if (ctx == NULL) {
        Py_DECREF(retained);
        goto held;
    }
    /* (ExecutionContext.submitted) */
    ContextCore *c = CONTEXT(ctx);
    field_set(&c->stream, Py_NewRef(stream));
    field_set(&c->fuse, Py_NewRef(Py_None));
    field_set(&c->deferred, Py_NewRef(Py_None));
    field_set(&c->device, Py_NewRef(device));
    field_set(&c->retained, retained);
    field_set(&c->errors, Py_NewRef(box));
    field_set(&c->capturing, Py_NewRef(Py_False));
    field_set(&c->accesses, Py_NewRef(Py_None));
    field_set(&c->checks, Py_NewRef(Py_None));
    field_set(&c->seq, Py_NewRef(seq));
    PyObject *out = NULL, *comp = NULL;
    if ((out = REGISTERED(OUTPUT)->tp_alloc(REGISTERED(OUTPUT), 0)) == NULL)
        goto done;
    field_set(&OUTPUT(out)->value, Py_NewRef(output));
    if ((comp = REGISTERED(COMPLETION)->tp_new(REGISTERED(COMPLETION), self->no_args, NULL)) == NULL)
        goto done;
    CompletionCore *k = COMPLETION(comp);
    field_set(&k->ctx, Py_NewRef(ctx));
    field_set(&k->out, Py_NewRef(out));
    field_set(&k->stream, Py_NewRef(stream));
    field_set(&k->device, Py_NewRef(device));
    field_set(&k->seq, Py_NewRef(seq));
    k->slot = s;
    k->gen = gen;
    k->address = address;
    k->armed_at = (double)now_ns() / 1e9; /* (time.monotonic) */
    /* hub.table[slot] = comp, before its future or its await's park: one dropped here
     * would hand the completion to the watcher, which frees the slot that _core_abandon
     * frees too */
    if (ledger_arm(self->slots, s, comp) < 0)
        goto done;
    made = Py_NewRef(comp);
done:
    Py_DECREF(ctx);
    Py_XDECREF(out);
    Py_XDECREF(comp);
held:
    Py_DECREF(tensors);
    Py_DECREF(output);
    Py_DECREF(device);
    return made;
}

/* The future of a launch submitted with no spin (MODE_FUTURE): DeviceFuture(comp) of
 * its make_completion. */
static PyObject *
make_future(Express *self, PyObject *op, PyObject *stream, PyObject *box,
            Py_ssize_t s, uint32_t gen, uintptr_t address, PyObject *seq)
{
    PyObject *comp = make_completion(self, op, stream, box, s, gen, address, seq);
    if (comp == NULL)
        return NULL;
    PyObject *future = REGISTERED(FUTURE)->tp_alloc(REGISTERED(FUTURE), 0);
    if (future != NULL)
        field_set(&FUTURE(future)->comp, comp);
    else
        Py_DECREF(comp);
    return future;
}

/* The submitter a burst's native launch goes to (retained in *sub), and the context its
 * thread makes current (the backend's context_handle(ordinal), cached by the backend): 1 when
 * the launch can be queued, 0 when it is made here (no submitter, too many or too large
 * parameters), -1 an error. Called before the lock. */
static int
burst_target(Express *self, const native_launch *nl, PyObject *ordinal, subcore **sub,
             unsigned long long *context)
{
    *sub = NULL;
    subcore *fence = launch_fence();
    if (fence == NULL || nl->n > SUB_PARAMS_MAX || nl->extent > SUB_BLOCK_MAX)
        return 0;
    /* (the backend's cache, where it keeps one) */
    PyObject *handles = BACKEND(self->backend)->context_handles;
    PyObject *h = handles != NULL && PyDict_CheckExact(handles)
                      ? PyDict_GetItemWithError(handles, ordinal) : NULL;
    Py_XINCREF(h);
    if (h == NULL) {
        if (PyErr_Occurred())
            return -1;
        PyObject *a[2] = {NULL, ordinal};
        h = backend_call(BACKEND(self->backend)->context_handle, "context_handle", a + 1,
                         1 | PY_VECTORCALL_ARGUMENTS_OFFSET);
        if (h == NULL)
            return -1;
    }
    int r = get_u64(h, context);
    Py_DECREF(h);
    if (r < 0)
        return -1;
    fence = launch_fence(); /* (again: Python may have run) */
    if (fence == NULL)
        return 0;
    subcore_retain(fence); /* held until the launch is queued or made */
    *sub = fence;
    return 1;
}

/* Queue the native launch nl (flag: the slab word of slot s, written with gen) for sub's
 * thread; 1 queued (its ticket in *ticket), 0 not (the ring is full, the submitter
 * closed: the caller launches it). Called under the lock: stream order is push order. */
static int
burst_push(subcore *sub, const native_launch *nl, unsigned long long context, Py_ssize_t s,
           uint32_t gen, uint64_t *ticket)
{
    sub_rec rec;
    rec.function = (uintptr_t)nl->c.function;
    rec.stream = (uintptr_t)nl->c.stream;
    rec.context = (uintptr_t)context;
    rec.gx = nl->c.gx, rec.gy = nl->c.gy, rec.gz = nl->c.gz;
    rec.bx = nl->c.bx, rec.by = nl->c.by, rec.bz = nl->c.bz;
    rec.shmem = nl->c.shmem;
    rec.slot = (uint32_t)s;
    rec.value = gen;
    rec.nparams = (uint32_t)nl->n;
    for (Py_ssize_t i = 0; i < nl->n; i++)
        rec.offsets[i] = (uint16_t)((const unsigned char *)nl->slots[i] - nl->block);
    memcpy(rec.block, nl->block, nl->extent);
    int thread_err = 0;
    return subcore_push(sub, &rec, ticket, &thread_err) == SUB_OK;
}

int
lock_and_claim(Express *self, PyObject *stream, PyObject **slot, Py_ssize_t *s, uint32_t *gen,
               uintptr_t *address, PyObject **result)
{
    *slot = *result = NULL;
    int t = try_lock(self);
    if (t <= 0) { /* held: the generic path waits for it (or raises) */
        if (t == 0)
            *result = generic(self);
        return t;
    }
    if (STREAM(stream)->capturing != Py_False ||
        !ledger_claim(self->slots, s, gen, address)) {
        /* no slot: the generic path falls back to a host callback, and logs it; a capture
         * begun since the check (under this lock, by another thread): it records it */
        *result = unlock(self) < 0 ? NULL : generic(self);
        return *result == NULL ? -1 : 0;
    }
    if ((*slot = PyLong_FromSsize_t(*s)) == NULL) {
        unclaim_keeping_error(self, *s);
        unlock_keeping_error(self);
        return -1;
    }
    return 1;
}

/* Whether an await of a launch of prepared on grid, spinning spin_us, parks at once
 * instead (wake.py sets the hint): grid is the kernel's parked_grid (the same object, or
 * an equal tuple or int; a library call's kind may hold any hashable) and four spins are
 * at most parked_ns, its learnt time. */
static int
parks_at_once(PyObject *prepared, PyObject *grid, long long spin_us)
{
    PyObject *parked = PREPARED(prepared)->parked_grid;
    if (spin_us <= 0 || parked == NULL || parked == Py_None ||
        spin_us * 4000 > PREPARED(prepared)->parked_ns)
        return 0;
    if (parked == grid)
        return 1;
    if (grid == NULL || Py_TYPE(parked) != Py_TYPE(grid) ||
        !(PyTuple_CheckExact(grid) || PyLong_CheckExact(grid)))
        return 0;
    Py_INCREF(parked); /* (held: a tuple's items compare with Python code, which may */
    Py_INCREF(grid);   /* set parked_grid again) */
    int equal = PyObject_RichCompareBool(parked, grid, Py_EQ);
    Py_DECREF(parked);
    Py_DECREF(grid);
    if (equal < 0) { /* (an item's __eq__ raised: then the spin) */
        PyErr_Clear();
        return 0;
    }
    return equal;
}

/* Whether the core takes op as a launch: cuasync's launch type (registered) or a subclass
 * of it, the launch of a kernel taking a cancel word (kernel.py's _CancellableLaunch),
 * whose Python puts the word of the scope it is executed in as its last argument before
 * it calls the core (an await, a blocking sync; none for a future). */
static inline int
is_launch_op(PyObject *op)
{
    PyTypeObject *launch = REGISTERED(LAUNCH);
    return launch != NULL && PyObject_TypeCheck(op, launch);
}

/* Express.launch's work (see the module comment). */
/* (*settled: 1 when the result is the output of work that landed and was settled; 2: an
 * await in a burst queued; 3: an await parked, the result its Suspension) */
static PyObject *
express_launch(Express *self, PyObject *op, PyObject *stream, long mode, PyObject *adapter,
               int *settled, queued_launch *queued)
{
    *settled = 0;
    if (self->hub == NULL) { /* (cleared: interpreter shutdown) */
        PyErr_SetString(PyExc_RuntimeError, "the express core is cleared");
        return NULL;
    }
    if (!is_launch_op(op) || !Py_IS_TYPE(stream, REGISTERED(STREAM)))
        return generic(self);
    PyObject *device = OP(op)->device;
    PyObject *prepared = LAUNCH(op)->prepared;
    PyObject *tensors = LAUNCH(op)->tensors;
    PyObject *output = LAUNCH(op)->output;
    PyObject *submitted = STREAM(stream)->submitted;
    if (device == NULL || STREAM(stream)->device != device || prepared == NULL ||
        !PyObject_TypeCheck(prepared, REGISTERED(PREPARED)) || tensors == NULL ||
        !PyTuple_CheckExact(tensors) || output == NULL || submitted == NULL ||
        !PyLong_CheckExact(submitted) || STREAM(stream)->capturing != Py_False ||
        PyTuple_GET_SIZE(tensors) > PARAM_COUNT_MAX)
        return generic(self);
    int t;
    PyObject *fast_launch, *current, *budget; /* (launch_state's: dropped on the way out) */
    if (launch_state(self, &t, &fast_launch, &current, &budget) < 0)
        return NULL;
    if (!t)
        return generic(self);
#define EARLY_RETURN(value)                                                                   \
    do {                                                                                      \
        PyObject *value_ = (value);                                                           \
        Py_DECREF(fast_launch);                                                               \
        Py_DECREF(current);                                                                   \
        Py_DECREF(budget);                                                                    \
        return value_;                                                                        \
    } while (0)
    PyObject *ordinal = PREPARED(prepared)->ordinal;
    if (ordinal == NULL)
        EARLY_RETURN(generic(self));
    PyObject *memops = PyDict_GetItemWithError(self->memops, ordinal);
    if (memops == NULL && !PyErr_Occurred()) {
        /* not asked yet (a process's first launch on the device): asked here, as
         * the generic path does, so that the first launch is not declined */
        memops = ask_memops(self, ordinal);
        if (memops == NULL)
            EARLY_RETURN(NULL);
    }
    if (memops != Py_True)
        EARLY_RETURN(PyErr_Occurred() ? NULL : generic(self));
    char uses[PARAM_COUNT_MAX];
    PyObject *allocs[PARAM_COUNT_MAX];
    Py_ssize_t ntensors = PyTuple_GET_SIZE(tensors);
    if (!check_tensors(tensors, LAUNCH(op)->writes, device, uses, allocs))
        EARLY_RETURN(generic(self));
#undef EARLY_RETURN

    /* made before the lock: what a native launch needs, and the access records */
    native_launch nl;
    PyObject *records[PARAM_COUNT_MAX];
    PyObject *box = NULL, *result = NULL;
    Py_ssize_t made = 0;
    subcore *sub = NULL; /* a burst's submitter (retained) */
    unsigned long long context = 0;
    int kind = launch_kind(self, op, stream, prepared, fast_launch, current, &nl);
    if (kind < 0)
        goto done;
    if (kind != BY_NATIVE && (box = PyObject_CallNoArgs(self->box_type)) == NULL)
        goto done;
    for (; made < ntensors; made++) { /* (a write Python records leaves its tuple unused) */
        if (uses[made] != USE_WRITE) {
            records[made] = NULL;
            continue;
        }
        if ((records[made] = PyTuple_New(2)) == NULL)
            goto done;
        PyTuple_SET_ITEM(records[made], 0, Py_NewRef(stream));
        PyTuple_SET_ITEM(records[made], 1, Py_NewRef(Py_None));
    }

    /* a burst's submitter and context, looked up before the lock */
    if (mode == MODE_BURST && kind == BY_NATIVE &&
        burst_target(self, &nl, ordinal, &sub, &context) < 0)
        goto done;

    /* the spin's inputs, read before the lock, so that nothing but running out of
     * memory can fail once the work is launched (checked in every mode: a burst's await
     * and a future spin later, in Python, on the same budget) */
    long long budget_us = 0;
    int long_ops = 0;
    if (!PyLong_Check(budget)) {
        PyErr_Format(PyExc_TypeError, "the hub's spin_budget_us must be an int, not %.100s",
                     Py_TYPE(budget)->tp_name);
        goto done;
    }
    if (mode == MODE_AWAIT || mode == MODE_BLOCK) {
        budget_us = PyLong_AsLongLong(budget);
        if (budget_us == -1 && PyErr_Occurred())
            goto done;
        if (mode == MODE_AWAIT && budget_us && (long_ops = adapter_long_ops(adapter)) < 0)
            goto done;
    }
    PyObject *slot;
    Py_ssize_t s;
    uint32_t gen;
    uintptr_t address;
    if (lock_and_claim(self, stream, &slot, &s, &gen, &address, &result) <= 0)
        goto done;
    /* (read again under the lock: another thread may have submitted since) */
    submitted = STREAM(stream)->submitted;
    long long seqv = submitted != NULL && PyLong_CheckExact(submitted)
                         ? PyLong_AsLongLong(submitted) + 1 : -1;
    if (seqv < 0 && !PyErr_Occurred())
        PyErr_SetString(PyExc_SystemError, "a stream's submission number is not an int");
    PyObject *seq = PyErr_Occurred() ? NULL : PyLong_FromLongLong(seqv);
    if (seq == NULL) { /* (nothing was launched: the slot is free) */
        unclaim_keeping_error(self, s);
        Py_DECREF(slot);
        unlock_keeping_error(self);
        goto done;
    }
    field_set(&STREAM(stream)->submitted, Py_NewRef(seq));
    int failed = 0, active = 0; /* active: LOCAL.active set */
    int pushed = 0;             /* queued for the submitter (a burst) */
    uint64_t ticket = 0;
    for (Py_ssize_t i = 0; i < ntensors && !failed; i++) { /* Allocation.use */
        PyObject *alloc = allocs[i];
        int order = needs_ordering(alloc, stream, uses[i] == USE_WRITE);
        if (order < 0) {
            failed = 1;
            break;
        }
        PyObject *reads = ALLOCATION(alloc)->reads;
        if (order) { /* another stream to order after: Python records it */
            cuasync_active = 1;
            active = 1;
            PyObject *a[4] = {alloc, stream, seq, uses[i] == USE_WRITE ? Py_True : Py_False};
            PyObject *use = PROCESS(self->process)->alloc_use; /* (Allocation.use) */
            if (use == NULL || use == Py_None)
                PyErr_SetString(PyExc_RuntimeError, "PROCESS.alloc_use is not set");
            PyObject *r = use == NULL || use == Py_None ? NULL
                                                       : PyObject_Vectorcall(use, a, 4, NULL);
            failed = r == NULL;
            Py_XDECREF(r);
        }
        else if (uses[i] == USE_WRITE) {
            /* (the records dropped may be the last references to other streams: their
             * finalizers run here, under the lock, with LOCAL.active set) */
            cuasync_active = 1;
            active = 1;
            if (PyDict_GET_SIZE(reads))
                PyDict_Clear(reads);
            PyObject *rec = records[i];
            records[i] = NULL;
            PyObject **item = &((PyTupleObject *)rec)->ob_item[1]; /* not shared yet */
            Py_SETREF(*item, Py_NewRef(seq));
            field_set(&ALLOCATION(alloc)->write, rec);
        }
        else if (PyDict_SetItem(reads, stream, seq) < 0) {
            failed = 1;
        }
    }
    if (failed) {
        /* (a use that failed: nothing launched; the handler below releases it all) */
    }
    else if (kind == BY_NATIVE && sub != NULL &&
             (pushed = burst_push(sub, &nl, context, s, gen, &ticket))) {
        self->native_launches++;
        self->burst_queued++;
    }
    else if (kind == BY_NATIVE) {
        long rc = launch_write(nl.lk, nl.wv, &nl.c, nl.n ? nl.slots : NULL, address, gen);
        self->native_launches++;
        if (rc != 0) { /* the backend raises why (a write that failed, or made again) */
            PyObject *addr = PyLong_FromUnsignedLongLong(address);
            PyObject *genv = PyLong_FromUnsignedLong(gen);
            failed = addr == NULL || genv == NULL ||
                     (cuasync_active = 1, 0) ||
                     launch_failed(self, op, stream, rc, addr, genv) < 0;
            active = 1;
            Py_XDECREF(addr);
            Py_XDECREF(genv);
        }
    }
    else {
        PyObject *addr = PyLong_FromUnsignedLongLong(address);
        PyObject *genv = PyLong_FromUnsignedLong(gen);
        failed = addr == NULL || genv == NULL ||
                 python_launch(self, kind, op, stream, fast_launch, box, addr, genv) < 0;
        active = 1;
        Py_XDECREF(addr);
        Py_XDECREF(genv);
    }
    if (!failed && active)
        cuasync_active = 0;
    if (failed) { /* express._core_failed gives the slot back, releases what the op holds */
        saved_error exc;
        save_error(&exc);
        if (box == NULL)
            box = PyObject_CallNoArgs(self->box_type);
        if (box != NULL) {
            PyObject *a[6] = {self->hub, op, stream, seq, slot, box};
            PyObject *r = PyObject_Vectorcall(self->failed, a, 6, NULL);
            Py_XDECREF(r);
        }
        PyErr_Clear(); /* the launch's error is the one raised */
        cuasync_active = 0;
        unlock(self);
        PyErr_Clear();
        restore_error(&exc);
        Py_DECREF(seq);
        Py_DECREF(slot);
        goto done;
    }
    self->launches++;
    PyObject *spin_obj = NULL; /* None: await_spin_us skipped it */
    if (unlock(self) < 0)
        goto unsettled_error;
    if (mode == MODE_BURST) { /* no spin: the await steps aside, and settles it later */
        queued->slot = slot;
        queued->seq = seq;
        queued->box = box;
        box = NULL;
        queued->index = (uint32_t)s;
        queued->gen = gen;
        queued->address = address;
        queued->sub = NULL;
        if (pushed) {
            subcore_retain(sub);
            queued->sub = sub;
        }
        queued->ticket = ticket;
        *settled = 2;
        result = Py_NewRef(Py_None);
        goto done;
    }

    /* the spin, outside the lock (express.spin_for) */
    int long_ops_was = 0;      /* the adapter's long_ops, read for an await's spin */
    long long spin_us = 0;
    PyObject *completed = STREAM(stream)->completed;
    long long done_seq = completed != NULL && PyLong_CheckExact(completed)
                             ? PyLong_AsLongLong(completed) : 0;
    if (mode == MODE_AWAIT || mode == MODE_BLOCK) {
        spin_us = budget_us; /* (read before the lock: nothing can fail there after it) */
        if (mode == MODE_AWAIT && done_seq >= seqv - 1 &&
            parks_at_once(LAUNCH(op)->prepared, LAUNCH(op)->grid, spin_us)) {
            spin_us = 0; /* known to outlast the spin: park at once (wake.py) */
            self->parked_at_once++;
        }
        else if (mode == MODE_AWAIT && spin_us) {
            long_ops_was = long_ops;
            if (long_ops || done_seq < seqv - 1) {
                PyObject *a[4] = {self->hub, adapter, stream, seq};
                spin_obj = PyObject_Vectorcall(self->spin_us, a, 4, NULL);
                if (spin_obj == NULL)
                    goto unsettled_error;
                spin_us = spin_obj == Py_None ? 0 : PyLong_AsLongLong(spin_obj);
                if (spin_us == -1 && PyErr_Occurred())
                    goto unsettled_error;
            }
        }
        else if (mode == MODE_BLOCK && done_seq < seqv - 1) {
            spin_us = 0;
        }
    }
    int landed = spin_us > 0 ? spin_flag((_Atomic uint32_t *)address, gen,
                                         (uint64_t)spin_us * 1000u, 0)
                             : 0;
    if (landed && (box == NULL || PyList_GET_SIZE(box) == 0)) { /* settled here */
        if (long_ops_was) /* (only when it was set: the common await reads it only) */
            ADAPTER(adapter)->long_ops = 0;
        if (settle_inline(self, stream, s, seqv, seq) < 0)
            goto unsettled_error;
        Py_DECREF(seq);
        Py_DECREF(slot);
        Py_XDECREF(spin_obj);
        output = LAUNCH(op)->output; /* (again: Python may have run since) */
        result = Py_NewRef(output != NULL ? output : Py_None);
        *settled = 1;
        goto done;
    }
    /* (a native launch reports no error later: its box is made only for a future, whose
     * completion holds it; the tuple says None, one object less per launch in flight) */
    if (mode == MODE_FUTURE && box == NULL &&
        (box = PyObject_CallNoArgs(self->box_type)) == NULL)
        goto unsettled_error;
    if (mode == MODE_FUTURE) {
        result = make_future(self, op, stream, box, s, gen, address, seq);
    }
    else if (mode == MODE_AWAIT && !landed) {
        /* a parked await: its Completion made here, and its suspension (HubCore.suspend's,
         * park.c) to park on, its wait begun at the launch (before the spin); the spin ran
         * out (unless the policy skipped it): the loop's awaits may skip theirs now */
        PyObject *comp = NULL;
        if (box != NULL || (box = PyObject_CallNoArgs(self->box_type)) != NULL)
            comp = make_completion(self, op, stream, box, s, gen, address, seq);
        if (comp != NULL) {
            if (spin_obj != Py_None && adapter_long_ops(adapter) >= 0)
                ADAPTER(adapter)->long_ops = 1;
            if (!PyErr_Occurred())
                result = suspension_new(self->hub, comp, adapter,
                                        (long long)now_ns() - spin_us * 1000, op);
        }
        if (comp != NULL && result == NULL) { /* (_core_abandon's completion replaces it in
                                                  the table, for the watcher) */
            Py_DECREF(comp);
            goto unsettled_error;
        }
        Py_XDECREF(comp);
        *settled = 3;
    }
    else {
        PyObject *spin_item = spin_obj == Py_None ? Py_NewRef(Py_None) : PyLong_FromLongLong(spin_us);
        PyObject *addr = PyLong_FromUnsignedLongLong(address);
        PyObject *genv = PyLong_FromUnsignedLong(gen);
        if (spin_item && addr && genv) {
            /* ticket -1: made at once; held None: the op holds what its launch uses */
            result = PyTuple_Pack(10, self->hub, box != NULL ? box : Py_None, slot, genv, addr,
                                  seq, spin_item, landed ? Py_True : Py_False, self->minus_one,
                                  Py_None);
        }
        Py_XDECREF(spin_item);
        Py_XDECREF(addr);
        Py_XDECREF(genv);
    }
    if (result == NULL)
        goto unsettled_error;
    Py_DECREF(seq);
    Py_DECREF(slot);
    Py_XDECREF(spin_obj);
    goto done;

unsettled_error:
    /* launched, and an error before it is settled (out of memory, a failing Python
     * call): express._core_abandon gives its completion to the background watcher,
     * which frees the slot once the work lands; the error is raised */
    {
        saved_error e;
        save_error(&e);
        PyObject *addr = PyLong_FromUnsignedLongLong(address);
        PyObject *genv = PyLong_FromUnsignedLong(gen);
        if (addr != NULL && genv != NULL) {
            PyObject *a[8] = {self->hub, op, stream, box == NULL ? Py_None : box, slot, genv,
                              addr, seq};
            PyObject *r = PyObject_Vectorcall(self->abandon, a, 8, NULL);
            Py_XDECREF(r);
        }
        Py_XDECREF(addr);
        Py_XDECREF(genv);
        PyErr_Clear();
        restore_error(&e);
    }
    Py_CLEAR(result);
    Py_DECREF(seq);
    Py_DECREF(slot);
    Py_XDECREF(spin_obj);
done:
    for (Py_ssize_t i = 0; i < made; i++)
        Py_XDECREF(records[i]);
    Py_XDECREF(box);
    Py_DECREF(fast_launch);
    Py_DECREF(current);
    Py_DECREF(budget);
    if (sub != NULL)
        subcore_drop(sub);
    return result;
}

/* -- the type ------------------------------------------------------------------------ */

/* The names the core still looks up, each for a reason (docs/design.md lists them):
 * numpy's public attributes, a foreign type's API (``dtype.itemsize``: a tensor's element
 * size; an array's ``shape``: a small upload's source), read without a numpy build
 * dependency. Everything of cuasync's own is a field: of the core types (the backend's
 * calls too: BackendCore's), of the hub, of PROCESS. */
static int
intern_names(Express *self)
{
#define NAME(field, text)                                                                     \
    if ((self->field = PyUnicode_InternFromString(text)) == NULL)                             \
        return -1;
    NAME(s_itemsize, "itemsize")
    NAME(s_shape, "shape")
#undef NAME
    return 0;
}

/* A field of the hub (HubCore's), checked: a new reference, or NULL with an error. */
static PyObject *
hub_field(PyObject *v, const char *name, PyTypeObject *type)
{
    if (v == NULL) {
        PyErr_Format(PyExc_AttributeError, "the hub has no %s yet", name);
        return NULL;
    }
    Py_INCREF(v);
    if (type != NULL && !Py_IS_TYPE(v, type)) {
        PyErr_Format(PyExc_TypeError, "hub.%s must be a %.50s, not %.100s", name, type->tp_name,
                     Py_TYPE(v)->tp_name);
        Py_CLEAR(v);
    }
    return v;
}


/* Express(hub): what it is made of and hands work back to, read from the hub's fields
 * (HubCore's) once; the lock is the module's EXEC_LOCK. */
static PyObject *
Express_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"hub", NULL};
    PyObject *hub;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O:Express", kwlist, &hub))
        return NULL;
    /* (the classes the core makes and recognizes: declared on their core types) */
    static const char *declared[REG_COUNT] = {
        "Stream", "Allocation", "Tensor", "PreparedKernel", "the launch op", "ExecutionContext",
        "Output", "DeviceFuture", "Completion"};
    for (int i = 0; i < REG_EXPRESS_NEEDS; i++) {
        if (cuasync_registered[i] == NULL) {
            PyErr_Format(PyExc_RuntimeError, "%s is not declared yet (import cuasync first)",
                         declared[i]);
            return NULL;
        }
    }
    if (!core_subtype_check((PyObject *)Py_TYPE(hub), "HubCore", "hub's type"))
        return NULL;
    HubCore *h = HUB(hub);
    PyObject *hooks[] = {h->box_type, h->await_spin_us, h->core_failed, h->core_abandon};
    for (size_t i = 0; i < sizeof hooks / sizeof hooks[0]; i++) {
        if (hooks[i] == NULL || !PyCallable_Check(hooks[i])) {
            PyErr_SetString(PyExc_TypeError, "the hub's _box_type, _await_spin_us, _core_failed "
                                             "and _core_abandon must be callable");
            return NULL;
        }
    }
    PyObject *lock = module_exec_lock(type), *process = module_process(type);
    if (lock == NULL || process == NULL || h->generic == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_AttributeError, "the hub has no _generic");
        return NULL;
    }
    Express *self = (Express *)PyType_GenericAlloc(type, 0);
    if (self == NULL)
        return NULL;
    self->hub = Py_NewRef(hub);
    self->lock = Py_NewRef(lock);
    self->process = Py_NewRef(process);
    self->box_type = Py_NewRef(h->box_type);
    self->generic = Py_NewRef(h->generic);
    self->spin_us = Py_NewRef(h->await_spin_us);
    self->failed = Py_NewRef(h->core_failed);
    self->abandon = Py_NewRef(h->core_abandon);
    PyObject *slots = NULL;
    if (intern_names(self) < 0 || (self->one = PyLong_FromLong(1)) == NULL ||
        (self->minus_one = PyLong_FromLong(-1)) == NULL ||
        (self->backend = hub_field(HUB(hub)->backend, "backend", NULL)) == NULL ||
        !core_subtype_check((PyObject *)Py_TYPE(self->backend), "BackendCore", "hub.backend's type") ||
        (self->stats = hub_field(HUB(hub)->stats, "stats", NULL)) == NULL ||
        (slots = hub_field(HUB(hub)->slots, "slots", NULL)) == NULL ||
        !ledger_check(slots, "hub.slots") || (self->no_args = PyTuple_New(0)) == NULL ||
        (self->memops = hub_field(HUB(hub)->memops, "_memops", &PyDict_Type)) == NULL ||
        upload_init(self) < 0)
        goto fail;
    self->slots = (SlotLedger *)Py_NewRef(slots);
    Py_DECREF(slots);
    return (PyObject *)self;
fail:
    Py_XDECREF(slots);
    Py_DECREF(self);
    return NULL;
}

static int
Express_traverse(Express *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->hub);
    Py_VISIT(self->backend);
    Py_VISIT(self->stats);
    Py_VISIT(self->slots);
    Py_VISIT(self->memops);
    Py_VISIT(self->lock);
    Py_VISIT(self->process);
    Py_VISIT(self->box_type);
    Py_VISIT(self->generic);
    Py_VISIT(self->spin_us);
    Py_VISIT(self->failed);
    Py_VISIT(self->abandon);
    return upload_traverse(self, visit, arg);
}

static int
Express_clear(Express *self)
{
    Py_CLEAR(self->dims_grid);
    Py_CLEAR(self->dims_block);
    Py_CLEAR(self->hub);
    Py_CLEAR(self->backend);
    Py_CLEAR(self->stats);
    Py_CLEAR(self->slots);
    Py_CLEAR(self->memops);
    Py_CLEAR(self->lock);
    Py_CLEAR(self->process);
    Py_CLEAR(self->box_type);
    Py_CLEAR(self->generic);
    Py_CLEAR(self->spin_us);
    Py_CLEAR(self->failed);
    Py_CLEAR(self->abandon);
    upload_clear(self);
    return 0;
}

static void
Express_dealloc(Express *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    Express_clear(self);
    PyObject **names[] = {&self->s_itemsize, &self->one, &self->minus_one, &self->no_args,
                          &self->s_shape};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        Py_CLEAR(*names[i]);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

/* Whether o is an Express (of any interpreter's type: told by its dealloc function). */
static inline int
is_express(PyObject *o)
{
    return Py_TYPE(o)->tp_dealloc == (destructor)Express_dealloc;
}

static PyObject *
Express_get_counter(Express *self, void *which)
{
    unsigned long long v = which == (void *)0   ? self->launches
                           : which == (void *)1 ? self->native_launches
                           : which == (void *)2 ? self->declined
                           : which == (void *)3 ? self->completed_inline
                           : which == (void *)4 ? self->burst_awaits
                           : which == (void *)5 ? self->burst_queued
                           : which == (void *)6 ? self->burst_handed_over
                           : which == (void *)8 ? self->parked_at_once
                                                : self->uploads;
    return PyLong_FromUnsignedLongLong(v);
}

/* Express.parks_at_once(op, spin_us): the native await's test, for an await in a burst
 * that spins in Python after stepping aside (express._finish_await) */
static PyObject *
Express_parks_at_once(Express *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs)
{
    if (check_nargs("parks_at_once", nargs, 2) < 0)
        return NULL;
    long long spin_us = PyLong_AsLongLong(args[1]);
    if (spin_us == -1 && PyErr_Occurred())
        return NULL;
    PyObject *op = args[0];
    if (!is_launch_op(op) || LAUNCH(op)->prepared == NULL ||
        !PyObject_TypeCheck(LAUNCH(op)->prepared, REGISTERED(PREPARED)))
        Py_RETURN_FALSE;
    return PyBool_FromLong(parks_at_once(LAUNCH(op)->prepared, LAUNCH(op)->grid, spin_us));
}

/* Express.submit: the op taken (its _consumed set) and launched with no spin, and its
 * DeviceFuture made here; the generic sentinel, the op left untaken, when it is not the
 * core's case (or already taken: the generic path raises why). */
static PyObject *
Express_submit(Express *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (check_nargs("submit", nargs, 2) < 0)
        return NULL;
    PyObject *op = args[0];
    if (self->hub == NULL) { /* (cleared: interpreter shutdown) */
        PyErr_SetString(PyExc_RuntimeError, "the express core is cleared");
        return NULL;
    }
    if (!is_launch_op(op))
        return generic(self);
    if (OP(op)->consumed != Py_False) /* (not declined: never considered) */
        return Py_NewRef(self->generic);
    field_set(&OP(op)->consumed, Py_NewRef(Py_True));
    int settled;
    PyObject *r = express_launch(self, op, args[1], MODE_FUTURE, Py_None, &settled, NULL);
    if (r == self->generic) /* nothing done: the op is not taken */
        field_set(&OP(op)->consumed, Py_NewRef(Py_False));
    return r;
}

/* Express.submit for C callers (launches.c's TensorSubmit): core an Express, else the
 * generic sentinel is not known: NULL with a TypeError. */
PyObject *
express_submit(PyObject *core, PyObject *op, PyObject *stream)
{
    if (!is_express(core)) {
        PyErr_SetString(PyExc_TypeError, "the hub's express is not an Express");
        return NULL;
    }
    PyObject *args[2] = {op, stream};
    return Express_submit((Express *)core, args, 2);
}

/* The generic sentinel of an Express (borrowed; core checked by the caller). */
PyObject *
express_generic(PyObject *core)
{
    return ((Express *)core)->generic;
}

/*
 * Express.look(stream, slot, gen, seq, ticket): a look at the flag of a launch this core
 * queued for an op handed to asyncio as a future (op_future.Watched.look), and
 * express.settle_look's common case done here: the flag is the slab word of the
 * ledger's claimed slot (its generation gen: no address comes from Python). Returns
 *   1  landed and settled (the stream's completed number, the slot freed, the counter),
 *   0  not landed,
 *  -1  not landed and not made yet (ticket >= 0: the submitter has not reached it),
 *   2  landed, where the submitter's status word for the slot says it failed (or no
 *      submitter to ask): Python settles it (express.settle_look raises it).
 */
/* Express.look's look on core (an Express, checked here) as a C int: 1, 0, -1, 2 as
 * there, or -3 with an error set (op_future's Watched.look calls it directly). */
int
express_look_at(PyObject *core, PyObject *stream, long long slot, uint32_t gen, PyObject *seq,
                long long ticket)
{
    if (!is_express(core)) {
        PyErr_SetString(PyExc_TypeError, "the hub's express is not an Express");
        return -3;
    }
    if (!Py_IS_TYPE(stream, REGISTERED(STREAM)) || !PyLong_CheckExact(seq)) {
        PyErr_SetString(PyExc_TypeError, "look(stream, slot, gen, seq, ticket): a Stream and ints");
        return -3;
    }
    Express *self = (Express *)core;
    SlotLedger *l = self->slots;
    if (l == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "the express core is cleared");
        return -3;
    }
    _Atomic uint32_t *word = ledger_word(l, slot, gen);
    if (word == NULL)
        return -3;
    if (!gen_reached(load_acquire(word), gen)) {
        subcore *sub = ticket >= 0 ? launch_fence() : NULL;
        return sub != NULL && subcore_done(sub) <= (uint64_t)ticket ? -1 : 0;
    }
    if (ticket >= 0) {
        subcore *sub = launch_fence();
        if (sub == NULL || subcore_status(sub, (uint32_t)slot) != 0)
            return 2;
    }
    long long seqv = PyLong_AsLongLong(seq);
    if (seqv == -1 && PyErr_Occurred())
        return -3;
    if (settle_inline(self, stream, (Py_ssize_t)slot, seqv, seq) < 0)
        return -3;
    return 1;
}

static PyObject *
Express_look(Express *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (check_nargs("look", nargs, 5) < 0)
        return NULL;
    long long slot, ticket;
    uint32_t gen;
    if (get_i64(args[1], &slot) < 0 || get_u32(args[2], "gen", &gen) < 0 ||
        get_i64(args[4], &ticket) < 0)
        return NULL;
    int found = express_look_at((PyObject *)self, args[0], slot, gen, args[3], ticket);
    return found == -3 ? NULL : PyLong_FromLong(found);
}

static PyMethodDef Express_methods[] = {
    {"launch", (PyCFunction)(void (*)(void))Express_launch, METH_FASTCALL,
     "launch($self, op, stream, mode, adapter, /)\n--\n\n"
     "The express submission of the launch op on stream (mode 0: no spin, 1: an await's "
     "spin, 2: a blocking sync's, 4: an await in a burst, queued for the submitter, no "
     "spin; adapter: the loop's, for modes 1 and 4). Returns the op's output (landed and "
     "settled), an express.Sent tuple (submitted, not settled; landed None in mode 4), "
     "in mode 1 where the work did not land within the spin the await's suspension "
     "(HubCore.suspend's: ``yield from`` it), or the generic sentinel (nothing done)."},
    {"upload", (PyCFunction)(void (*)(void))Express_upload, METH_FASTCALL,
     "upload($self, op, stream, mode, adapter, /)\n--\n\n"
     "The express submission of a small from_host op on stream (modes as launch's): an "
     "express.Sent tuple (Python parks it), the new tensor (an await's or a blocking "
     "call's copy that landed within the spin: settled), or the generic sentinel (nothing "
     "done). Its classes and what it calls are declared: the core types' classes, PROCESS's "
     "fields."},
    {"parks_at_once", (PyCFunction)(void (*)(void))Express_parks_at_once, METH_FASTCALL,
     "parks_at_once($self, op, spin_us, /)\n--\n\n"
     "Whether an await of the launch op, spinning spin_us, parks at once instead: its "
     "kernel's parked_grid is its grid, and four spins are at most its parked_ns."},
    {"look", (PyCFunction)(void (*)(void))Express_look, METH_FASTCALL,
     "look($self, stream, slot, gen, seq, ticket, /)\n--\n\n"
     "A look at the flag of a launch queued for an op handed to asyncio as a future (slot "
     "claimed with generation gen; ticket: the submitter's, or -1): 1 landed and settled "
     "(the stream's number, the slot, the counter), 0 not landed, -1 not landed and not "
     "made yet, 2 landed with a failure in the submitter's status word (Python settles "
     "it)."},
    {"drop_staging", (PyCFunction)Express_drop_staging, METH_NOARGS,
     "drop_staging($self, /)\n--\n\n"
     "The idle pinned blocks kept for small uploads go back to the staging pool."},
    {"submit", (PyCFunction)(void (*)(void))Express_submit, METH_FASTCALL,
     "submit($self, op, stream, /)\n--\n\n"
     "op.submit_on(stream) for a launch op: taken, launched with no spin, and its "
     "DeviceFuture returned; or the generic sentinel, the op untaken and nothing done."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Express_getset[] = {
    {"launches", (getter)Express_get_counter, NULL, "launches this core submitted", (void *)0},
    {"native_launches", (getter)Express_get_counter, NULL,
     "of them, launches packed and made natively (no Python call)", (void *)1},
    {"declined", (getter)Express_get_counter, NULL,
     "calls that returned the generic sentinel, having done nothing", (void *)2},
    {"completed_inline", (getter)Express_get_counter, NULL,
     "launches it settled itself, landed within the spin (in stats().completed_inline)",
     (void *)3},
    {"burst_awaits", (getter)Express_get_counter, NULL,
     "awaits in a burst that stepped aside and settled their launch here (in "
     "stats().burst_awaits and stats().completed_inline)", (void *)4},
    {"burst_queued", (getter)Express_get_counter, NULL,
     "launches of awaits in a burst queued for the native submitter", (void *)5},
    {"burst_handed_over", (getter)Express_get_counter, NULL,
     "awaits in a burst handed to Python's path (work still running after their steps "
     "aside, an error)", (void *)6},
    {"staging_idle_bytes", (getter)Express_get_staging_idle, NULL,
     "bytes of the idle pinned blocks kept for small uploads", NULL},
    {"staging_reuses", (getter)Express_get_staging_reuses, NULL,
     "small uploads served an idle pinned block kept here", NULL},
    {"uploads", (getter)Express_get_counter, NULL,
     "small from_host ops this core submitted (Express.upload)", (void *)7},
    {"parked_at_once", (getter)Express_get_counter, NULL,
     "awaits of a launch that parked without the inline spin, their kernel and grid known "
     "to outlast it (in stats().spins_skipped_long)", (void *)8},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot Express_slots[] = {
    {Py_tp_new, (void *)Express_new},
    {Py_tp_dealloc, (void *)Express_dealloc},
    {Py_tp_traverse, (void *)Express_traverse},
    {Py_tp_clear, (void *)Express_clear},
    {Py_tp_methods, Express_methods},
    {Py_tp_getset, Express_getset},
    {Py_tp_doc, (void *)"Express(hub)\n--\n\n"
                        "The express submission of a kernel launch op in one native call "
                        "(cuasync._core.express makes one per hub). The classes it makes and "
                        "recognizes are those declared on the core types; what it hands back "
                        "to Python is read from the hub's fields (HubCore's), once; its lock "
                        "is EXEC_LOCK."},
    {0, NULL},
};

PyType_Spec Express_spec = {
    .name = "cuasync._reactor.Express",
    .basicsize = sizeof(Express),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_HAVE_GC,
    .slots = Express_slots,
};

/* -- the await of a launch ----------------------------------------------------------- */

/*
 * LaunchAwait is the await of a launch op (LaunchCore's am_await calls the one in
 * PROCESS.launch_await; a method descriptor too, as a def in the class body is). It
 * returns a LaunchIter; that iterator's first send runs express.await_launch's
 * preamble (the loop's adapter, the op taken, the policy's stream) and the hub's core's
 * launch (nothing is submitted before it, as with a generator), and its result is
 *
 *   - the output, when the work landed within the spin;
 *   - ``finish(op, stream, adapter, sent)`` (a Python generator) for the rest: parking,
 *     errors, or the generic path when the core declined;
 *   - ``fallback(op)`` (express.await_launch itself) when this is not the common case:
 *     no hub or no core (or one replaced, as tests do), bursts stepping aside, an op
 *     already taken (it raises there).  The hub and the loop's adapter are read from the
 *     module's PROCESS (a ProcessCore): its hub, and its last loop's adapter when that is
 *     the running asyncio loop, else running_adapter()'s (trio, another loop).
 */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *fallback, *finish, *get_running_loop, *running_adapter, *policy_var, *stream_for,
        *done_t;
    PyObject *process; /* the module's PROCESS: completion's hub, loops' last loop */
    PyObject *s_others_ready;
    PyObject *current_tasks; /* asyncio's table of the task running each loop, or NULL */
    /* a TensorOp's await (NULL: a launch op's): its raw launch on a stream
     * (launch_plan.express_launch), TensorOpCore; the cancel scope's ContextVar
     * (_cancel_var.SCOPE; NULL: none) */
    PyObject *tensor_launch, *tensor_op_t, *scope_var;
    PyObject *s_await_on, *s_starting, *s_prepare_on, *s_adopt;
    /* op_future._start_pass (NULL: hand_over declines every op) */
    PyObject *start_pass;
    unsigned long long inline_awaits;
} LaunchAwait;

/*
 * LaunchIter: the iterator ``await op`` runs. Nothing happens until its first send (as
 * with the generator it replaces): that runs launch_await_start, which returns the
 * output (landed), a Python generator this iterator then hands every send, throw and
 * close to, or (an await in a burst) queues the launch and steps aside: the iterator
 * yields None, and each later send looks at its flag (ITER_QUEUED, below). Dropped
 * before its first send, it has done nothing (the op, not taken, warns that it was
 * never executed); dropped while delegating, it drops the generator, whose close
 * abandons the completion to the background watcher; dropped while queued, its
 * finalizer abandons the completion the same way.
 */
typedef struct {
    PyObject_HEAD
    LaunchAwait *awaiter;
    PyObject *op;       /* until the first send; while queued */
    PyObject *delegate; /* while delegating */
    int state;          /* ITER_FRESH, ITER_DELEGATING, ITER_DONE, ITER_QUEUED */
    int running;        /* inside a send, throw or close (re-entering one is refused) */
    /* while queued: the launch to settle, and where */
    Express *core;
    PyObject *stream, *adapter;
    queued_launch q;
    int steps, waits; /* steps aside since the launch was made, and before */
} LaunchIter;

enum { ITER_FRESH = 0, ITER_DELEGATING = 1, ITER_DONE = 2, ITER_QUEUED = 3 };

/* Steps aside an await in a burst takes once its launch is made, while its work has
 * not landed, before it hands over to Python's path (express._finish_await: the spin,
 * then the reactor); and at most, while the submitter has not made the launch yet (it
 * is behind the other tasks' launches, or stuck behind a held stream). */
#define BURST_STEPS_MAX 16
#define BURST_WAIT_STEPS_MAX 4096


static PyObject *
call_one(PyObject *f, PyObject *arg)
{
    return PyObject_Vectorcall(f, &arg, 1, NULL);
}

/* Whether an await on adapter's loop is in a burst: the loop lets a task step aside
 * (asyncio's and uvloop's), and the submitter has launches queued (a launch made here
 * would wait for them) or other tasks of the loop are ready to run: adapter.others_ready(),
 * whose common cases are read here from the adapter's fields (AdapterCore: asyncio's
 * ready queue; on uvloop, whether another task than this loop iteration's first has
 * awaited in it, the task running ``loop`` read from asyncio's table of current tasks).
 * 1, 0, or -1 an error. */
static int
in_burst(LaunchAwait *self, PyObject *adapter, PyObject *loop)
{
    if (!is_adapter(adapter)) {
        PyErr_Format(PyExc_TypeError, "an await's loop adapter must be an AdapterCore, not %.100s",
                     Py_TYPE(adapter)->tp_name);
        return -1;
    }
    AdapterCore *a = ADAPTER(adapter);
    if (!a->steps_aside)
        return 0;
    subcore *fence = launch_fence();
    if (fence != NULL && subcore_pending(fence) > 0)
        return 1;
    PyObject *ready = a->ready;
    if (ready != NULL && ready != Py_None) {
        Py_ssize_t n = PyObject_Length(ready);
        return n < 0 ? -1 : n > 0;
    }
    PyObject *first = a->tick_task;
    if (first != NULL && first != Py_None && loop != NULL && self->current_tasks != NULL) {
        PyObject *task = PyDict_GetItemWithError(self->current_tasks, loop);
        if (task == NULL && PyErr_Occurred())
            return -1;
        if (task != first)
            a->tick_shared = 1;
        return a->tick_shared;
    }
    PyObject *r = PyObject_CallMethodNoArgs(adapter, self->s_others_ready);
    if (r == NULL)
        return -1;
    int t = PyObject_IsTrue(r);
    Py_DECREF(r);
    return t;
}

/* The stream of an await on device: policy.next_stream(), where policy is the context's
 * policy or else the device's (its _policy). For a SingleStream and a
 * StreamPoolRoundRobin of exactly those types (recorded when declared), their stream
 * and rotation are read here from their fields (RoundRobinCore: _streams, _counter,
 * num_streams), as their next_stream does it; any other policy (or none: the device's
 * default is made by its property) is asked by stream_for(device), which calls its
 * next_stream, and checks its answer (*checked set). A new reference, or NULL with an
 * error. */
static PyObject *
next_stream_of(LaunchAwait *self, PyObject *policy, PyObject *device, int *checked)
{
    *checked = 0;
    if (policy == NULL) {
        *checked = 1;
        return call_one(self->stream_for, device);
    }
    if (Py_IS_TYPE(policy, REGISTERED(SINGLE_STREAM))) { /* its stream */
        PyObject *stream = SINGLE_STREAM(policy)->stream;
        if (stream != NULL)
            return Py_NewRef(stream);
    }
    if (Py_IS_TYPE(policy, REGISTERED(ROUND_ROBIN))) {
        PyObject *streams = ROUND_ROBIN(policy)->streams;
        PyObject *counter = ROUND_ROBIN(policy)->counter;
        PyObject *num = ROUND_ROBIN(policy)->num_streams;
        if (streams != NULL && PyList_CheckExact(streams) && counter != NULL && num != NULL &&
            PyLong_CheckExact(num)) {
            Py_ssize_t m = PyLong_AsSsize_t(num);
            if (m > 0 && m <= PyList_GET_SIZE(streams) && PyIter_Check(counter)) {
                Py_INCREF(streams); /* (held: the counter's next may run Python code) */
                Py_INCREF(num);
                PyObject *n = PyIter_Next(counter), *stream = NULL;
                Py_ssize_t i = n == NULL ? -1 : PyLong_AsSsize_t(n);
                if (n != NULL && i < 0 && PyErr_Occurred() &&
                    PyErr_ExceptionMatches(PyExc_OverflowError)) {
                    PyErr_Clear(); /* (a count past 2**63: Python's arithmetic) */
                    PyObject *r = PyNumber_Remainder(n, num);
                    i = r == NULL ? -1 : PyLong_AsSsize_t(r);
                    Py_XDECREF(r);
                }
                if (i >= 0 && PyList_GET_SIZE(streams) >= m)
                    stream = Py_NewRef(PyList_GET_ITEM(streams, i % m));
                else if (n == NULL && !PyErr_Occurred()) { /* (an exhausted counter) */
                    *checked = 1;
                    stream = call_one(self->stream_for, device);
                }
                else if (!PyErr_Occurred())
                    PyErr_SetString(PyExc_RuntimeError, "a stream pool changed while in use");
                Py_XDECREF(n);
                Py_DECREF(streams);
                Py_DECREF(num);
                return stream;
            }
        }
        if (PyErr_Occurred())
            return NULL;
    }
    *checked = 1;
    return call_one(self->stream_for, device);
}

/* Whether the weak reference w refers to o (PyWeakref_GET_OBJECT is deprecated in 3.13). */
static inline int
weakref_is(PyObject *w, PyObject *o)
{
#if PY_VERSION_HEX >= 0x030D0000
    PyObject *r;
    if (PyWeakref_GetRef(w, &r) < 0) {
        PyErr_Clear();
        return 0;
    }
    int same = r == o;
    Py_XDECREF(r);
    return same;
#else
    return PyWeakref_GET_OBJECT(w) == o;
#endif
}

/* The hub's core (a new reference; NULL, no error, when there is no hub or no core) and
 * its step_aside: PROCESS.hub's, read now (its fields: the hub is a HubCore). 0, or -1
 * with an error set. */
static int
await_core(LaunchAwait *self, PyObject **core, int *step_aside)
{
    return hub_core(self->process, core, step_aside);
}

int
hub_core(PyObject *process, PyObject **core, int *step_aside)
{
    *core = NULL;
    *step_aside = 0;
    PyObject *hub = PROCESS(process)->hub;
    if (hub == NULL || hub == Py_None)
        return 0;
    if (!core_subtype_check((PyObject *)Py_TYPE(hub), "HubCore", "PROCESS.hub's type"))
        return -1;
    PyObject *c = HUB(hub)->express;
    if (c != NULL && c != Py_None) {
        *core = Py_NewRef(c);
        *step_aside = HUB(hub)->step_aside;
    }
    return 0;
}

/* PROCESS.last, read now: a new reference (None while unset). */
static PyObject *
await_last(LaunchAwait *self)
{
    PyObject *last = PROCESS(self->process)->last;
    return Py_NewRef(last != NULL ? last : Py_None);
}

/* The adapter of the loop running this thread (a new reference): PROCESS.last's, the
 * common case of running_adapter(), else running_adapter()'s (another loop, or trio);
 * *loop (borrowed: it runs) that loop, None (trio) or NULL. NULL with an error set where no
 * loop cuasync can wait on runs. */
static PyObject *
loop_adapter(LaunchAwait *self, PyObject **loop)
{
    PyObject *last = await_last(self);
    PyObject *running = last == NULL ? NULL : PyObject_CallNoArgs(self->get_running_loop);
    PyObject *adapter = NULL;
    if (running != NULL && PyTuple_CheckExact(last) && PyTuple_GET_SIZE(last) == 2 &&
        PyWeakref_CheckRef(PyTuple_GET_ITEM(last, 0)) &&
        weakref_is(PyTuple_GET_ITEM(last, 0), running) &&
        PyTuple_GET_ITEM(last, 1) != Py_None)
        adapter = Py_NewRef(PyTuple_GET_ITEM(last, 1));
    Py_XDECREF(last);
    *loop = running; /* (borrowed past here; None: no asyncio loop) */
    Py_XDECREF(running);
    if (adapter == NULL && !PyErr_Occurred())
        adapter = PyObject_CallNoArgs(self->running_adapter);
    return adapter;
}

/* Whether op can be taken here: not taken yet, and bound to a device (else the Python
 * path words why it cannot run). */
static int
takeable(PyObject *op)
{
    PyObject *device = OP(op)->device;
    return OP(op)->consumed == Py_False && device != NULL && device != Py_None;
}

/* op (takeable) taken, and the stream it executes on: its own (a wait's: the one it
 * waits for), else the policy's (express.await_launch's, as it words its checks). A new
 * reference, or NULL with an error set (the op taken all the same). */
static PyObject *
take_with_stream(LaunchAwait *self, PyObject *op, int tensor)
{
    PyObject *device = OP(op)->device;
    field_set(&OP(op)->consumed, Py_NewRef(Py_True));
    PyObject *own = tensor ? NULL : LAUNCH(op)->stream;
    if (own != NULL && own != Py_None) {
        if (!is_stream(own) || STREAM(own)->device != device) {
            PyErr_Format(PyExc_TypeError, "a launch op's _stream must be a Stream of its "
                                          "device, not %.100s", Py_TYPE(own)->tp_name);
            return NULL;
        }
        return Py_NewRef(own);
    }
    PyObject *policy = NULL;
    if (PyContextVar_Get(self->policy_var, NULL, &policy) < 0)
        return NULL;
    if (policy == NULL || policy == Py_None) {
        Py_XDECREF(policy);
        /* (device.policy: its _policy once made; else NULL, and stream_for makes it) */
        policy = is_device(device) ? Py_XNewRef(DEVICE(device)->policy) : NULL;
        if (policy == Py_None)
            Py_CLEAR(policy);
    }
    int checked;
    PyObject *stream = next_stream_of(self, policy, device, &checked);
    Py_XDECREF(policy);
    if (stream != NULL && !checked &&
        (!Py_IS_TYPE(stream, REGISTERED(STREAM)) || STREAM(stream)->device != device))
        Py_SETREF(stream, call_one(self->stream_for, device)); /* (the checks, worded) */
    return stream;
}

/* Whether a TensorOp's awaiter takes op its own way (1): a TensorOp, not one writing a
 * tensor given to it (out=) inside a cancel scope, which is executed outside the scope,
 * the Python way (0, as for another type); -1 with an error set. */
static int
tensor_own_way(LaunchAwait *self, PyObject *op)
{
    if (!PyObject_TypeCheck(op, (PyTypeObject *)self->tensor_op_t) ||
        TENSOR_OP(op)->out == NULL)
        return 0;
    if (TENSOR_OP(op)->out == Py_None)
        return 1;
    PyObject *scope = NULL;
    if (PyContextVar_Get(self->scope_var, Py_None, &scope) < 0)
        return -1;
    int own = scope == Py_None;
    Py_DECREF(scope);
    return own;
}

/* The TensorOp op's raw launch on stream (tensor_launch's), taken: a new reference;
 * None where it has none (the long way: a first use, a pending operand); NULL with an
 * error set. */
static PyObject *
take_tensor_launch(LaunchAwait *self, PyObject *op, PyObject *stream)
{
    PyObject *launch = PyObject_CallFunctionObjArgs(self->tensor_launch, op, stream, NULL);
    if (launch == NULL || launch == Py_None)
        return launch;
    if (!is_launch_op(launch) || OP(launch)->consumed != Py_False) {
        PyErr_Format(PyExc_TypeError, "tensor_launch gave %.100s, not a launch op to take",
                     Py_TYPE(launch)->tp_name);
        Py_DECREF(launch);
        return NULL;
    }
    field_set(&OP(launch)->consumed, Py_NewRef(Py_True));
    return launch;
}

/* launch_await_start's result beside PySendResult's: queued in a burst (stepping aside) */
#define START_QUEUED 2

/* What the first step of an await does (the iterator's first send): PYGEN_RETURN with
 * the output in *result (landed within the spin, settled); PYGEN_NEXT with *result the
 * Python generator to hand the await over to (not started yet: the fallback, or
 * _finish_await for work that did not land); START_QUEUED, *result None, the launch
 * queued in a burst (it's state set, and ITER_QUEUED's to do); PYGEN_ERROR. */
static int
launch_await_start(LaunchAwait *self, PyObject *op, PyObject **result, LaunchIter *it)
{
    *result = NULL;
    if (self->process == NULL || self->fallback == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "LaunchAwait is cleared (interpreter shutdown)");
        return PYGEN_ERROR;
    }
    PyObject *core;
    int step_aside;
    if (await_core(self, &core, &step_aside) < 0)
        return PYGEN_ERROR;
    Express *x = (Express *)core;
    int tensor = self->tensor_launch != NULL;
    int own_way = tensor ? tensor_own_way(self, op) : is_launch_op(op);
    if (own_way < 0) {
        Py_XDECREF(core);
        return PYGEN_ERROR;
    }
    if (core == NULL || !is_express(core) || !own_way) { /* (a core replaced: a test's spy) */
        Py_XDECREF(core);
        *result = call_one(self->fallback, op);
        return *result == NULL ? PYGEN_ERROR : PYGEN_NEXT;
    }
    PyObject *loop, *adapter = loop_adapter(self, &loop);
    if (adapter == NULL) { /* no loop it can wait on: raised before anything is submitted */
        Py_DECREF(core);
        return PYGEN_ERROR;
    }
    if (!takeable(op)) {
        Py_DECREF(adapter);
        Py_DECREF(core);
        *result = call_one(self->fallback, op); /* (an op taken: it raises, worded) */
        return *result == NULL ? PYGEN_ERROR : PYGEN_NEXT;
    }
    PyObject *held = NULL;
    int status = PYGEN_ERROR;
    PyObject *stream = take_with_stream(self, op, tensor);
    if (stream == NULL)
        goto done;
    if (tensor) { /* the TensorOp's raw launch on that stream, which the core launches */
        PyObject *launch = take_tensor_launch(self, op, stream);
        if (launch == NULL)
            goto done;
        if (launch == Py_None) { /* the long way: the op's own await on that stream */
            Py_DECREF(launch);
            *result = PyObject_CallMethodObjArgs(op, self->s_await_on, stream, adapter, NULL);
            status = *result == NULL ? PYGEN_ERROR : PYGEN_NEXT;
            goto done;
        }
        op = held = launch; /* (what the rest launches, queues and finishes) */
    }
    int burst = step_aside ? in_burst(self, adapter, loop) : 0;
    if (burst < 0)
        goto done;
    int settled;
    PyObject *sent = express_launch(x, op, stream, burst ? MODE_BURST : MODE_AWAIT, adapter,
                                    &settled, burst ? &it->q : NULL);
    if (sent == NULL)
        goto done;
    if (settled == 2) { /* queued in a burst: the iterator steps aside (ITER_QUEUED) */
        it->core = (Express *)Py_NewRef(core);
        it->op = Py_NewRef(op);
        it->stream = Py_NewRef(stream);
        it->adapter = Py_NewRef(adapter);
        it->steps = it->waits = 0;
        *result = sent; /* (None: the bare yield) */
        status = START_QUEUED;
        goto done;
    }
    if (settled == 3) { /* parked: sent is its suspension, to delegate to */
        *result = sent;
        status = PYGEN_NEXT;
        goto done;
    }
    if (settled) { /* landed within the spin, and settled: sent is the output */
        self->inline_awaits++;
        *result = sent;
        status = PYGEN_RETURN;
        goto done;
    }
    PyObject *a[4] = {op, stream, adapter, sent};
    *result = PyObject_Vectorcall(self->finish, a, 4, NULL);
    Py_DECREF(sent);
    status = *result == NULL ? PYGEN_ERROR : PYGEN_NEXT;
done:
    Py_XDECREF(held);
    Py_XDECREF(stream);
    Py_DECREF(adapter);
    Py_DECREF(core);
    return status;
}


static PySendResult LaunchIter_step(LaunchIter *self, PyObject *arg, PyObject **result);

/* -- an await in a burst (ITER_QUEUED) --------------------------------------------------
 *
 * Its launch is queued for the submitter (or, without one, made at once), and the await
 * steps aside: a bare yield, so that the loop runs the other ready tasks (they queue
 * theirs meanwhile) and this one again after them. Each later step looks at its flag:
 * landed, it settles here as express._finish_await does and returns the output; not yet,
 * it steps aside again, up to BURST_STEPS_MAX steps, then hands over to
 * express._finish_await (more steps while the submitter has not made the launch, then
 * the spin and the reactor), as it does for a failed queued launch or errors in the
 * launch's box. A cancellation (throw, close) or the iterator dropped abandons it to
 * the background watcher (express._core_abandon), which settles it once it lands. */

static void
queued_clear(LaunchIter *self)
{
    queued_release(&self->q);
    Py_CLEAR(self->op);
    Py_CLEAR(self->stream);
    Py_CLEAR(self->adapter);
    Py_CLEAR(self->core);
}

/* The queued launch given to the background watcher (nobody awaits it any more): the
 * iterator is done. The error set on entry, if any, is kept; one of the abandon itself
 * is reported as unraisable (its slot is then lost, as when _core_abandon fails). */
static void
queued_abandon(LaunchIter *self)
{
    self->state = ITER_DONE;
    if (self->core != NULL)
        queued_abandon_to(self->core, self->op, self->stream, &self->q, (PyObject *)self);
    queued_clear(self);
}

/* Not settled here: express._finish_await(op, stream, adapter, sent) takes the await over
 * and runs its first step. sent is a burst's express.Sent (landed None): Python steps
 * aside once more, then spins and parks as any await; its ticket is the submitter's
 * for a launch the submitter made (Python then reads the slot's status word for it),
 * and -1 for one made at once (no submitter, the ring full, parameters packed in
 * Python), whose slot's status word is not its own: an earlier queued launch on the
 * slot may have left a failure there. */
static PySendResult
queued_hand_over(LaunchIter *self, PyObject **result)
{
    Express *x = self->core;
    PyObject *sent = queued_sent(x, &self->q), *gen = NULL;
    if (sent == NULL)
        goto fail;
    PyObject *a[4] = {self->op, self->stream, self->adapter, sent};
    gen = PyObject_Vectorcall(self->awaiter->finish, a, 4, NULL);
    Py_DECREF(sent);
    if (gen == NULL)
        goto fail;
    x->burst_handed_over++;
    queued_clear(self); /* (the generator holds what it needs: the slot is its now) */
    self->delegate = gen;
    self->state = ITER_DELEGATING;
    PySendResult r = PyIter_Send(gen, Py_None, result);
    if (r != PYGEN_NEXT) {
        Py_CLEAR(self->delegate);
        self->state = ITER_DONE;
    }
    return r;
fail:
    queued_abandon(self); /* (the error is kept) */
    return PYGEN_ERROR;
}

/* A step of an await in a burst, after its first (see above). */
static PySendResult
queued_step(LaunchIter *self, PyObject **result)
{
    Express *x = self->core;
    queued_launch *q = &self->q;
    if (x->hub == NULL) { /* (cleared: interpreter shutdown) */
        self->state = ITER_DONE;
        queued_clear(self);
        PyErr_SetString(PyExc_RuntimeError, "the express core is cleared");
        return PYGEN_ERROR;
    }
    int landed = gen_reached(load_acquire((_Atomic uint32_t *)q->address), q->gen);
    if (!landed) {
        /* (steps counts those since the launch was made; waits, those before) */
        if (q->sub != NULL && subcore_done(q->sub) <= q->ticket) {
            if (++self->waits < BURST_WAIT_STEPS_MAX) {
                *result = Py_NewRef(Py_None);
                return PYGEN_NEXT;
            }
        }
        else if (self->steps++ < BURST_STEPS_MAX) {
            *result = Py_NewRef(Py_None);
            return PYGEN_NEXT;
        }
    }
    if (!landed || x->slots == NULL ||
        (q->sub != NULL && subcore_status(q->sub, q->index) != 0) ||
        (q->box != NULL && PyList_GET_SIZE(q->box) != 0))
        return queued_hand_over(self, result);
    /* landed: settled as express._finish_await settles it */
    if (adapter_long_ops(self->adapter) < 0)
        goto fail;
    ADAPTER(self->adapter)->long_ops = 0;
    long long seqv = PyLong_AsLongLong(q->seq);
    if ((seqv == -1 && PyErr_Occurred()) ||
        settle_inline(x, self->stream, (Py_ssize_t)q->index, seqv, q->seq) < 0)
        goto fail;
    x->burst_awaits++; /* (Hub.snapshot adds it to stats()) */
    PyObject *output = LAUNCH(self->op)->output;
    *result = Py_NewRef(output != NULL ? output : Py_None);
    self->state = ITER_DONE;
    queued_clear(self);
    return PYGEN_RETURN;
fail:
    queued_abandon(self); /* (landed: the watcher settles it at once) */
    return PYGEN_ERROR;
}

static PySendResult
LaunchIter_send(LaunchIter *self, PyObject *arg, PyObject **result)
{
    *result = NULL;
    if (iter_refuse_running(self->running) < 0)
        return PYGEN_ERROR;
    self->running = 1;
    Py_INCREF(self); /* (alive while its step runs Python code) */
    PySendResult r = LaunchIter_step(self, arg, result);
    self->running = 0;
    Py_DECREF(self);
    return r;
}

static PySendResult
LaunchIter_step(LaunchIter *self, PyObject *arg, PyObject **result)
{
    if (self->state == ITER_DONE) {
        PyErr_SetString(PyExc_RuntimeError, "cannot reuse an already awaited launch");
        return PYGEN_ERROR;
    }
    if (self->state == ITER_FRESH) {
        if (arg != Py_None) {
            PyErr_SetString(PyExc_TypeError,
                            "can't send non-None value to a just-started awaitable");
            return PYGEN_ERROR;
        }
        self->state = ITER_DONE;
        PyObject *op = self->op;
        self->op = NULL;
        PyObject *out;
        int r = launch_await_start(self->awaiter, op, &out, self);
        Py_DECREF(op);
        if (r == START_QUEUED) { /* (the bare yield of its first step aside) */
            self->state = ITER_QUEUED;
            *result = out;
            return PYGEN_NEXT;
        }
        if (r != PYGEN_NEXT) {
            *result = out;
            return (PySendResult)r;
        }
        self->delegate = out; /* a Python generator, not started: its first step now */
        self->state = ITER_DELEGATING;
    }
    else if (self->state == ITER_QUEUED) {
        return queued_step(self, result);
    }
    PyObject *delegate = Py_NewRef(self->delegate); /* (held while it runs) */
    PySendResult r = PyIter_Send(delegate, arg, result);
    Py_DECREF(delegate);
    if (r != PYGEN_NEXT) {
        Py_CLEAR(self->delegate);
        self->state = ITER_DONE;
    }
    return r;
}

static PyObject *
LaunchIter_iternext(LaunchIter *self)
{
    PyObject *result;
    PySendResult r = LaunchIter_send(self, Py_None, &result);
    return iter_result(r, result, 1);
}

static PyObject *
LaunchIter_send_method(LaunchIter *self, PyObject *arg)
{
    PyObject *result;
    PySendResult r = LaunchIter_send(self, arg, &result);
    return iter_result(r, result, 0);
}

static PyObject *
LaunchIter_throw(LaunchIter *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (iter_may_throw(self->running, nargs) < 0)
        return NULL;
    if (self->state == ITER_QUEUED) { /* cancelled while stepping aside: the work goes on */
        self->running = 1;
        Py_INCREF(self);
        queued_abandon(self);
        self->running = 0;
        Py_DECREF(self);
        return iter_raise_thrown(args, nargs);
    }
    if (self->state != ITER_DELEGATING) { /* not started (or done): raised here, as a
                                            * generator raises it before its first line */
        self->state = ITER_DONE;
        Py_CLEAR(self->op);
        return iter_raise_thrown(args, nargs);
    }
    self->running = 1;
    Py_INCREF(self);
    PyObject *r = iter_throw_into(self->delegate, args, nargs);
    self->running = 0;
    if (r == NULL) {
        Py_CLEAR(self->delegate);
        self->state = ITER_DONE;
    }
    Py_DECREF(self);
    return r;
}

static PyObject *
LaunchIter_close(LaunchIter *self, PyObject *Py_UNUSED(arg))
{
    if (iter_refuse_running(self->running) < 0)
        return NULL;
    if (self->state == ITER_QUEUED) {
        self->running = 1;
        Py_INCREF(self);
        queued_abandon(self);
        self->running = 0;
        Py_DECREF(self);
        Py_RETURN_NONE;
    }
    PyObject *delegate = self->delegate;
    self->delegate = NULL;
    self->state = ITER_DONE;
    Py_CLEAR(self->op);
    if (delegate == NULL)
        Py_RETURN_NONE;
    int failed = iter_close_inner(delegate) < 0;
    Py_DECREF(delegate);
    return failed ? NULL : Py_NewRef(Py_None);
}

static PyObject *
LaunchIter_iter(PyObject *self)
{
    return Py_NewRef(self);
}

static int
LaunchIter_traverse(LaunchIter *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->awaiter);
    Py_VISIT(self->op);
    Py_VISIT(self->delegate);
    Py_VISIT(self->core);
    Py_VISIT(self->stream);
    Py_VISIT(self->adapter);
    Py_VISIT(self->q.box);
    return 0;
}

static int
LaunchIter_clear(LaunchIter *self)
{
    self->state = ITER_DONE;
    queued_clear(self);
    Py_CLEAR(self->awaiter);
    Py_CLEAR(self->delegate);
    return 0;
}

/* Dropped while queued (a task destroyed while it stepped aside, a cycle collected):
 * the work goes on, and the background watcher settles it. */
static void
LaunchIter_finalize(LaunchIter *self)
{
    if (self->state != ITER_QUEUED || self->running)
        return;
    saved_error e;
    save_error(&e);
    queued_abandon(self);
    restore_error(&e);
}

static void
LaunchIter_dealloc(LaunchIter *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    if (PyObject_CallFinalizerFromDealloc((PyObject *)self) < 0)
        return; /* (resurrected) */
    PyObject_GC_UnTrack(self);
    LaunchIter_clear(self);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static PyMethodDef LaunchIter_methods[] = {
    {"send", (PyCFunction)LaunchIter_send_method, METH_O, "Send a value into the await."},
    {"throw", (PyCFunction)(void (*)(void))LaunchIter_throw, METH_FASTCALL,
     "Raise an exception inside the await."},
    {"close", (PyCFunction)LaunchIter_close, METH_NOARGS, "Close the await."},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot LaunchIter_slots[] = {
    {Py_tp_dealloc, (void *)LaunchIter_dealloc},
    {Py_tp_finalize, (void *)LaunchIter_finalize},
    {Py_tp_traverse, (void *)LaunchIter_traverse},
    {Py_tp_clear, (void *)LaunchIter_clear},
    {Py_tp_iter, (void *)LaunchIter_iter},
    {Py_tp_iternext, (void *)LaunchIter_iternext},
    {Py_am_send, (void *)LaunchIter_send},
    {Py_tp_methods, LaunchIter_methods},
    {Py_tp_doc, (void *)"The iterator of ``await`` of a launch (see LaunchAwait)."},
    {0, NULL},
};

static PyType_Spec LaunchIter_spec = {
    .name = "cuasync._reactor.LaunchIter",
    .basicsize = sizeof(LaunchIter),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_HAVE_GC |
             Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = LaunchIter_slots,
};

static PyObject *
LaunchAwait_vectorcall(LaunchAwait *self, PyObject *const *args, size_t nargsf,
                       PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs != 1 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames))) {
        PyErr_SetString(PyExc_TypeError, "__await__() takes no arguments");
        return NULL;
    }
    if (self->done_t == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "LaunchAwait is cleared (interpreter shutdown)");
        return NULL;
    }
    LaunchIter *it = PyObject_GC_New(LaunchIter, (PyTypeObject *)self->done_t);
    if (it == NULL)
        return NULL;
    it->awaiter = (LaunchAwait *)Py_NewRef(self);
    it->op = Py_NewRef(args[0]);
    it->delegate = NULL;
    it->state = ITER_FRESH;
    it->running = 0;
    it->core = NULL;
    it->stream = it->adapter = NULL;
    memset(&it->q, 0, sizeof it->q);
    it->steps = it->waits = 0;
    PyObject_GC_Track(it);
    return (PyObject *)it;
}

PyObject *
bind_to(PyObject *self, PyObject *obj, PyObject *Py_UNUSED(type))
{
    if (obj == NULL || obj == Py_None)
        return Py_NewRef(self);
    return PyMethod_New(self, obj);
}

PyObject *
method_qualname(PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyUnicode_Check(args[1]))
        return PyErr_Format(PyExc_TypeError, "__set_name__(owner, name)");
    PyObject *owner = PyObject_GetAttrString(args[0], "__qualname__");
    PyObject *qualname = owner == NULL ? NULL : PyUnicode_FromFormat("%U.%U", owner, args[1]);
    Py_XDECREF(owner);
    return qualname;
}

static PyObject *
LaunchAwait_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"fallback", "finish", "get_running_loop", "running_adapter",
                             "policy", "stream_for", "current_tasks", "tensor_launch", "scope",
                             "start_pass", NULL};
    PyObject *fallback = NULL, *finish = NULL, *grl = NULL, *ra = NULL, *policy = NULL;
    PyObject *stream_for = NULL, *current_tasks = NULL;
    PyObject *tensor_launch = Py_None, *scope = Py_None, *start_pass = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|$OOOOOOOOOO:LaunchAwait", kwlist, &fallback,
                                     &finish, &grl, &ra, &policy, &stream_for, &current_tasks,
                                     &tensor_launch, &scope, &start_pass))
        return NULL;
    PyObject *required[] = {fallback, finish, grl, ra, policy, stream_for, current_tasks};
    for (size_t i = 0; i < sizeof required / sizeof required[0]; i++)
        if (required[i] == NULL)
            return PyErr_Format(PyExc_TypeError, "LaunchAwait() missing keyword argument '%s'",
                                kwlist[i]);
    if ((tensor_launch != Py_None && scope == Py_None) ||
        (scope != Py_None && !PyContextVar_CheckExact(scope))) {
        PyErr_SetString(PyExc_TypeError, "tensor_launch needs scope (a ContextVar)");
        return NULL;
    }
    if (current_tasks != Py_None && !PyDict_CheckExact(current_tasks)) {
        PyErr_SetString(PyExc_TypeError, "current_tasks must be a dict or None");
        return NULL;
    }
    if (!PyContextVar_CheckExact(policy)) {
        PyErr_SetString(PyExc_TypeError, "policy must be a ContextVar");
        return NULL;
    }
    PyObject *process = module_process(type);
    if (process == NULL)
        return NULL;
    LaunchAwait *self = (LaunchAwait *)PyType_GenericAlloc(type, 0);
    if (self == NULL)
        return NULL;
    self->vectorcall = (vectorcallfunc)LaunchAwait_vectorcall;
    self->fallback = Py_NewRef(fallback);
    self->finish = Py_NewRef(finish);
    self->get_running_loop = Py_NewRef(grl);
    self->running_adapter = Py_NewRef(ra);
    self->policy_var = Py_NewRef(policy);
    self->stream_for = Py_NewRef(stream_for);
    self->process = Py_NewRef(process);
    self->current_tasks = current_tasks == Py_None ? NULL : Py_NewRef(current_tasks);
    self->start_pass = start_pass == Py_None ? NULL : Py_NewRef(start_pass);
    self->scope_var = scope == Py_None ? NULL : Py_NewRef(scope);
    if (tensor_launch != Py_None) {
        PyObject *module = PyType_GetModule(type);
        self->tensor_launch = Py_NewRef(tensor_launch);
        self->tensor_op_t =
            module == NULL ? NULL : PyObject_GetAttrString(module, "TensorOpCore");
        if (self->tensor_op_t == NULL) {
            Py_DECREF(self);
            return NULL;
        }
    }
    self->done_t = PyType_FromSpec(&LaunchIter_spec);
    if (self->done_t == NULL ||
        (self->s_others_ready = PyUnicode_InternFromString("others_ready")) == NULL ||
        (self->s_await_on = PyUnicode_InternFromString("_await_on")) == NULL ||
        (self->s_starting = PyUnicode_InternFromString("starting")) == NULL ||
        (self->s_prepare_on = PyUnicode_InternFromString("prepare_on")) == NULL ||
        (self->s_adopt = PyUnicode_InternFromString("_adopt")) == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

static int
LaunchAwait_traverse(LaunchAwait *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->fallback);
    Py_VISIT(self->finish);
    Py_VISIT(self->get_running_loop);
    Py_VISIT(self->running_adapter);
    Py_VISIT(self->policy_var);
    Py_VISIT(self->stream_for);
    Py_VISIT(self->done_t);
    Py_VISIT(self->process);
    Py_VISIT(self->current_tasks);
    Py_VISIT(self->tensor_launch);
    Py_VISIT(self->scope_var);
    Py_VISIT(self->tensor_op_t);
    Py_VISIT(self->start_pass);
    return 0;
}

static int
LaunchAwait_clear(LaunchAwait *self)
{
    Py_CLEAR(self->fallback);
    Py_CLEAR(self->finish);
    Py_CLEAR(self->get_running_loop);
    Py_CLEAR(self->running_adapter);
    Py_CLEAR(self->policy_var);
    Py_CLEAR(self->stream_for);
    Py_CLEAR(self->done_t);
    Py_CLEAR(self->process);
    Py_CLEAR(self->current_tasks);
    Py_CLEAR(self->tensor_launch);
    Py_CLEAR(self->scope_var);
    Py_CLEAR(self->tensor_op_t);
    Py_CLEAR(self->start_pass);
    return 0;
}

static void
LaunchAwait_dealloc(LaunchAwait *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    LaunchAwait_clear(self);
    Py_CLEAR(self->s_others_ready);
    Py_CLEAR(self->s_await_on);
    Py_CLEAR(self->s_starting);
    Py_CLEAR(self->s_prepare_on);
    Py_CLEAR(self->s_adopt);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static PyObject *
LaunchAwait_get_inline(LaunchAwait *self, void *Py_UNUSED(c))
{
    return PyLong_FromUnsignedLongLong(self->inline_awaits);
}

static PyGetSetDef LaunchAwait_getset[] = {
    {"inline_awaits", (getter)LaunchAwait_get_inline, NULL,
     "awaits whose first step returned the output (landed within the spin)", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMemberDef LaunchAwait_members[] = {
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(LaunchAwait, vectorcall), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

/*
 * LaunchAwait.hand_over(op): an op handed to asyncio as a future (op_future's
 * AsyncioFuture._handed_over, through its class's _hand_over), its common case done
 * here with the await's preamble: the running asyncio loop's adapter, the op taken, its
 * stream (the policy's), and its record, op_future.Watched (the class declared on
 * WatchedCore), made with the launch the core will make (a launch op: itself; a
 * TensorOp: its raw launch, tensor_launch's, taken), set as op._future and queued in
 * adapter.starting (the loop's next pass, start_pass, starts what is queued). A TensorOp
 * with no raw kernel launch yet (a first use, a library call) is prepared by
 * Watched.prepare_on, on the stream chosen here. Returns the Watched; or None, with
 * nothing done, where this is not that case: a launch of another class (a cancellable
 * one takes its scope's word in Python), a kernel not prepared yet (a first use), a
 * TensorOp writing out= inside a cancel scope, an op taken already or handed over, no
 * asyncio loop running. An error picking the stream or building the raw launch is the
 * Watched's (raised where it is awaited), as Watched.prepare does.
 */

/* Whether hand_over takes op (1; 0: None, the Python path; -1: an error set). */
static int
hands_over(LaunchAwait *self, PyObject *op)
{
    PyTypeObject *launch_t = REGISTERED(LAUNCH), *prepared_t = REGISTERED(PREPARED);
    int tensor = self->tensor_launch != NULL;
    if (self->start_pass == NULL || REGISTERED(WATCHED) == NULL || launch_t == NULL ||
        prepared_t == NULL)
        return 0;
    int its_type = tensor ? PyObject_TypeCheck(op, (PyTypeObject *)self->tensor_op_t)
                          : Py_IS_TYPE(op, launch_t) && LAUNCH(op)->prepared != NULL &&
                                PyObject_TypeCheck(LAUNCH(op)->prepared, prepared_t);
    if (!its_type || !takeable(op) || (OP(op)->future != NULL && OP(op)->future != Py_None))
        return 0;
    return tensor ? tensor_own_way(self, op) : 1;
}

/* The launch the core makes for op (taken) on stream: a new reference (a launch op's
 * itself; a TensorOp's raw launch, taken, as its await launches it: a kernel's or a
 * library call's); None where Watched.prepare_on decides (a TensorOp's first use, a
 * pending operand); NULL with an error set. */
static PyObject *
launch_handed_over(LaunchAwait *self, PyObject *op, PyObject *stream)
{
    return self->tensor_launch == NULL ? Py_NewRef(op) : take_tensor_launch(self, op, stream);
}

/* watched (handed over) adopted by the cancel scope current here, if any: cancelled with
 * it (CancelScope._adopt). 0, or -1 with an error set. */
static int
adopt_in_scope(LaunchAwait *self, PyObject *watched)
{
    PyObject *scope = NULL;
    if (self->scope_var == NULL)
        return 0;
    if (PyContextVar_Get(self->scope_var, Py_None, &scope) < 0)
        return -1;
    PyObject *r = scope == Py_None ? Py_NewRef(Py_None)
                                   : PyObject_CallMethodOneArg(scope, self->s_adopt, watched);
    Py_DECREF(scope);
    Py_XDECREF(r);
    return r == NULL ? -1 : 0;
}

static PyObject *
LaunchAwait_hand_over(LaunchAwait *self, PyObject *op)
{
    if (self->process == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "LaunchAwait is cleared (interpreter shutdown)");
        return NULL;
    }
    int takes = hands_over(self, op);
    if (takes <= 0)
        return takes < 0 ? NULL : Py_NewRef(Py_None);
    PyObject *loop, *adapter = loop_adapter(self, &loop);
    if (adapter == NULL)
        return NULL;
    PyObject *starting = NULL, *watched = NULL, *launch = NULL;
    if (loop == NULL || loop == Py_None)
        goto decline;
    if (optional_attr(adapter, self->s_starting, &starting) < 0)
        goto fail;
    if (starting == NULL || !PyList_CheckExact(starting))
        goto decline; /* (not an asyncio loop's adapter: the Python path says why) */
    PyObject *stream = take_with_stream(self, op, self->tensor_launch != NULL), *exc = NULL;
    if (stream != NULL)
        launch = launch_handed_over(self, op, stream);
    if ((stream == NULL || launch == NULL) && (exc = take_exception()) == NULL) {
        Py_XDECREF(stream);
        goto fail; /* (an Exception is the op's; anything else propagates) */
    }
    PyObject *a[3] = {op, loop, adapter};
    watched = PyObject_Vectorcall((PyObject *)REGISTERED(WATCHED), a, 3, NULL);
    if (watched == NULL) {
        Py_XDECREF(stream);
        Py_XDECREF(exc);
        goto fail;
    }
    WatchedCore *w = (WatchedCore *)watched;
    field_set(&OP(op)->future, Py_NewRef(watched));
    if (exc != NULL) {
        Py_SETREF(w->error, exc); /* (raised where it is awaited; ended in the next pass) */
        Py_XDECREF(stream);
    }
    else {
        Py_SETREF(w->stream, stream);
        if (launch != Py_None) {
            Py_SETREF(w->launch, launch);
            launch = NULL;
        }
        else { /* (a TensorOp's first use: Python decides) */
            PyObject *r = PyObject_CallMethodNoArgs(watched, self->s_prepare_on);
            if (r == NULL)
                goto unhand;
            Py_DECREF(r);
        }
    }
    if (adopt_in_scope(self, watched) < 0 || PyList_Append(starting, watched) < 0)
        goto unhand;
    if (PyList_GET_SIZE(starting) == 1) {
        PyObject *r = PyObject_CallMethod(loop, "call_soon", "OO", self->start_pass, adapter);
        if (r == NULL) {
            PyList_SetSlice(starting, PyList_GET_SIZE(starting) - 1, PyList_GET_SIZE(starting),
                            NULL); /* (never started: not queued) */
            goto unhand;
        }
        Py_DECREF(r);
    }
    Py_XDECREF(launch);
    Py_DECREF(starting);
    Py_DECREF(adapter);
    return watched;
decline:
    Py_XDECREF(starting);
    Py_DECREF(adapter);
    return Py_NewRef(Py_None);
unhand: /* (taken, never queued: no future, so that awaiting it raises, not hangs) */
    field_set(&OP(op)->future, Py_NewRef(Py_None));
fail:
    Py_XDECREF(launch);
    Py_XDECREF(watched);
    Py_XDECREF(starting);
    Py_DECREF(adapter);
    return NULL;
}

static PyMethodDef LaunchAwait_methods[] = {
    {"hand_over", (PyCFunction)LaunchAwait_hand_over, METH_O,
     "hand_over($self, op, /)\n--\n\n"
     "A launch op handed to asyncio as a future, its common case: its Watched, made and "
     "queued to start; None where the Python path takes it."},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot LaunchAwait_slots[] = {
    {Py_tp_new, (void *)LaunchAwait_new},
    {Py_tp_dealloc, (void *)LaunchAwait_dealloc},
    {Py_tp_traverse, (void *)LaunchAwait_traverse},
    {Py_tp_clear, (void *)LaunchAwait_clear},
    {Py_tp_call, (void *)PyVectorcall_Call},
    {Py_tp_descr_get, (void *)bind_to},
    {Py_tp_getset, LaunchAwait_getset},
    {Py_tp_members, LaunchAwait_members},
    {Py_tp_methods, LaunchAwait_methods},
    {Py_tp_doc, (void *)"LaunchAwait(*, fallback, finish, get_running_loop, running_adapter, "
                        "policy, stream_for, current_tasks, tensor_launch=None, scope=None, "
                        "start_pass=None)\n--\n\n"
                        "_Launch.__await__ in C: the preamble of express.await_launch and "
                        "the hub's core's launch, returning an iterator; with tensor_launch "
                        "(and scope), a TensorOp's; with start_pass, hand_over takes its op "
                        "handed to asyncio as a future (adopted by the cancel scope current "
                        "there, scope's, if any)."},
    {0, NULL},
};

PyType_Spec LaunchAwait_spec = {
    .name = "cuasync._reactor.LaunchAwait",
    .basicsize = sizeof(LaunchAwait),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_HAVE_GC |
             Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_METHOD_DESCRIPTOR,
    .slots = LaunchAwait_slots,
};

/* LaunchCore's am_await, which the launch op inherits (``await op``, ``op.__await__()``):
 * the module's one LaunchAwait (PROCESS.launch_await, made once by express.py with the
 * Python it hands work back to) called with the op. */
PyObject *
launch_am_await(PyObject *op)
{
    PyObject *process = process_of(op);
    if (process == NULL)
        return NULL;
    PyObject *awaiter = PROCESS(process)->launch_await;
    if (awaiter == NULL || Py_TYPE(awaiter)->tp_dealloc != (destructor)LaunchAwait_dealloc) {
        PyErr_SetString(PyExc_RuntimeError,
                        "PROCESS.launch_await is not a LaunchAwait (cuasync._core.express "
                        "sets it when imported)");
        return NULL;
    }
    return LaunchAwait_vectorcall((LaunchAwait *)awaiter, &op, 1, NULL);
}

/* -- the execution lock ---------------------------------------------------------------- */

/*
 * ExecLock is cuasync's execution lock (``context.LOCK``) where the native module is
 * built: a non-reentrant lock with threading.Lock's methods, so that Python takes it as
 * it takes a threading.Lock (``with LOCK:``), and the express core takes it with one
 * compare-and-swap instead of a method call (PyThread_acquire_lock reads the clock even
 * when it does not wait: 40 ns of every launch). The lock is the word ``held``; a thread
 * that finds it taken sleeps on ``cv`` (counted in ``waiters``), and a release wakes one
 * sleeper when there is any. A blocking acquire waits with the GIL released, in slices
 * of EXEC_LOCK_SLICE_NS between which it runs signal handlers, as threading.Lock's
 * does (an exception from one, KeyboardInterrupt, is raised from the acquire).
 */
typedef struct {
    PyObject_HEAD
    _Atomic int held;    /* 1 while taken */
    _Atomic int waiters; /* threads asleep on cv, or about to be */
    pthread_mutex_t mu;  /* cv's mutex (held only around a sleep and a wake) */
    pthread_cond_t cv;   /* on CLOCK_MONOTONIC, as now_ns */
    int ready;           /* mu and cv made */
} ExecLock;

#define EXEC_LOCK_SLICE_NS 10000000ull /* a blocked acquire runs signal handlers this often */

static void ExecLock_dealloc(PyObject *self);

/* Whether o is an ExecLock of any interpreter's module: told by its dealloc function,
 * which all of them share (no process-wide reference to one interpreter's type). */
int
is_exec_lock(PyObject *o)
{
    return Py_TYPE(o)->tp_dealloc == ExecLock_dealloc;
}

static inline int
exec_lock_cas(ExecLock *l)
{
    int expected = 0;
    return atomic_compare_exchange_strong(&l->held, &expected, 1);
}

int
exec_lock_try(PyObject *o) /* 1 taken, 0 held elsewhere, -1 not an ExecLock */
{
    return is_exec_lock(o) ? exec_lock_cas((ExecLock *)o) : -1;
}

void
exec_lock_release(PyObject *o)
{
    ExecLock *l = (ExecLock *)o;
    /* (both sequentially consistent: a sleeper counts itself before its last try, so
     * either this load sees it, or its try sees the lock free) */
    atomic_store(&l->held, 0);
    if (atomic_load(&l->waiters) > 0) {
        pthread_mutex_lock(&l->mu);
        pthread_cond_signal(&l->cv);
        pthread_mutex_unlock(&l->mu);
    }
}

/* One slice of a blocked acquire, the GIL released: 1 taken, 0 the deadline (ns of
 * now_ns, 0 none) passed, 2 the slice ended first. */
static int
exec_lock_sleep(ExecLock *l, uint64_t deadline)
{
    uint64_t until = now_ns() + EXEC_LOCK_SLICE_NS;
    if (deadline != 0 && deadline < until)
        until = deadline;
    struct timespec ts = {.tv_sec = (time_t)(until / 1000000000u),
                          .tv_nsec = (long)(until % 1000000000u)};
    int r;
    pthread_mutex_lock(&l->mu);
    atomic_fetch_add(&l->waiters, 1);
    for (;;) {
        if (exec_lock_cas(l)) {
            r = 1;
            break;
        }
        if (pthread_cond_timedwait(&l->cv, &l->mu, &ts) == ETIMEDOUT) {
            r = exec_lock_cas(l) ? 1 : deadline != 0 && now_ns() >= deadline ? 0 : 2;
            break;
        }
    }
    atomic_fetch_sub(&l->waiters, 1);
    pthread_mutex_unlock(&l->mu);
    return r;
}

/* Block until taken or timeout_us (-1: forever) passed, the GIL released; -1 with the
 * error of a signal handler (which runs while it waits). After a signal it waits only
 * for what is left of the timeout. */
static int
exec_lock_wait(ExecLock *l, long long timeout_us)
{
    if (exec_lock_cas(l))
        return 1;
    if (timeout_us == 0)
        return 0;
    uint64_t deadline = timeout_us > 0 ? now_ns() + (uint64_t)timeout_us * 1000u : 0;
    for (;;) {
        int r;
        Py_BEGIN_ALLOW_THREADS
        r = exec_lock_sleep(l, deadline);
        Py_END_ALLOW_THREADS
        if (r != 2)
            return r;
        if (Py_MakePendingCalls() < 0) /* signal handlers (the main thread's): may raise */
            return -1;
    }
}

static PyObject *
ExecLock_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    if (PyTuple_GET_SIZE(args) || (kwds != NULL && PyDict_GET_SIZE(kwds))) {
        PyErr_SetString(PyExc_TypeError, "ExecLock() takes no arguments");
        return NULL;
    }
    ExecLock *self = (ExecLock *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    pthread_condattr_t attr;
    int err = pthread_condattr_init(&attr);
    if (err == 0) {
        err = pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
        if (err == 0 && (err = pthread_cond_init(&self->cv, &attr)) == 0 &&
            (err = pthread_mutex_init(&self->mu, NULL)) != 0)
            pthread_cond_destroy(&self->cv);
        pthread_condattr_destroy(&attr);
    }
    if (err != 0) {
        Py_DECREF(self);
        errno = err;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    self->ready = 1;
    return (PyObject *)self;
}

static void
ExecLock_dealloc(PyObject *o)
{
    ExecLock *self = (ExecLock *)o;
    PyTypeObject *tp = Py_TYPE(self);
    if (self->ready) { /* (no sleeper: each holds a reference) */
        pthread_cond_destroy(&self->cv);
        pthread_mutex_destroy(&self->mu);
    }
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static PyObject *
ExecLock_acquire(ExecLock *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    int blocking = 1;
    double timeout = -1;
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    if (nargs + nkw > 2) {
        PyErr_SetString(PyExc_TypeError, "acquire() takes at most 2 arguments");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < nargs + nkw; i++) {
        const char *name = i < nargs ? (i == 0 ? "blocking" : "timeout")
                                     : PyUnicode_AsUTF8(PyTuple_GET_ITEM(kwnames, i - nargs));
        if (name == NULL)
            return NULL;
        if (strcmp(name, "blocking") == 0) {
            if ((blocking = PyObject_IsTrue(args[i])) < 0)
                return NULL;
        }
        else if (strcmp(name, "timeout") == 0) {
            timeout = PyFloat_AsDouble(args[i]);
            if (timeout == -1 && PyErr_Occurred())
                return NULL;
        }
        else {
            PyErr_Format(PyExc_TypeError, "acquire() got an unexpected keyword argument '%s'",
                         name);
            return NULL;
        }
    }
    if (!blocking && timeout != -1) {
        PyErr_SetString(PyExc_ValueError, "can't specify a timeout for a non-blocking call");
        return NULL;
    }
    if (timeout != timeout || (timeout < 0 && timeout != -1)) {
        PyErr_SetString(PyExc_ValueError, "timeout value must be a non-negative number");
        return NULL;
    }
    if (timeout > (double)PY_TIMEOUT_MAX / 1e6) {
        PyErr_SetString(PyExc_OverflowError, "timeout value is too large");
        return NULL;
    }
    long long us = !blocking ? 0 : timeout < 0 ? -1 : (long long)(timeout * 1e6);
    int r = exec_lock_wait(self, us);
    return r < 0 ? NULL : PyBool_FromLong(r);
}

static PyObject *
ExecLock_enter(ExecLock *self, PyObject *Py_UNUSED(arg))
{
    int r = exec_lock_wait(self, -1);
    return r < 0 ? NULL : PyBool_FromLong(r);
}

static PyObject *
ExecLock_release(ExecLock *self, PyObject *Py_UNUSED(arg))
{
    if (!atomic_load(&self->held)) {
        PyErr_SetString(PyExc_RuntimeError, "release unlocked lock");
        return NULL;
    }
    exec_lock_release((PyObject *)self);
    Py_RETURN_NONE;
}

static PyObject *
ExecLock_exit(ExecLock *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)args, (void)nargs;
    return ExecLock_release(self, NULL);
}

static PyObject *
ExecLock_locked(ExecLock *self, PyObject *Py_UNUSED(arg))
{
    return PyBool_FromLong(atomic_load(&self->held));
}

static PyObject *
ExecLock_repr(ExecLock *self)
{
    return PyUnicode_FromFormat("<cuasync._reactor.ExecLock %s>",
                                atomic_load(&self->held) ? "locked" : "unlocked");
}

static PyMethodDef ExecLock_methods[] = {
    {"acquire", (PyCFunction)(void (*)(void))ExecLock_acquire, METH_FASTCALL | METH_KEYWORDS,
     "acquire($self, /, blocking=True, timeout=-1)\n--\n\n"
     "Take the lock, as threading.Lock.acquire; True once taken."},
    {"release", (PyCFunction)ExecLock_release, METH_NOARGS,
     "release($self, /)\n--\n\nLet go of the lock (RuntimeError when it is not held)."},
    {"locked", (PyCFunction)ExecLock_locked, METH_NOARGS,
     "locked($self, /)\n--\n\nWhether the lock is held."},
    {"__enter__", (PyCFunction)ExecLock_enter, METH_NOARGS, "Take the lock (blocking)."},
    {"__exit__", (PyCFunction)(void (*)(void))ExecLock_exit, METH_FASTCALL, "Let go of it."},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot ExecLock_slots[] = {
    {Py_tp_new, (void *)ExecLock_new},
    {Py_tp_dealloc, (void *)ExecLock_dealloc},
    {Py_tp_repr, (void *)ExecLock_repr},
    {Py_tp_methods, ExecLock_methods},
    {Py_tp_doc, (void *)"ExecLock()\n--\n\n"
                        "cuasync's execution lock: threading.Lock's methods, and a "
                        "non-blocking take from C for the express core."},
    {0, NULL},
};

PyType_Spec ExecLock_spec = {
    .name = "cuasync._reactor.ExecLock",
    .basicsize = sizeof(ExecLock),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = ExecLock_slots,
};



/* -- the current device of a thread ---------------------------------------------------- */

/*
 * CurrentOrdinal is the CUDA backend's per-thread record of the device whose primary
 * context it last made current (``_Current``, a threading.local, in Python): ``ordinal``
 * is an int per thread (-1 until set), kept under a pthread key of its own, so that
 * reading it costs a getspecific, from Python (a getset) and from the express core
 * (directly, no attribute lookup).
 */
typedef struct {
    PyObject_HEAD
    pthread_key_t key;
    int has_key;
} CurrentOrdinal;

static void CurrentOrdinal_dealloc(PyObject *self);

/* The calling thread's ordinal (-1: none) of a CurrentOrdinal; -2: not one (told by
 * its dealloc function, shared by every interpreter's type). */
long
current_ordinal_of(PyObject *o)
{
    if (Py_TYPE(o)->tp_dealloc != CurrentOrdinal_dealloc)
        return -2;
    void *v = pthread_getspecific(((CurrentOrdinal *)o)->key);
    return (long)(intptr_t)v - 1; /* stored plus one: NULL is -1 */
}

static PyObject *
CurrentOrdinal_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    if (PyTuple_GET_SIZE(args) || (kwds != NULL && PyDict_GET_SIZE(kwds))) {
        PyErr_SetString(PyExc_TypeError, "CurrentOrdinal() takes no arguments");
        return NULL;
    }
    CurrentOrdinal *self = (CurrentOrdinal *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    int rc = pthread_key_create(&self->key, NULL);
    if (rc != 0) {
        Py_DECREF(self);
        errno = rc;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    self->has_key = 1;
    return (PyObject *)self;
}

static void
CurrentOrdinal_dealloc(PyObject *o)
{
    CurrentOrdinal *self = (CurrentOrdinal *)o;
    PyTypeObject *tp = Py_TYPE(self);
    if (self->has_key)
        pthread_key_delete(self->key);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static PyObject *
CurrentOrdinal_get(CurrentOrdinal *self, void *Py_UNUSED(c))
{
    return PyLong_FromLong((long)(intptr_t)pthread_getspecific(self->key) - 1);
}

static int
CurrentOrdinal_set(CurrentOrdinal *self, PyObject *value, void *Py_UNUSED(c))
{
    if (value == NULL) {
        PyErr_SetString(PyExc_AttributeError, "ordinal cannot be deleted");
        return -1;
    }
    long v = PyLong_AsLong(value);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (v < -1 || v > INT32_MAX) {
        PyErr_Format(PyExc_ValueError, "ordinal must be -1 or a device ordinal, got %ld", v);
        return -1;
    }
    int rc = pthread_setspecific(self->key, (void *)(intptr_t)(v + 1));
    if (rc != 0) {
        errno = rc;
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    return 0;
}

static PyGetSetDef CurrentOrdinal_getset[] = {
    {"ordinal", (getter)CurrentOrdinal_get, (setter)CurrentOrdinal_set,
     "this thread's ordinal (-1: none set yet)", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot CurrentOrdinal_slots[] = {
    {Py_tp_new, (void *)CurrentOrdinal_new},
    {Py_tp_dealloc, (void *)CurrentOrdinal_dealloc},
    {Py_tp_getset, CurrentOrdinal_getset},
    {Py_tp_doc, (void *)"CurrentOrdinal()\n--\n\n"
                        "A device ordinal per thread (-1 until set), read by the express "
                        "core without an attribute lookup."},
    {0, NULL},
};

PyType_Spec CurrentOrdinal_spec = {
    .name = "cuasync._reactor.CurrentOrdinal",
    .basicsize = sizeof(CurrentOrdinal),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = CurrentOrdinal_slots,
};


