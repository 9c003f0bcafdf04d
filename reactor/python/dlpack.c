/*
 * DLPack capsules in C: the four primitives cuasync/_interop/capsules.py serves (made,
 * read, taken, deleted: below), and the destructor of the capsules cuasync exports,
 * as the DLPack specification's reference implementation writes it: a capsule nobody
 * consumed still owns its managed tensor, so it calls the tensor's deleter; a consumed
 * one was renamed ("used_dltensor...") and is its consumer's business.
 *
 * It is C because a capsule may be dropped while an exception is set: numpy's
 * from_dlpack refuses a CUDA capsule, sets its error and then releases the capsule. A
 * Python (ctypes) destructor cannot run in that state without losing the error (the
 * call machinery turns it into a SystemError), so this one puts the error aside around
 * the deleter and gives it back. The deleter itself (a ctypes callback) then runs
 * Python code with no error set; an error it raises is reported as unraisable by ctypes.
 * At interpreter exit it does nothing: the memory goes away with the process, and the
 * deleter's Python code may already be torn down.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#include "module.h"
#include "cores.h"

/* (express.c) the execution lock taken with one compare-and-swap: 1 taken, 0 held, -1
 * not an ExecLock; and given back */
int exec_lock_try(PyObject *o);
void exec_lock_release(PyObject *o);

/* The two layouts of dlpack.h, as far as the deleter: DLTensor is 48 bytes on LP64. */
typedef struct {
    void *data;
    int32_t device_type, device_id;
    int32_t ndim;
    uint8_t code, bits;
    uint16_t lanes;
    int64_t *shape, *strides;
    uint64_t byte_offset;
} dl_tensor;

typedef struct legacy_managed {
    dl_tensor dl_tensor;
    void *manager_ctx;
    void (*deleter)(struct legacy_managed *self);
} legacy_managed;

typedef struct versioned_managed {
    uint32_t major, minor;
    void *manager_ctx;
    void (*deleter)(struct versioned_managed *self);
    uint64_t flags;
    dl_tensor dl_tensor;
} versioned_managed;

void
dlpack_capsule_destructor(PyObject *capsule)
{
    if (IS_FINALIZING())
        return; /* at exit the memory goes away with the process */
    SAVE_ERROR(pending);
    const char *name = PyCapsule_GetName(capsule);
    if (name != NULL && strcmp(name, "dltensor_versioned") == 0) {
        versioned_managed *m = PyCapsule_GetPointer(capsule, name);
        if (m != NULL && m->deleter != NULL)
            m->deleter(m);
    }
    else if (name != NULL && strcmp(name, "dltensor") == 0) {
        legacy_managed *m = PyCapsule_GetPointer(capsule, name);
        if (m != NULL && m->deleter != NULL)
            m->deleter(m);
    }
    if (PyErr_Occurred()) /* not a capsule: a bug of the caller, told but not raised */
        PyErr_WriteUnraisable(capsule);
    RESTORE_ERROR(pending);
}

/* -- capsules made and read here (cuasync/_interop/capsules.py) ----------------------
 *
 * dlpack_pack builds a managed tensor in one malloc'ed block (the struct, the owner pair,
 * then shape and strides) whose manager_ctx is the owner pair (release, arg): the deleter
 * calls release(arg) once, with the GIL, then drops both and frees the block (no Python
 * object is made per capsule but the capsule). dlpack_unpack reads a producer's capsule
 * into a tuple, with the bytes its layout spans where the common checks pass,
 * dlpack_take renames it "used_..." (the consumer owns it then), and dlpack_delete calls
 * a consumed tensor's deleter. The Python module words every error; these only refuse
 * arguments of the wrong type. */

/* More dimensions than this in a producer's capsule: a broken capsule (no library makes
 * them), not read (its shape array may be garbage). */
#define DLPACK_MAX_NDIM 64

/* What a packed capsule's manager_ctx points to: release(arg) is its owner's call
 * (dlpack_pack's capsules); or, for Tensor.__dlpack__'s (release NULL), arg is the
 * exported allocation, and legacy, where set, the legacy default stream the consumer
 * reads it on, recorded as its reader at the release under lock (the execution lock). */
typedef struct {
    PyObject *release, *arg, *lock, *legacy;
} owner_pair;

static int record_legacy_read(owner_pair *owner);

