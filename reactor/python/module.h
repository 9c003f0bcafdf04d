/*
 * What the CPython side of cuasync._reactor shares (reactor/python/: the types, the
 * module, the driver fast paths): the argument converters and driver helpers of
 * driver.c, the DLPack capsules of dlpack.c, the op core's type specs. Included after
 * Python.h; it includes the reactor proper's header (reactor/core/reactor.h), which
 * never sees Python.h.
 */
#ifndef CUASYNC_MODULE_H
#define CUASYNC_MODULE_H

#include "../core/reactor.h"

/* The hash of the sources the module was built from (setup.py defines it; the module's
 * SOURCE_HASH): cuasync/_native.py refuses a build of other sources. */
/* Whether the interpreter is shutting down (a finalizer then neither calls into Python
 * nor blocks): the public name from 3.13, the private one before. */
#if PY_VERSION_HEX >= 0x030D0000
#define IS_FINALIZING() Py_IsFinalizing()
#else
#define IS_FINALIZING() _Py_IsFinalizing()
#endif

/* Keep the exception being raised across calls that may raise or clear one (a finalizer,
 * a clean-up after an error): SAVE_ERROR(saved) ... RESTORE_ERROR(saved), or DROP_ERROR(saved)
 * where a later error replaces it. */
#if PY_VERSION_HEX >= 0x030C0000
#define SAVE_ERROR(saved) PyObject *saved = PyErr_GetRaisedException()
#define RESTORE_ERROR(saved) PyErr_SetRaisedException(saved)
#define DROP_ERROR(saved) Py_XDECREF(saved)
#else
#define SAVE_ERROR(saved)                                                                   \
    PyObject *saved##_type, *saved##_value, *saved##_tb;                                    \
    PyErr_Fetch(&saved##_type, &saved##_value, &saved##_tb)
#define RESTORE_ERROR(saved) PyErr_Restore(saved##_type, saved##_value, saved##_tb)
#define DROP_ERROR(saved)                                                                   \
    do {                                                                                    \
        Py_XDECREF(saved##_type);                                                           \
        Py_XDECREF(saved##_value);                                                          \
        Py_XDECREF(saved##_tb);                                                             \
    } while (0)
#endif

/* The exception being raised, taken (cleared) as one object, its traceback attached: a
 * new reference. */
static inline PyObject *
take_error(void)
{
    SAVE_ERROR(saved);
#if PY_VERSION_HEX >= 0x030C0000
    return saved;
#else
    PyErr_NormalizeException(&saved_type, &saved_value, &saved_tb);
    if (saved_tb != NULL && saved_value != NULL)
        PyException_SetTraceback(saved_value, saved_tb);
    Py_XDECREF(saved_type);
    Py_XDECREF(saved_tb);
    return saved_value;
#endif
}

/* take_error() where what is raised is an Exception (an op's failure); NULL, the error
 * left set, where it is not (KeyboardInterrupt, SystemExit: they propagate). */
static inline PyObject *
take_exception(void)
{
    return PyErr_ExceptionMatches(PyExc_Exception) ? take_error() : NULL;
}

#ifndef CUASYNC_SOURCE_HASH
#define CUASYNC_SOURCE_HASH "unknown"
#endif

/* The destructor of cuasync's DLPack capsules (dlpack.c): calls the managed tensor's
 * deleter unless the capsule was consumed; keeps an exception already set. */
void dlpack_capsule_destructor(PyObject *capsule);
/* dlpack_pack, dlpack_unpack, dlpack_take, dlpack_delete (dlpack.c) */
extern PyMethodDef dlpack_methods[];

int get_u64(PyObject *o, unsigned long long *out);
int get_i64(PyObject *o, long long *out);
int get_u32(PyObject *o, const char *what, uint32_t *out);
int conv_u64(PyObject *o, void *out); /* the same as an "O&" converter */
int check_nargs(const char *name, Py_ssize_t nargs, Py_ssize_t expected);
/* The flag word at address v, which must be a 4-byte aligned word of a live Reactor's
 * slab (anything else is refused: these helpers never write into arbitrary memory): 0, or
 * -1 with a ValueError naming the valid ranges. */
int slab_word(unsigned long long v, _Atomic uint32_t **out);
/* Spin on a flag word until gen is reached or budget_ns passed: 1 if reached. The GIL
 * (held on entry) is kept for the first hold_ns and released for the rest. */
int spin_flag(_Atomic uint32_t *word, uint32_t gen, uint64_t budget_ns, uint64_t hold_ns);

/* The launch configuration of launch_and_write, launch_packed and Submitter.push: their
 * first nine arguments (function, grid, block, shared memory, stream). */
typedef struct {
    unsigned long long function, stream;
    unsigned int gx, gy, gz, bx, by, bz, shmem;
} launch_config;
int get_launch_config(PyObject *const *args, launch_config *c);

/* The submitter that every native launch and flag write waits for (set_launch_fence;
 * read with the GIL held), or NULL. */
subcore *launch_fence(void);

/* The entry points last given to set_entry_points (0 where unset). */
sub_entry driver_entry_points(void);

/* launch_packed's parameters: check a layout against its args, then pack them into
 * block (PARAM_BLOCK_MAX bytes, 16-aligned), slots[i] pointing at parameter i. */
enum { PARAM_BLOCK_MAX = 4096, PARAM_COUNT_MAX = 256 };
int check_layout(PyObject *layout, PyObject *args, const char **recs, Py_ssize_t *n);
int pack_params(const char *layout, Py_ssize_t n, PyObject *args, unsigned char *block,
                void **slots);
/* One argument of a checked layout packed (as pack_params packs it); the slot of a
 * pointer parameter, or NULL. */
int pack_one(const char *layout, Py_ssize_t i, PyObject *a, unsigned char *block, void **slot);
unsigned char *pointer_slot(const char *layout, Py_ssize_t i, unsigned char *block);
/* The entry points a launch needs (the write's only with a flag address); RuntimeError
 * when one is not set. */
int get_launch_entry_points(unsigned long long address, uintptr_t *lk, uintptr_t *wv);
/* cuLaunchKernel and its flag write with the GIL released: 0, the launch's CUresult, or
 * minus the write's. */
long launch_write(uintptr_t lk, uintptr_t wv, const launch_config *c, void **params,
                  unsigned long long address, uint32_t value);
/* cuMemcpyHtoDAsync_v2 from pinned src and its flag write, with the GIL released (after
 * the launch fence): 0, the copy's CUresult (nothing enqueued), or minus the write's.
 * The entry points: 1 when both are set (get_copy_entry_points). */
long copy_write(uintptr_t mh, uintptr_t wv, unsigned long long dst, unsigned long long src,
                unsigned long long nbytes, unsigned long long stream, unsigned long long address,
                uint32_t value);
int get_copy_entry_points(uintptr_t *mh, uintptr_t *wv);
/* Whether f is this module's launch_packed (the cuda backend's fast_launch). */
int is_launch_packed(PyObject *f);
/* -- the native op core's helpers (express.c) ------------------------------------ */

/* cuasync.get_default_device()'s common case: the Device of the ordinal the ContextVar
 * var holds, among those made (devices: Device._instances). A new reference; NULL with
 * no error set when it is not made yet (get_default_device makes it), NULL with the
 * error set on a failure. */
static inline PyObject *
made_default_device(PyObject *var, PyObject *devices)
{
    PyObject *ordinal = NULL;
    if (PyContextVar_Get(var, NULL, &ordinal) < 0)
        return NULL;
    PyObject *device = ordinal == NULL ? NULL : PyDict_GetItemWithError(devices, ordinal);
    Py_XDECREF(ordinal);
    return Py_XNewRef(device);
}

/* tp_descr_get of a method-descriptor type: bound to obj, or itself from the class. */
PyObject *bind_to(PyObject *self, PyObject *obj, PyObject *type);
/* __set_name__'s arguments (owner, name) checked, and "Owner.name": a native method
 * descriptor's __qualname__ (a new reference, or NULL with an error set) */
PyObject *method_qualname(PyObject *const *args, Py_ssize_t nargs);

/* The express core's type (express.c) and the launchers' (launcher.c). */
extern PyType_Spec Express_spec;
/* from_host(array)'s op built in C for its common case (upload.c), or None: the module's
 * build_upload, with the module's PROCESS (borrowed). */
PyObject *upload_build(PyObject *process, PyObject *array);
extern PyType_Spec LaunchAwait_spec;
extern PyType_Spec ExecLock_spec;
extern PyType_Spec CurrentOrdinal_spec;
extern PyType_Spec Launcher_spec;
extern PyType_Spec LtMatmul_spec; /* blas.c */
/* The end of the last parameter of a checked layout, in bytes. */
uint32_t layout_extent(const char *layout, Py_ssize_t n);

extern PyMethodDef cuasync_driver_methods[];

#endif
