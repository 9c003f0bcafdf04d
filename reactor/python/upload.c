/*
 * The express submission of a small from_host in one native call: Express.upload (its
 * only submission: cuasync._small_upload.enqueue calls it).
 *
 * A source of at most UPLOAD_MAX bytes, C-contiguous (its buffer), is copied into a
 * pinned staging block, then under the execution lock: the stream's sequence number, a
 * completion slot, the new tensor's Allocation (Python: it keeps the accounting and the
 * block cache), the DMA and the flag write (copy_write: one native call, the GIL
 * released, after the launch fence), then the spin outside the lock. An await or a
 * blocking call (modes AWAIT, BLOCK) whose copy landed within the spin is settled here
 * and gets the new tensor back; otherwise it returns an express.Sent tuple (Python parks
 * work that did not land), or the generic sentinel, having done nothing, when the upload
 * is not its case (the generic path then takes it, and words any error).
 *
 * The staging blocks come from the process's staging pool (PROCESS.staging_acquire) and
 * go back, once their copy has landed, to a short free list per size class kept here:
 * Sent's ``held`` list holds a StagingLease (with the new tensor's allocation), whose
 * dealloc puts its block back on that list, or drops it (to the pool) when the list is
 * full. The lease is dropped when the Sent tuple is (work that landed within the spin)
 * or when the completion that retains it finishes.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "module.h"
#include "express.h"

#include <string.h>

/* -- StagingLease --------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    PyObject *block; /* a PinnedBlock */
    PyObject *cache; /* the free list it goes back to */
} StagingLease;