/* ``ctx`` (the pair kept) called once and dropped, from any thread. At exit nothing is
 * called: the memory goes away with the process. */
static void
release_ctx(void *ctx)
{
    if (ctx == NULL || IS_FINALIZING())
        return;
    owner_pair *owner = ctx;
    PyGILState_STATE gil = PyGILState_Ensure();
    SAVE_ERROR(pending);
    if (owner->release != NULL) {
        PyObject *r = PyObject_CallOneArg(owner->release, owner->arg);
        if (r == NULL)
            PyErr_WriteUnraisable(owner->release);
        else
            Py_DECREF(r);
    }
    else if (owner->legacy != NULL && record_legacy_read(owner) < 0)
        PyErr_WriteUnraisable(owner->arg);
    Py_CLEAR(owner->release);
    Py_CLEAR(owner->arg);
    Py_CLEAR(owner->lock);
    Py_CLEAR(owner->legacy);
    RESTORE_ERROR(pending);
    PyGILState_Release(gil);
}

static void
packed_deleter_versioned(versioned_managed *m)
{
    void *ctx = m->manager_ctx;
    m->manager_ctx = NULL;
    release_ctx(ctx);
    if (!IS_FINALIZING())
        free(m);
}

static void
packed_deleter_legacy(legacy_managed *m)
{
    void *ctx = m->manager_ctx;
    m->manager_ctx = NULL;
    release_ctx(ctx);
    if (!IS_FINALIZING())
        free(m);
}

/* the ints of a tuple into int64s; -1 with an error set */
static int
fill_i64(PyObject *tuple, int64_t *out, Py_ssize_t n, const char *what)
{
    if (!PyTuple_CheckExact(tuple) || PyTuple_GET_SIZE(tuple) != n) {
        PyErr_Format(PyExc_TypeError, "dlpack_pack: %s must be a tuple of %zd ints", what, n);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        long long v = PyLong_AsLongLong(PyTuple_GET_ITEM(tuple, i));
        if (v == -1 && PyErr_Occurred())
            return -1;
        out[i] = (int64_t)v;
    }
    return 0;
}

/* A capsule of CUDA memory at data owned by *owner (its references stolen: moved into
 * the capsule, or dropped on failure). */
