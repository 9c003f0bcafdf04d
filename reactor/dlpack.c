/*
 * The destructor of the DLPack capsules cuasync exports (cuasync/_interop/dlpack.py),
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