static void
StagingLease_dealloc(StagingLease *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    if (self->block != NULL && self->cache != NULL &&
        PyList_GET_SIZE(self->cache) < UPLOAD_KEEP) {
        saved_error e;
        save_error(&e);
        if (PyList_Append(self->cache, self->block) < 0)
            PyErr_Clear(); /* (the block goes back to the pool instead) */
        restore_error(&e);
    }
    Py_CLEAR(self->block);
    Py_CLEAR(self->cache);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static PyType_Slot StagingLease_slots[] = {
    {Py_tp_dealloc, (void *)StagingLease_dealloc},
    {Py_tp_doc, (void *)"A small upload's pinned staging block, lent until its copy has "
                        "landed (dropped, the block is kept for the next upload)."},
    {0, NULL},
};

static PyType_Spec StagingLease_spec = {
    .name = "cuasync._reactor.StagingLease",
    .basicsize = sizeof(StagingLease),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = StagingLease_slots,
};

/* -- the core's upload state ------------------------------------------------------ */

int
upload_init(Express *self)
{
    if ((self->lease_t = PyType_FromSpec(&StagingLease_spec)) == NULL)
        return -1;
    for (int i = 0; i < UPLOAD_CLASSES; i++)
        if ((self->blocks[i] = PyList_New(0)) == NULL)
            return -1;
    return 0;
}

int
upload_traverse(Express *self, visitproc visit, void *arg)
{
    Py_VISIT(self->lease_t);
    for (int i = 0; i < UPLOAD_CLASSES; i++)
        Py_VISIT(self->blocks[i]);
    return 0;
}

void
upload_clear(Express *self)
{
    Py_CLEAR(self->lease_t);
    for (int i = 0; i < UPLOAD_CLASSES; i++)
        Py_CLEAR(self->blocks[i]);
}

/* Express.staging_idle_bytes: the bytes of the idle blocks kept here (the staging pool
 * counts them as cached, not in use). */
PyObject *
Express_get_staging_idle(Express *self, void *Py_UNUSED(closure))
{
    unsigned long long bytes = 0;
    for (int i = 0; i < UPLOAD_CLASSES; i++)
        if (self->blocks[i] != NULL)
            bytes += (unsigned long long)PyList_GET_SIZE(self->blocks[i]) << (UPLOAD_MIN_CLASS + i);
    return PyLong_FromUnsignedLongLong(bytes);
}

/* Express.staging_reuses: uploads served a block kept here (the staging pool counts
 * them among its reuses). */
PyObject *
Express_get_staging_reuses(Express *self, void *Py_UNUSED(closure))
{
    return PyLong_FromUnsignedLongLong(self->staging_reuses);
}

/* Express.drop_staging(): the idle blocks kept here go back to the staging pool (its
 * trim calls it first, so that they can be freed). */
PyObject *
Express_drop_staging(Express *self, PyObject *Py_UNUSED(arg))
{
    for (int i = 0; i < UPLOAD_CLASSES; i++) {
        PyObject *cache = self->blocks[i];
        if (cache != NULL && PyList_GET_SIZE(cache) > 0 &&
            PyList_SetSlice(cache, 0, PyList_GET_SIZE(cache), NULL) < 0)
            return NULL;
    }
    Py_RETURN_NONE;
}

/* -- build_upload: from_host's op built in C ------------------------------------------- */

/*
 * cuasync.from_host(array) builds three objects (the op, its Node, its _HostUpload), each
 * through a Python __init__: about as much host time as the native submission after it.
 * For its common case (a numpy.ndarray exactly, of a dtype cuasync knows, no device
 * named, no debug origins recorded, the default device made already) build_upload makes
 * them here, setting each slot as the __init__ chain sets it (tests/transfers/test_small_upload.py
 * holds the two to the same slots); anything else returns None and Python builds it.
 * What it reads are PROCESS's fields (ndarray and dtypes: _dtypes.py's; default_device
 * and devices: device.py's; the hub, which must have a native core) and the classes
 * declared on the core types.
 */

/* An instance of t with no slot set (its __init__ not called), or NULL. */
static inline PyObject *
bare(PyTypeObject *t)
{
    return t->tp_alloc(t, 0);
}

/* build_upload(array): from_host(array)'s op, or None (Python builds it). */
PyObject *
upload_build(PyObject *process, PyObject *array)
{
    ProcessCore *p = PROCESS(process);
    PyTypeObject *op_t = REGISTERED(UPLOAD_OP), *node_t = REGISTERED(NODE);
    PyTypeObject *work_t = REGISTERED(UPLOAD_WORK);
    if (op_t == NULL || node_t == NULL || work_t == NULL || p->ndarray == NULL ||
        !Py_IS_TYPE(array, (PyTypeObject *)p->ndarray) || p->dtypes == NULL ||
        !PyDict_CheckExact(p->dtypes) || p->default_device == NULL ||
        !PyContextVar_CheckExact(p->default_device) || p->devices == NULL ||
        !PyDict_CheckExact(p->devices))
        Py_RETURN_NONE;
    if (p->debug_origins != Py_False) /* (recording origins, or not asked yet: Python asks) */
        Py_RETURN_NONE;
    /* (only where the hub has a native core, which submits what is built here: not with
     * CUASYNC_NATIVE=off, nor before the hub is made) */
    PyObject *hub = p->hub;
    if (hub == NULL || hub == Py_None)
        Py_RETURN_NONE;
    if (!core_subtype_check((PyObject *)Py_TYPE(hub), "HubCore", "PROCESS.hub's type"))
        return NULL;
    if (HUB(hub)->express == NULL || HUB(hub)->express == Py_None)
        Py_RETURN_NONE;
    PyObject *device = made_default_device(p->default_device, p->devices);
    if (device == NULL) /* (its Device not made yet: Python makes it) */
        return PyErr_Occurred() ? NULL : Py_NewRef(Py_None);
    /* (the names of numpy's public attributes it reads, a foreign type's API, and the
     * Node's kind and name: made once, kept for the process) */
    static PyObject *s_dtype, *s_shape, *pending, *from_host;
    if (from_host == NULL &&
        ((s_dtype = PyUnicode_InternFromString("dtype")) == NULL ||
         (s_shape = PyUnicode_InternFromString("shape")) == NULL ||
         (pending = PyUnicode_InternFromString("pending")) == NULL ||
         (from_host = PyUnicode_InternFromString("from_host")) == NULL)) {
        Py_DECREF(device);
        return NULL;
    }
    PyObject *dtype = PyObject_GetAttr(array, s_dtype);
    int known = dtype == NULL ? -1 : PyDict_Contains(p->dtypes, dtype);
    PyObject *shape = known == 1 ? PyObject_GetAttr(array, s_shape) : NULL;
    PyObject *work = NULL, *node = NULL, *op = NULL;
    if (shape == NULL || (work = bare(work_t)) == NULL || (node = bare(node_t)) == NULL ||
        (op = bare(op_t)) == NULL) {
        Py_XDECREF(work);
        Py_XDECREF(node);
        Py_XDECREF(shape);
        Py_XDECREF(dtype);
        Py_DECREF(device);
        return known == 0 ? Py_NewRef(Py_None) : NULL; /* (a dtype Python words the error of) */
    }
    /* _HostUpload(source, dtype) */
    field_set(&UPLOAD_WORK(work)->source, Py_NewRef(array));
    field_set(&UPLOAD_WORK(work)->dtype, Py_NewRef(dtype));
    /* Node("pending", "from_host", shape, dtype, work, (), (), device) */
    PyObject *empty = PyTuple_New(0); /* (the empty tuple: never fails) */
    field_set(&NODE(node)->kind, Py_NewRef(pending));
    field_set(&NODE(node)->name, Py_NewRef(from_host));
    field_set(&NODE(node)->shape, Py_NewRef(shape));
    field_set(&NODE(node)->dtype, Py_NewRef(dtype));
    field_set(&NODE(node)->value, work);
    field_set(&NODE(node)->children, Py_NewRef(empty));
    field_set(&NODE(node)->ins, empty);
    field_set(&NODE(node)->device, Py_NewRef(device));
    /* HostUploadOp(node): DeviceOp.__init__(device), then TensorOp's */
    field_set(&OP(op)->consumed, Py_NewRef(Py_False));
    field_set(&OP(op)->device, device);
    field_set(&TENSOR_OP(op)->node, node);
    field_set(&TENSOR_OP(op)->out, Py_NewRef(Py_None));
    field_set(&TENSOR_OP(op)->planned, Py_NewRef(Py_None));
    field_set(&TENSOR_OP(op)->shape, shape);
    field_set(&TENSOR_OP(op)->dtype, dtype);
    return op;
}

/* -- Express.upload ----------------------------------------------------------------------- */

/* The staging size class of nbytes (the pool's: 4 KiB and up, a power of two). */
static int
size_class_of(Py_ssize_t nbytes)
{
    int cls = UPLOAD_MIN_CLASS;
    while (((Py_ssize_t)1 << cls) < nbytes)
        cls++;
    return cls;
}

/* A pinned block of class cls (a new reference): one kept here, else the pool's. */
static PyObject *
take_block(Express *self, int cls, PyObject *nbytes)
{
    PyObject *cache = self->blocks[cls - UPLOAD_MIN_CLASS];
    Py_ssize_t n = PyList_GET_SIZE(cache);
    if (n > 0) {
        PyObject *block = Py_NewRef(PyList_GET_ITEM(cache, n - 1));
        if (PyList_SetSlice(cache, n - 1, n, NULL) < 0) {
            Py_DECREF(block);
            return NULL;
        }
        self->staging_reuses++;
        return block;
    }
    PyObject *acquire = PROCESS(self->process)->staging_acquire;
    if (acquire == NULL || acquire == Py_None) {
        PyErr_SetString(PyExc_RuntimeError, "PROCESS.staging_acquire is not set");
        return NULL;
    }
    Py_INCREF(acquire);
    PyObject *block = PyObject_CallOneArg(acquire, nbytes);
    Py_DECREF(acquire);
    if (block != NULL && !Py_IS_TYPE(block, REGISTERED(BLOCK))) {
        PyErr_Format(PyExc_TypeError, "the staging pool gave a %.100s, not a PinnedBlock",
                     Py_TYPE(block)->tp_name);
        Py_CLEAR(block);
    }
    return block;
}

/* A lease of block (stolen) that gives it back to class cls's free list when dropped. */
static PyObject *
lease_of(Express *self, PyObject *block, int cls)
{
    PyTypeObject *t = (PyTypeObject *)self->lease_t;
    StagingLease *lease = (StagingLease *)t->tp_alloc(t, 0);
    if (lease == NULL) {
        Py_DECREF(block);
        return NULL;
    }
    lease->block = block;
    lease->cache = Py_NewRef(self->blocks[cls - UPLOAD_MIN_CLASS]);
    return (PyObject *)lease;
}

/* The copy and its flag write (under the lock): natively when the backend has the
 * native copy (and its copy_and_write, BackendCore's field, is its own: a method bound to
 * it, not a callable set there by a test), the stream is its own, this thread's current
 * device is the stream's and flags need no remapping; else (or to redo a call that
 * failed: then the bindings raise why) the backend's copy_and_write. 0, or -1 with the
 * error set. */
static int
copy_and_write(Express *self, PyObject *stream, PyObject *device, unsigned long long dst,
               PyObject *block, Py_ssize_t nbytes, uintptr_t address, uint32_t gen)
{
    PyObject *handle = STREAM(stream)->handle;
    PyObject *src = BLOCK(block)->address;
    unsigned long long h, s;
    if (handle == NULL || src == NULL || get_u64(handle, &h) < 0 || get_u64(src, &s) < 0)
        return -1;
    uintptr_t mh, wv;
    /* (another callable set as the backend's copy_and_write, a test's, is called: it
     * decides) */
    PyObject *call = BACKEND(self->backend)->copy_and_write;
    int own = call != NULL && PyMethod_Check(call) && PyMethod_GET_SELF(call) == self->backend;
    int native = own && get_copy_entry_points(&mh, &wv);
    if (native) {
        PyObject *remap = BACKEND(self->backend)->host_remap;
        PyObject *current = BACKEND(self->backend)->current;
        PyObject *ordinal = is_device(device) ? DEVICE(device)->ordinal : NULL;
        native = BACKEND(self->backend)->native_copy && remap != NULL && PyList_CheckExact(remap) &&
                 PyList_GET_SIZE(remap) == 0 && current != NULL && ordinal != NULL &&
                 PyLong_CheckExact(ordinal) &&
                 current_ordinal_of(current) == PyLong_AsLong(ordinal) &&
                 STREAM(stream)->owned == Py_True;
        if (PyErr_Occurred())
            return -1;
    }
    if (native && copy_write(mh, wv, dst, s, (unsigned long long)nbytes, h, address, gen) == 0)
        return 0;
    /* (not made natively, or made again through the bindings, which raise why) */
    PyObject *a[7] = {NULL, NULL, src, NULL, handle, NULL, NULL};
    PyObject *d = PyLong_FromUnsignedLongLong(dst), *n = PyLong_FromSsize_t(nbytes);
    PyObject *f = PyLong_FromUnsignedLongLong(address), *g = PyLong_FromUnsignedLong(gen);
    PyObject *r = NULL;
    if (d != NULL && n != NULL && f != NULL && g != NULL) {
        a[1] = d, a[3] = n, a[5] = f, a[6] = g;
        r = backend_call(call, "copy_and_write", a + 1, 6 | PY_VECTORCALL_ARGUMENTS_OFFSET);
    }
    Py_XDECREF(d);
    Py_XDECREF(n);
    Py_XDECREF(f);
    Py_XDECREF(g);
    Py_XDECREF(r);
    return r == NULL ? -1 : 0;
}

/* Whether the upload is the core's case (else the generic path takes it): 1 yes. */
static int
upload_allowed(Express *self, PyObject *op, PyObject *stream, PyObject *device)
{
    PyObject *mine = OP(op)->device;
    if (mine == NULL || (mine != Py_None && mine != device) ||
        STREAM(stream)->capturing != Py_False)
        return 0;
    int t = state_allows(self);
    if (t <= 0)
        return t;
    PyObject *process = module_process(Py_TYPE(self));
    if (process == NULL)
        return -1;
    PyObject *forced = PROCESS(process)->forced_route;
    if (forced != NULL && forced != Py_None) /* (a route forced for a benchmark) */
        return 0;
    if (!is_device(device))
        return 0;
    PyObject *ordinal = Py_NewRef(DEVICE(device)->ordinal);
    PyObject *memops = PyDict_GetItemWithError(self->memops, ordinal);
    if (memops == NULL && !PyErr_Occurred()) {
        /* not asked yet (a process's first upload on the device): asked here, as a
         * launch asks it, so that the first upload is not declined */
        memops = ask_memops(self, ordinal);
    }
    Py_DECREF(ordinal);
    return memops == Py_True ? 1 : PyErr_Occurred() ? -1 : 0;
}

PyObject *
Express_upload(Express *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (check_nargs("upload", nargs, 4) < 0)
        return NULL;
    PyObject *op = args[0], *stream = args[1], *adapter = args[3];
    long mode = PyLong_AsLong(args[2]);
    if (mode == -1 && PyErr_Occurred())
        return NULL;
    if (mode < MODE_NO_SPIN || mode > MODE_BLOCK) {
        PyErr_Format(PyExc_ValueError, "mode must be 0, 1 or 2, got %ld", mode);
        return NULL;
    }
    ProcessCore *process = PROCESS(self->process);
    /* (cleared, or what it reads not declared yet) */
    if (self->hub == NULL || REGISTERED(UPLOAD_OP) == NULL || REGISTERED(NODE) == NULL ||
        REGISTERED(UPLOAD_WORK) == NULL || REGISTERED(BLOCK) == NULL ||
        process->upload_failed == NULL || process->upload_failed == Py_None)
        return generic(self);
    if (!Py_IS_TYPE(op, REGISTERED(UPLOAD_OP)) || !Py_IS_TYPE(stream, REGISTERED(STREAM)))
        return generic(self);
    PyObject *node = TENSOR_OP(op)->node;
    PyObject *work = node != NULL && Py_IS_TYPE(node, REGISTERED(NODE)) ? NODE(node)->value
                                                                          : NULL;
    PyObject *device = STREAM(stream)->device;
    if (work == NULL || !Py_IS_TYPE(work, REGISTERED(UPLOAD_WORK)) || device == NULL)
        return generic(self);
    PyObject *source = UPLOAD_WORK(work)->source, *dtype = UPLOAD_WORK(work)->dtype;
    if (source == NULL || dtype == NULL)
        return generic(self);
    int t = upload_allowed(self, op, stream, device);
    if (t <= 0)
        return t < 0 ? NULL : generic(self);
    Py_buffer view;
    if (PyObject_GetBuffer(source, &view, PyBUF_C_CONTIGUOUS) < 0) {
        PyErr_Clear(); /* (not contiguous, or a dtype numpy exports no buffer for) */
        return generic(self);
    }
    if (view.len <= 0 || view.len > UPLOAD_MAX) {
        PyBuffer_Release(&view);
        return generic(self);
    }
    Py_INCREF(dtype); /* (held: Python runs below, and could replace the op's work) */
    Py_INCREF(device);
    Py_ssize_t nbytes = view.len;
    int cls = size_class_of(nbytes);
    long long budget_us = 0;
    int long_ops = 0;
    PyObject *nbytes_obj = NULL, *shape = NULL, *block = NULL, *box = NULL, *result = NULL;
    PyObject *held = NULL; /* [the staging block's lease, the allocation]: kept until the
                            * copy has landed (by the Sent tuple, or its completion) */
    /* what can fail before the lock, made before it */
    if ((nbytes_obj = PyLong_FromSsize_t(nbytes)) == NULL ||
        (shape = PyObject_GetAttr(source, self->s_shape)) == NULL ||
        (box = PyObject_CallNoArgs(self->box_type)) == NULL ||
        (block = take_block(self, cls, nbytes_obj)) == NULL)
        goto done;
    if (mode != MODE_NO_SPIN) {
        PyObject *budget = state_budget(self);
        if (budget == NULL)
            goto done;
        budget_us = PyLong_Check(budget) ? PyLong_AsLongLong(budget) : -1;
        Py_DECREF(budget);
        if (budget_us < 0) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_TypeError, "the hub's spin_budget_us must be an int >= 0");
            goto done;
        }
        if (mode == MODE_AWAIT && budget_us &&
            (long_ops = adapter_long_ops(adapter)) < 0)
            goto done;
    }
    /* read now (from_host's contract: the source is read during submission) */
    PyObject *staged = BLOCK(block)->address;
    unsigned long long staged_at;
    if (staged == NULL || get_u64(staged, &staged_at) < 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_SystemError, "a pinned block without an address");
        goto done;
    }
    memcpy((void *)(uintptr_t)staged_at, view.buf, (size_t)nbytes);
    PyBuffer_Release(&view); /* (sets view.obj to NULL) */
    /* the block lent to the upload from now on: nothing the copy may still read is ever
     * given back before its flag has landed, whatever fails below */
    PyObject *lease = lease_of(self, block, cls);
    block = NULL;
    if (lease == NULL || (held = PyList_New(2)) == NULL) {
        Py_XDECREF(lease);
        goto done;
    }
    PyList_SET_ITEM(held, 0, lease);
    PyList_SET_ITEM(held, 1, Py_NewRef(Py_None));

    PyObject *slot;
    Py_ssize_t s;
    uint32_t gen;
    uintptr_t address;
    if (lock_and_claim(self, stream, &slot, &s, &gen, &address, &result) <= 0)
        goto done;
    PyObject *submitted = STREAM(stream)->submitted;
    long long seqv = submitted != NULL && PyLong_CheckExact(submitted)
                         ? PyLong_AsLongLong(submitted) + 1 : -1;
    PyObject *seq = seqv >= 0 ? PyLong_FromLongLong(seqv) : NULL;
    if (seq == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_SystemError, "a stream's submission number is not an int");
        unclaim_keeping_error(self, s);
        Py_DECREF(slot);
        unlock_keeping_error(self);
        goto done;
    }
    field_set(&STREAM(stream)->submitted, Py_NewRef(seq));
    PyObject *genobj = PyLong_FromUnsignedLong(gen);
    PyObject *alloc = NULL;
    cuasync_active = 1;
    int failed = genobj == NULL;
    if (!failed) {
        /* the new tensor's memory (its write on this stream, seq, recorded as it is made):
         * a block of the block cache here, else Allocation() */
        alloc_shape *shape_of = process_alloc_shape(self->process);
        alloc = shape_of != NULL && process->selected_pools != NULL &&
                        PyContextVar_CheckExact(process->selected_pools)
                    ? alloc_small(shape_of, device, nbytes, stream, seq, process->selected_pools)
                    : PyErr_Occurred() ? NULL : Py_NewRef(Py_None);
        if (alloc == Py_None) {
            Py_DECREF(alloc);
            PyObject *a[3] = {device, nbytes_obj, stream};
            alloc = PyObject_Vectorcall((PyObject *)REGISTERED(ALLOCATION), a, 3, NULL);
        }
        PyObject *ptr = alloc == NULL ? NULL : ALLOCATION(alloc)->ptr;
        unsigned long long dst;
        if (alloc != NULL) /* (held with the block from here on) */
            PyList_SetItem(held, 1, Py_NewRef(alloc));
        StagingLease *lent = (StagingLease *)PyList_GET_ITEM(held, 0);
        failed = ptr == NULL || get_u64(ptr, &dst) < 0 ||
                 copy_and_write(self, stream, device, dst, lent->block, nbytes, address, gen) < 0;
    }
    if (failed) {
        /* nothing enqueued, or the copy made and its error raised: the slot back, and
         * what it used (held) released once the stream's earlier work has drained */
        saved_error exc;
        save_error(&exc);
        PyObject *a[6] = {self->hub, stream, seq, slot, box, held};
        PyObject *failed_call = Py_NewRef(process->upload_failed);
        PyObject *r = PyObject_Vectorcall(failed_call, a, 6, NULL);
        Py_DECREF(failed_call);
        if (r == NULL) /* (kept for good: the copy may still read the block) */
            Py_INCREF(held);
        Py_XDECREF(r);
        PyErr_Clear(); /* (the copy's error is the one raised) */
        cuasync_active = 0;
        unlock(self);
        PyErr_Clear();
        restore_error(&exc);
        Py_XDECREF(alloc);
        Py_XDECREF(genobj);
        Py_DECREF(seq);
        Py_DECREF(slot);
        goto done;
    }
    cuasync_active = 0;
    int unlocked = unlock(self);
    self->uploads++;
    /* the output, and the spin, outside the lock */
    PyObject *a3[3] = {alloc, shape, dtype};
    PyObject *tensor = unlocked < 0 ? NULL
                                    : PyObject_Vectorcall((PyObject *)REGISTERED(TENSOR), a3, 3, NULL);
    Py_DECREF(alloc);
    if (tensor != NULL) {
        /* (the op's, and ours until returned: Python runs, and the GIL is released,
         * before the tensor is handed back) */
        field_set(&UPLOAD_OP(op)->output, Py_NewRef(tensor));
        long long spin_us = 0;
        PyObject *spin_obj = NULL;
        PyObject *completed = STREAM(stream)->completed;
        long long done_seq = completed != NULL && PyLong_CheckExact(completed)
                                 ? PyLong_AsLongLong(completed) : 0;
        if (mode == MODE_AWAIT && budget_us) {
            spin_us = budget_us;
            if (long_ops || done_seq < seqv - 1) {
                PyObject *sa[4] = {self->hub, adapter, stream, seq};
                spin_obj = PyObject_Vectorcall(self->spin_us, sa, 4, NULL);
                spin_us = spin_obj == NULL || spin_obj == Py_None ? 0 : PyLong_AsLongLong(spin_obj);
            }
        }
        else if (mode == MODE_BLOCK && done_seq >= seqv - 1) {
            spin_us = budget_us;
        }
        int landed = !PyErr_Occurred() && spin_us > 0
                         ? spin_flag((_Atomic uint32_t *)address, gen, (uint64_t)spin_us * 1000u, 0)
                         : 0;
        if (landed && mode != MODE_NO_SPIN) {
            /* landed within the spin: settled here, and the output returned (what
             * held keeps is released below: the copy has read the block) */
            if (mode == MODE_AWAIT && long_ops)
                ADAPTER(adapter)->long_ops = 0;
            if (settle_inline(self, stream, s, seqv, seq) == 0)
                result = Py_NewRef(tensor);
        }
        else if (!PyErr_Occurred()) {
            PyObject *spin_item = spin_obj == Py_None ? Py_NewRef(Py_None)
                                                      : PyLong_FromLongLong(spin_us);
            PyObject *addr = PyLong_FromUnsignedLongLong(address);
            if (spin_item != NULL && addr != NULL)
                result = PyTuple_Pack(10, self->hub, box, slot, genobj, addr, seq, spin_item,
                                      landed ? Py_True : Py_False, self->minus_one, held);
            Py_XDECREF(spin_item);
            Py_XDECREF(addr);
        }
        Py_XDECREF(spin_obj);
        Py_DECREF(tensor);
    }
    if (result == NULL) {
        /* copied, and an error before Python has it (no output made, out of memory): its
         * completion goes to the background watcher, which frees the slot and what it
         * held once the copy lands; if even that fails, they are kept for good */
        saved_error e;
        save_error(&e);
        if (UPLOAD_OP(op)->output == NULL) /* (the completion's output: none) */
            field_set(&UPLOAD_OP(op)->output, Py_NewRef(Py_None));
        PyObject *addr = PyLong_FromUnsignedLongLong(address);
        PyObject *r = NULL;
        if (addr != NULL) {
            PyObject *a[9] = {self->hub, op, stream, box, slot, genobj, addr, seq, held};
            r = PyObject_Vectorcall(self->abandon, a, 9, NULL);
        }
        if (r == NULL) { /* (its slot is lost, as when _core_abandon fails for a launch) */
            PyErr_WriteUnraisable(op);
            Py_INCREF(held);
        }
        Py_XDECREF(r);
        Py_XDECREF(addr);
        restore_error(&e);
    }
    Py_DECREF(genobj);
    Py_DECREF(seq);
    Py_DECREF(slot);
done:
    if (view.obj != NULL)
        PyBuffer_Release(&view);
    Py_XDECREF(nbytes_obj);
    Py_XDECREF(shape);
    Py_XDECREF(box);
    Py_XDECREF(block); /* (not lent: back to the pool) */
    Py_XDECREF(held);  /* (nothing enqueued, or handed on: the lease keeps its block) */
    Py_DECREF(dtype);
    Py_DECREF(device);
    return result;
}