static PyObject *
pack_capsule(owner_pair *owner, unsigned long long data, long long device_id, PyObject *shape,
             PyObject *strides, long long code, long long bits, unsigned long long flags,
             int versioned)
{
    PyObject *capsule = NULL;
    char *block = NULL;
    if (!PyTuple_CheckExact(shape) || PyTuple_GET_SIZE(shape) > DLPACK_MAX_NDIM) {
        PyErr_Format(PyExc_TypeError, "dlpack_pack: shape must be a tuple of at most %d ints",
                     DLPACK_MAX_NDIM);
        goto fail;
    }
    Py_ssize_t ndim = PyTuple_GET_SIZE(shape);
    size_t head = versioned ? sizeof(versioned_managed) : sizeof(legacy_managed);
    head = (head + sizeof(void *) - 1) / sizeof(void *) * sizeof(void *);
    size_t pair_bytes = (sizeof(owner_pair) + 7) / 8 * 8;
    block = malloc(head + pair_bytes + 2 * (size_t)(ndim ? ndim : 1) * sizeof(int64_t));
    if (block == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    owner_pair *kept = (owner_pair *)(block + head);
    int64_t *dims = (int64_t *)(block + head + pair_bytes), *steps = dims + ndim;
    if (fill_i64(shape, dims, ndim, "shape") < 0 || fill_i64(strides, steps, ndim, "strides") < 0)
        goto fail;
    dl_tensor *t;
    if (versioned) {
        versioned_managed *m = (versioned_managed *)block;
        m->major = 1;
        m->minor = 0;
        m->flags = flags;
        m->deleter = packed_deleter_versioned;
        m->manager_ctx = NULL;
        t = &m->dl_tensor;
    }
    else {
        legacy_managed *m = (legacy_managed *)block;
        m->deleter = packed_deleter_legacy;
        m->manager_ctx = NULL;
        t = &m->dl_tensor;
    }
    t->data = (void *)(uintptr_t)data;
    t->device_type = 2; /* kDLCUDA */
    t->device_id = (int32_t)device_id;
    t->ndim = (int32_t)ndim;
    t->code = (uint8_t)code;
    t->bits = (uint8_t)bits;
    t->lanes = 1;
    t->shape = dims;
    t->strides = steps;
    t->byte_offset = 0;
    capsule = PyCapsule_New(block, versioned ? "dltensor_versioned" : "dltensor",
                            dlpack_capsule_destructor);
    if (capsule == NULL)
        goto fail;
    *kept = *owner; /* (the references move into the capsule) */
    if (versioned)
        ((versioned_managed *)block)->manager_ctx = kept;
    else
        ((legacy_managed *)block)->manager_ctx = kept;
    return capsule;
fail:
    free(block);
    Py_CLEAR(owner->release);
    Py_CLEAR(owner->arg);
    Py_CLEAR(owner->lock);
    Py_CLEAR(owner->legacy);
    return NULL;
}

/* dlpack_pack(release, arg, data, device_id, shape, strides, code, bits, flags,
 * versioned) */
static PyObject *
dlpack_pack(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (check_nargs("dlpack_pack", nargs, 10) < 0)
        return NULL;
    PyObject *release = args[0], *arg = args[1];
    unsigned long long data, flags;
    long long device_id, code, bits;
    if (!PyCallable_Check(release)) {
        PyErr_SetString(PyExc_TypeError, "dlpack_pack: release must be callable");
        return NULL;
    }
    if (get_u64(args[2], &data) < 0 || get_i64(args[3], &device_id) < 0 ||
        get_i64(args[6], &code) < 0 || get_i64(args[7], &bits) < 0 ||
        get_u64(args[8], &flags) < 0)
        return NULL;
    int versioned = PyObject_IsTrue(args[9]);
    if (versioned < 0)
        return NULL;
    owner_pair owner = {Py_NewRef(release), Py_NewRef(arg), NULL, NULL};
    return pack_capsule(&owner, data, device_id, args[4], args[5], code, bits, flags, versioned);
}

static PyObject *
int64_tuple(const int64_t *values, int32_t n)
{
    PyObject *t = PyTuple_New(n);
    for (int32_t i = 0; t != NULL && i < n; i++) {
        PyObject *v = PyLong_FromLongLong(values[i]);
        if (v == NULL)
            Py_CLEAR(t);
        else
            PyTuple_SET_ITEM(t, i, v);
    }
    return t;
}

/* The bytes a producer's layout spans from data (foreign_extent's common case, in
 * cuasync/_interop/foreign.py), or -1 where one of its checks may fail or the layout is
 * empty: the Python module checks those one at a time and words the failure. */
static long long
dl_extent(const dl_tensor *t, unsigned long long data)
{
    if (t->lanes != 1 || t->bits == 0 || t->bits % 8 != 0)
        return -1;
    const unsigned long long itemsize = t->bits / 8;
    if (data == 0 || data % itemsize != 0)
        return -1;
    unsigned long long size = 1, span = 0, compact = 1;
    for (int32_t i = t->ndim - 1; i >= 0; i--) {
        int64_t d = t->shape[i];
        int64_t st = t->strides != NULL ? t->strides[i] : (int64_t)compact;
        if (d <= 0 || (st < 0 && d > 1))
            return -1; /* (an empty array spans no byte: worded, or 0, in Python) */
        if ((unsigned long long)d > (unsigned long long)INT64_MAX / itemsize / size)
            return -1;
        size *= (unsigned long long)d;
        compact = size;
        if (d > 1 && st > 0) {
            if ((unsigned long long)(d - 1) > ((unsigned long long)INT64_MAX - span) / (unsigned long long)st)
                return -1;
            span += (unsigned long long)st * (unsigned long long)(d - 1);
        }
    }
    if (span + 1 > (unsigned long long)INT64_MAX / itemsize)
        return -1;
    unsigned long long nbytes = itemsize * (span + 1);
    if (nbytes - 1 > ~0ULL - data) /* its last byte past the 64-bit address space */
        return -1;
    return (long long)nbytes;
}

/* dlpack_unpack(capsule): None unless it is a "dltensor" or "dltensor_versioned" capsule;
 * else (address, versioned, major, minor, flags, data + byte_offset, device_type,
 * device_id, ndim, shape, strides, code, bits, lanes, has_deleter, nbytes), shape None
 * when the capsule has none to read (ndim out of 0..64, or a NULL array), strides None
 * when NULL (compact row-major), and nbytes the bytes the layout spans from data where
 * the common checks pass, else -1 (see dl_extent). The tuple is built directly: one
 * allocation per item, no format string. */
static PyObject *
dlpack_unpack(PyObject *self, PyObject *capsule)
{
    (void)self;
    if (!PyCapsule_CheckExact(capsule))
        Py_RETURN_NONE;
    const char *name = PyCapsule_GetName(capsule);
    if (name == NULL && PyErr_Occurred())
        return NULL;
    int versioned;
    if (name != NULL && strcmp(name, "dltensor_versioned") == 0)
        versioned = 1;
    else if (name != NULL && strcmp(name, "dltensor") == 0)
        versioned = 0;
    else
        Py_RETURN_NONE;
    void *p = PyCapsule_GetPointer(capsule, name);
    if (p == NULL)
        return NULL;
    const dl_tensor *t;
    unsigned int major = 0, minor = 0;
    unsigned long long flags = 0;
    int has_deleter;
    if (versioned) {
        const versioned_managed *m = p;
        major = m->major;
        minor = m->minor;
        flags = m->flags;
        has_deleter = m->deleter != NULL;
        t = &m->dl_tensor;
    }
    else {
        const legacy_managed *m = p;
        has_deleter = m->deleter != NULL;
        t = &m->dl_tensor;
    }
    PyObject *out = PyTuple_New(16);
    if (out == NULL)
        return NULL;
    PyObject *shape = Py_None, *strides = Py_None;
    unsigned long long data = 0;
    long long nbytes = -1;
    int32_t ndim = 0;
    int readable = 0;
    if (!versioned || major == 1) { /* (another layout: read nothing past the version) */
        ndim = t->ndim;
        data = (unsigned long long)((uintptr_t)t->data + t->byte_offset);
        readable = ndim >= 0 && ndim <= DLPACK_MAX_NDIM && (ndim == 0 || t->shape != NULL);
    }
    else
        flags = 0, has_deleter = 0;
    if (readable) {
        shape = int64_tuple(t->shape, ndim);
        strides = t->strides != NULL ? int64_tuple(t->strides, ndim) : Py_NewRef(Py_None);
        if (shape == NULL || strides == NULL) {
            Py_XDECREF(shape);
            Py_XDECREF(strides);
            Py_DECREF(out);
            return NULL;
        }
        nbytes = dl_extent(t, data);
    }
    else {
        Py_INCREF(shape);
        Py_INCREF(strides);
    }
    const int other = versioned && major != 1;
    PyObject *items[16] = {
        PyLong_FromUnsignedLongLong((unsigned long long)(uintptr_t)p),
        Py_NewRef(versioned ? Py_True : Py_False),
        PyLong_FromUnsignedLong(major),
        PyLong_FromUnsignedLong(minor),
        PyLong_FromUnsignedLongLong(flags),
        PyLong_FromUnsignedLongLong(data),
        PyLong_FromLong(other ? 0 : t->device_type),
        PyLong_FromLong(other ? 0 : t->device_id),
        PyLong_FromLong(ndim),
        shape,
        strides,
        PyLong_FromLong(other ? 0 : t->code),
        PyLong_FromLong(other ? 0 : t->bits),
        PyLong_FromLong(other ? 0 : t->lanes),
        Py_NewRef(has_deleter ? Py_True : Py_False),
        PyLong_FromLongLong(nbytes),
    };
    int failed = 0;
    for (int i = 0; i < 16; i++) {
        if (items[i] == NULL)
            failed = 1;
        else
            PyTuple_SET_ITEM(out, i, items[i]);
    }
    if (failed) {
        Py_DECREF(out); /* (its unset items are NULL: skipped) */
        return NULL;
    }
    return out;
}

/* dlpack_take(capsule, versioned): the capsule renamed "used_dltensor[_versioned]": its
 * managed tensor is the consumer's now, and the capsule's destructor leaves it alone. */
static PyObject *
dlpack_take(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (check_nargs("dlpack_take", nargs, 2) < 0)
        return NULL;
    int versioned = PyObject_IsTrue(args[1]);
    if (versioned < 0)
        return NULL;
    if (PyCapsule_SetName(args[0], versioned ? "used_dltensor_versioned" : "used_dltensor") < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* dlpack_delete(address, versioned): the deleter of a consumed managed tensor, called. */
static PyObject *
dlpack_delete(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (check_nargs("dlpack_delete", nargs, 2) < 0)
        return NULL;
    unsigned long long address;
    if (get_u64(args[0], &address) < 0)
        return NULL;
    int versioned = PyObject_IsTrue(args[1]);
    if (versioned < 0 || address == 0)
        return versioned < 0 ? NULL : Py_NewRef(Py_None);
    if (versioned) {
        versioned_managed *m = (versioned_managed *)(uintptr_t)address;
        if (m->deleter != NULL)
            m->deleter(m);
    }
    else {
        legacy_managed *m = (legacy_managed *)(uintptr_t)address;
        if (m->deleter != NULL)
            m->deleter(m);
    }
    Py_RETURN_NONE;
}

/* -- Tensor.__dlpack__ and Tensor.__dlpack_device__ (TensorCore's methods) -----------
 *
 * The call torch and CuPy make (the legacy default stream or -1, no device other than
 * the tensor's, no copy) of a tensor of cuasync's memory is answered here: nothing of
 * cuasync's pending on another stream, no Python runs, at the export or at the release.
 * Anything else (another stream to order, a dtype without a cached code, a first export
 * on a device: its legacy stream not made yet, a lock taken at the release) takes the
 * Python functions of cuasync/_interop/dlpack.py, export and _release_to_legacy. */

/* A Python function of cuasync/_interop/dlpack.py, a field of PROCESS (process: borrowed,
 * or NULL with an error set) that the module sets when it is imported, called. */
static PyObject *
call_python(PyObject *process, PyObject *(*field)(ProcessCore *), const char *what,
            PyObject *const *args, size_t nargs)
{
    if (process == NULL)
        return NULL;
    PyObject *fn = field(PROCESS(process));
    if (fn == NULL || fn == Py_None) {
        PyErr_Format(PyExc_RuntimeError, "PROCESS.%s is not set (import cuasync first)", what);
        return NULL;
    }
    Py_INCREF(fn); /* (held: the call may replace the field) */
    PyObject *r = PyObject_Vectorcall(fn, args, nargs, NULL);
    Py_DECREF(fn);
    return r;
}

static int exact_int(PyObject *o, long long *v);

static PyObject *field_export(ProcessCore *p) { return p->dlpack_export; }
static PyObject *field_release(ProcessCore *p) { return p->dlpack_release; }
static PyObject *field_device(ProcessCore *p) { return p->dlpack_device; }

/* The legacy stream recorded as the reader of the allocation (owner->arg): the next
 * sequence number of that stream, under the execution lock (held already where this
 * thread runs a then() function); where another thread holds it, Python's release,
 * which waits for it with the GIL released. 0, or -1 with an error set. */
static int
record_legacy_read(owner_pair *owner)
{
    PyObject *alloc = owner->arg, *legacy = owner->legacy;
    int mine = cuasync_active; /* (this thread holds it: inside a then()) */
    if (!mine && exec_lock_try(owner->lock) != 1) {
        PyObject *r = call_python(process_of(alloc), field_release, "dlpack_release", &alloc, 1);
        Py_XDECREF(r);
        return r == NULL ? -1 : 0;
    }
    int rc = -1;
    StreamCore *stream = STREAM(legacy);
    PyObject *next = int_plus(stream->submitted, 1, "a stream's _submitted");
    if (next != NULL) {
        field_set(&stream->submitted, Py_NewRef(next));
        rc = PyDict_SetItem(ALLOCATION(alloc)->reads, legacy, next);
        Py_DECREF(next);
    }
    if (!mine)
        exec_lock_release(owner->lock);
    return rc;
}


/* foreign.only_legacy_uses: whether no stream but legacy may still be using alloc (a
 * consumer on legacy owes nothing then); 0 also where that cannot be told here. */
static int
only_legacy_uses(AllocationCore *alloc, PyObject *legacy)
{
    PyObject *write = alloc->write;
    if (write != NULL && write != Py_None) {
        if (!PyTuple_CheckExact(write) || PyTuple_GET_SIZE(write) != 2)
            return 0;
        PyObject *stream = PyTuple_GET_ITEM(write, 0);
        if (stream != legacy && stream_pending(stream, PyTuple_GET_ITEM(write, 1)) != 0)
            return 0;
    }
    if (alloc->reads == NULL || !PyDict_CheckExact(alloc->reads))
        return 0;
    Py_ssize_t pos = 0;
    PyObject *stream, *seq;
    while (PyDict_Next(alloc->reads, &pos, &stream, &seq)) /* (no Python code runs) */
        if (stream != legacy && stream_pending(stream, seq) != 0)
            return 0;
    return 1;
}

/* DLPack's (code, bits) of dtype (a numpy dtype: its entry of PROCESS.dlpack_codes, the
 * Python module's table, then cached here by identity): 1, or 0 where the Python export
 * knows better (no entry, bfloat16, FP8, others). -1: an error. */
static int
dtype_code(dlpack_codes *codes, PyObject *process, PyObject *dtype, long long *code,
           long long *bits)
{
    for (int i = 0; i < codes->n; i++)
        if (codes->dtype[i] == dtype) {
            *code = codes->code[i];
            *bits = codes->bits[i];
            return 1;
        }
    PyObject *table = PROCESS(process)->dlpack_codes;
    if (table == NULL || !PyDict_CheckExact(table))
        return 0;
    PyObject *entry = PyDict_GetItemWithError(table, dtype); /* (borrowed) */
    if (entry == NULL)
        return PyErr_Occurred() ? -1 : 0;
    long long c, b;
    if (!PyTuple_CheckExact(entry) || PyTuple_GET_SIZE(entry) != 2 ||
        !exact_int(PyTuple_GET_ITEM(entry, 0), &c) || !exact_int(PyTuple_GET_ITEM(entry, 1), &b))
        return 0;
    /* DLDataTypeCode: kDLInt 0, kDLUInt 1, kDLFloat 2, kDLComplex 5, kDLBool 6 */
    if (!(c == 0 || c == 1 || c == 2 || c == 5 || c == 6) || b < 8 || b > 128 || b % 8 != 0 ||
        (c == 2 && b < 16))
        return 0;
    *code = c;
    *bits = b;
    if (codes->n < DLPACK_CODES) {
        codes->dtype[codes->n] = Py_NewRef(dtype);
        codes->code[codes->n] = (unsigned char)c;
        codes->bits[codes->n] = (unsigned char)b;
        codes->n++;
    }
    return 1;
}

/* an exact int's value into *v: 1, or 0 (not an exact int, or out of range) */
static int
exact_int(PyObject *o, long long *v)
{
    if (!PyLong_CheckExact(o))
        return 0;
    *v = PyLong_AsLongLong(o);
    if (*v == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    return 1;
}

PyObject *
tensor_dlpack(PyObject *self, PyTypeObject *defining_class, PyObject *const *args,
              Py_ssize_t nargs, PyObject *kwnames)
{
    if (nargs != 0) {
        PyErr_Format(PyExc_TypeError, "__dlpack__() takes keyword arguments only (%zd given "
                     "by position)", nargs);
        return NULL;
    }
    /* stream, max_version, dl_device, copy */
    PyObject *given[4] = {Py_None, Py_None, Py_None, Py_None};
    static const char *names[4] = {"stream", "max_version", "dl_device", "copy"};
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    for (Py_ssize_t i = 0; i < nkw; i++) {
        PyObject *name = PyTuple_GET_ITEM(kwnames, i);
        int j = 0;
        while (j < 4 && PyUnicode_CompareWithASCIIString(name, names[j]) != 0)
            j++;
        if (j == 4) {
            PyErr_Format(PyExc_TypeError, "__dlpack__() got an unexpected keyword argument %R",
                         name);
            return NULL;
        }
        given[j] = args[i];
    }
    PyObject *stream = given[0], *max_version = given[1], *dl_device = given[2];
    long long handle = 1, major = 0, minor = 0, code, bits;
    int versioned = 0;
    if (stream != Py_None && !(exact_int(stream, &handle) && (handle == 1 || handle == -1)))
        goto python;
    if (max_version != Py_None) {
        if (!PyTuple_CheckExact(max_version) || PyTuple_GET_SIZE(max_version) != 2 ||
            !exact_int(PyTuple_GET_ITEM(max_version, 0), &major) ||
            !exact_int(PyTuple_GET_ITEM(max_version, 1), &minor) || major < 1)
            goto python;
        versioned = 1;
    }
    if (given[3] != Py_None && given[3] != Py_False)
        goto python;
    TensorCore *t = TENSOR(self);
    if (t->alloc == NULL || !is_allocation(t->alloc))
        goto python;
    AllocationCore *alloc = ALLOCATION(t->alloc);
    if (alloc->device == NULL || !is_device(alloc->device))
        goto python;
    DeviceCore *device = DEVICE(alloc->device);
    long long ordinal, kind, id, ptr, offset;
    if (device->ordinal == NULL || !exact_int(device->ordinal, &ordinal))
        goto python;
    if (dl_device != Py_None &&
        !(PyTuple_CheckExact(dl_device) && PyTuple_GET_SIZE(dl_device) == 2 &&
          exact_int(PyTuple_GET_ITEM(dl_device, 0), &kind) && kind == 2 &&
          exact_int(PyTuple_GET_ITEM(dl_device, 1), &id) && id == ordinal))
        goto python;
    PyObject *legacy = device->legacy;
    if (handle == 1 &&
        (legacy == NULL || !is_stream(legacy) || !only_legacy_uses(alloc, legacy)))
        goto python;
    dlpack_codes *codes = module_dlpack_codes(defining_class);
    PyObject *process = module_process(defining_class);
    int known = codes == NULL || process == NULL ? -1
                : t->dtype == NULL ? 0 : dtype_code(codes, process, t->dtype, &code, &bits);
    if (known < 0)
        return NULL;
    if (!known || alloc->ptr == NULL || t->offset == NULL || !exact_int(alloc->ptr, &ptr) ||
        !exact_int(t->offset, &offset) || t->shape == NULL || t->strides == NULL)
        goto python;
    PyObject *lock = NULL;
    if (handle == 1 && (lock = module_exec_lock(defining_class)) == NULL)
        return NULL;
    owner_pair owner = {NULL, Py_NewRef(t->alloc), Py_XNewRef(lock),
                        handle == 1 ? Py_NewRef(legacy) : NULL};
    return pack_capsule(&owner, (unsigned long long)(ptr + offset * (bits / 8)),
                        ordinal, t->shape, t->strides, code, bits,
                        versioned && alloc->readonly ? 1 : 0, versioned);
python:;
    PyObject *call[5] = {self, stream, max_version, dl_device, given[3]};
    return call_python(module_process(defining_class), field_export, "dlpack_export", call, 5);
}

PyObject *
tensor_dlpack_device(PyObject *self, PyObject *Py_UNUSED(arg))
{
    TensorCore *t = TENSOR(self);
    if (t->alloc != NULL && is_allocation(t->alloc)) {
        PyObject *device = ALLOCATION(t->alloc)->device;
        if (device != NULL && is_device(device) && DEVICE(device)->ordinal != NULL)
            return Py_BuildValue("(iO)", 2, DEVICE(device)->ordinal); /* kDLCUDA */
    }
    return call_python(process_of(self), field_device, "dlpack_device", &self, 1);
}


PyMethodDef dlpack_methods[] = {
    {"dlpack_pack", (PyCFunction)(void (*)(void))dlpack_pack, METH_FASTCALL,
     "dlpack_pack($module, release, arg, data, device_id, shape, strides, code, bits, "
     "flags, versioned, /)\n--\n\n"
     "A DLPack capsule of CUDA memory at data; release(arg) is called once when the "
     "consumer (or the unconsumed capsule) releases it."},
    {"dlpack_unpack", (PyCFunction)dlpack_unpack, METH_O,
     "dlpack_unpack($module, capsule, /)\n--\n\n"
     "The fields of a DLPack capsule as a tuple (its last the bytes its layout spans, or "
     "-1), or None if it is not an unconsumed one."},
    {"dlpack_take", (PyCFunction)(void (*)(void))dlpack_take, METH_FASTCALL,
     "dlpack_take($module, capsule, versioned, /)\n--\n\n"
     "Rename the capsule used_dltensor[_versioned]: its tensor is the consumer's now."},
    {"dlpack_delete", (PyCFunction)(void (*)(void))dlpack_delete, METH_FASTCALL,
     "dlpack_delete($module, address, versioned, /)\n--\n\n"
     "Call the deleter of the consumed managed tensor at address."},
    {NULL, NULL, 0, NULL},
};
