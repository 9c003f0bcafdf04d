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

#include "reactor.h"

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

#if PY_VERSION_HEX >= 0x030C0000
#define SAVE_ERROR(saved) PyObject *saved = PyErr_GetRaisedException()
#define RESTORE_ERROR(saved) PyErr_SetRaisedException(saved)
#else
#define SAVE_ERROR(saved)                                                                   \
    PyObject *saved##_type, *saved##_value, *saved##_tb;                                    \
    PyErr_Fetch(&saved##_type, &saved##_value, &saved##_tb)
#define RESTORE_ERROR(saved) PyErr_Restore(saved##_type, saved##_value, saved##_tb)
#endif

#if PY_VERSION_HEX >= 0x030D0000
#define IS_FINALIZING() Py_IsFinalizing()
#else
#define IS_FINALIZING() _Py_IsFinalizing()
#endif

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
 * dlpack_pack builds a managed tensor in one malloc'ed block (the struct, then shape and
 * strides) whose manager_ctx is a Python callable: the deleter calls it once, with the
 * GIL, then drops it and frees the block. dlpack_unpack reads a producer's capsule into
 * a tuple, dlpack_take renames it "used_..." (the consumer owns it then), and
 * dlpack_delete calls a consumed tensor's deleter. The Python module words every error;
 * these only refuse arguments of the wrong type. */

/* More dimensions than this in a producer's capsule: a broken capsule (no library makes
 * them), not read (its shape array may be garbage). */
#define DLPACK_MAX_NDIM 64

/* ``ctx`` (the callable dlpack_pack kept) called once and dropped, from any thread. At
 * exit nothing is called: the memory goes away with the process. */
static void
release_ctx(void *ctx)
{
    if (ctx == NULL || IS_FINALIZING())
        return;
    PyGILState_STATE gil = PyGILState_Ensure();
    SAVE_ERROR(pending);
    PyObject *owner = (PyObject *)ctx;
    PyObject *r = PyObject_CallNoArgs(owner);
    if (r == NULL)
        PyErr_WriteUnraisable(owner);
    else
        Py_DECREF(r);
    Py_DECREF(owner);
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

/* dlpack_pack(owner, data, device_id, shape, strides, code, bits, flags, versioned) */
static PyObject *
dlpack_pack(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (check_nargs("dlpack_pack", nargs, 9) < 0)
        return NULL;
    PyObject *owner = args[0], *shape = args[3], *strides = args[4];
    unsigned long long data, flags;
    long long device_id, code, bits;
    if (!PyCallable_Check(owner)) {
        PyErr_SetString(PyExc_TypeError, "dlpack_pack: owner must be callable");
        return NULL;
    }
    if (get_u64(args[1], &data) < 0 || get_i64(args[2], &device_id) < 0 ||
        get_i64(args[5], &code) < 0 || get_i64(args[6], &bits) < 0 ||
        get_u64(args[7], &flags) < 0)
        return NULL;
    int versioned = PyObject_IsTrue(args[8]);
    if (versioned < 0)
        return NULL;
    if (!PyTuple_CheckExact(shape) || PyTuple_GET_SIZE(shape) > DLPACK_MAX_NDIM) {
        PyErr_Format(PyExc_TypeError, "dlpack_pack: shape must be a tuple of at most %d ints",
                     DLPACK_MAX_NDIM);
        return NULL;
    }
    Py_ssize_t ndim = PyTuple_GET_SIZE(shape);
    size_t head = versioned ? sizeof(versioned_managed) : sizeof(legacy_managed);
    char *block = malloc(head + 2 * (size_t)(ndim ? ndim : 1) * sizeof(int64_t));
    if (block == NULL)
        return PyErr_NoMemory();
    int64_t *dims = (int64_t *)(block + head), *steps = dims + ndim;
    if (fill_i64(shape, dims, ndim, "shape") < 0 || fill_i64(strides, steps, ndim, "strides") < 0) {
        free(block);
        return NULL;
    }
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
    PyObject *capsule = PyCapsule_New(block, versioned ? "dltensor_versioned" : "dltensor",
                                      dlpack_capsule_destructor);
    if (capsule == NULL) {
        free(block);
        return NULL;
    }
    Py_INCREF(owner);
    if (versioned)
        ((versioned_managed *)block)->manager_ctx = owner;
    else
        ((legacy_managed *)block)->manager_ctx = owner;
    return capsule;
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

/* dlpack_unpack(capsule): None unless it is a "dltensor" or "dltensor_versioned" capsule;
 * else (address, versioned, major, minor, flags, data + byte_offset, device_type,
 * device_id, ndim, shape, strides, code, bits, lanes, has_deleter), shape None when the
 * capsule has none to read (ndim out of 0..64, or a NULL array) and strides None when
 * NULL (compact row-major). */
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
    if (versioned && major != 1) /* another layout: read nothing past the version */
        return Py_BuildValue("(KiIIKKiiiOOiiii)", (unsigned long long)(uintptr_t)p, 1, major,
                             minor, 0ULL, 0ULL, 0, 0, 0, Py_None, Py_None, 0, 0, 0, 0);
    int32_t ndim = t->ndim;
    int readable = ndim >= 0 && ndim <= DLPACK_MAX_NDIM && (ndim == 0 || t->shape != NULL);
    PyObject *shape = readable ? int64_tuple(t->shape, ndim) : Py_NewRef(Py_None);
    PyObject *strides = readable && t->strides != NULL ? int64_tuple(t->strides, ndim)
                                                       : Py_NewRef(Py_None);
    if (shape == NULL || strides == NULL) {
        Py_XDECREF(shape);
        Py_XDECREF(strides);
        return NULL;
    }
    return Py_BuildValue("(KiIIKKiiiNNiiii)", (unsigned long long)(uintptr_t)p, versioned, major,
                         minor, flags,
                         (unsigned long long)((uintptr_t)t->data + t->byte_offset),
                         (int)t->device_type, (int)t->device_id, (int)ndim, shape, strides,
                         (int)t->code, (int)t->bits, (int)t->lanes, has_deleter);
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

PyMethodDef dlpack_methods[] = {
    {"dlpack_pack", (PyCFunction)(void (*)(void))dlpack_pack, METH_FASTCALL,
     "dlpack_pack($module, owner, data, device_id, shape, strides, code, bits, flags, "
     "versioned, /)\n--\n\n"
     "A DLPack capsule of CUDA memory at data; owner (a callable) is called once when the "
     "consumer (or the unconsumed capsule) releases it."},
    {"dlpack_unpack", (PyCFunction)dlpack_unpack, METH_O,
     "dlpack_unpack($module, capsule, /)\n--\n\n"
     "The fields of a DLPack capsule as a tuple, or None if it is not an unconsumed one."},
    {"dlpack_take", (PyCFunction)(void (*)(void))dlpack_take, METH_FASTCALL,
     "dlpack_take($module, capsule, versioned, /)\n--\n\n"
     "Rename the capsule used_dltensor[_versioned]: its tensor is the consumer's now."},
    {"dlpack_delete", (PyCFunction)(void (*)(void))dlpack_delete, METH_FASTCALL,
     "dlpack_delete($module, address, versioned, /)\n--\n\n"
     "Call the deleter of the consumed managed tensor at address."},
    {NULL, NULL, 0, NULL},
};
