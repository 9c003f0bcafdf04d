/*
 * Driver fast paths and flag-word helpers of cuasync._reactor: argument converters
 * shared by the module, the registry of live slabs, load32/store32/spin_wait, and
 * calls into cuStreamWriteValue32 and cuLaunchKernel through entry points Python gets
 * from cuGetProcAddress (no CUDA headers; libcuda is never linked).
 *
 * spin_wait, load32, write_value32 and launch_and_write run on every await, and
 * store32 on every emulated flag write: they stay METH_FASTCALL with the small
 * converters below.  PyArg_ParseTuple would need an argument tuple (METH_VARARGS)
 * and interpret a format string on each call, which is measurable at this rate.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "module.h"

#include <limits.h>
#include <math.h>
#include <string.h>
#include <stdio.h>
#include <stdlib.h>

/* -- argument converters ------------------------------------------------------------ */

/* int -> unsigned long long; accepts __index__ objects (numpy ints). */
int
get_u64(PyObject *o, unsigned long long *out)
{
    unsigned long long v;
    if (PyLong_CheckExact(o)) { /* (a pointer below 2**63: no byte array made) */
        int overflow = 0;
        long long small = PyLong_AsLongLongAndOverflow(o, &overflow);
        if (!overflow && small >= 0) {
            *out = (unsigned long long)small;
            return 0;
        }
        if (small == -1 && PyErr_Occurred())
            return -1;
        v = PyLong_AsUnsignedLongLong(o); /* (2**63 and over; a negative raises) */
    }
    else if (PyLong_Check(o)) {
        v = PyLong_AsUnsignedLongLong(o);
    }
    else {
        PyObject *i = PyNumber_Index(o);
        if (i == NULL)
            return -1;
        v = PyLong_AsUnsignedLongLong(i);
        Py_DECREF(i);
    }
    if (v == (unsigned long long)-1 && PyErr_Occurred())
        return -1;
    *out = v;
    return 0;
}

int
get_i64(PyObject *o, long long *out)
{
    long long v;
    if (PyLong_Check(o)) {
        v = PyLong_AsLongLong(o);
    }
    else {
        PyObject *i = PyNumber_Index(o);
        if (i == NULL)
            return -1;
        v = PyLong_AsLongLong(i);
        Py_DECREF(i);
    }
    if (v == -1 && PyErr_Occurred())
        return -1;
    *out = v;
    return 0;
}

/* A 32-bit value (generation); out of range -> ValueError. */
int
get_u32(PyObject *o, const char *what, uint32_t *out)
{
    long long v;
    if (get_i64(o, &v) < 0) {
        if (PyErr_ExceptionMatches(PyExc_OverflowError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_ValueError, "%s must be in [0, 2**32), got a larger int", what);
        }
        return -1;
    }
    if (v < 0 || v > 0xFFFFFFFFll) {
        PyErr_Format(PyExc_ValueError, "%s must be in [0, 2**32), got %lld", what, v);
        return -1;
    }
    *out = (uint32_t)v;
    return 0;
}

/* A 32-bit unsigned launch parameter; out of range -> OverflowError. */
static int
get_uint(PyObject *o, const char *what, unsigned int *out)
{
    unsigned long long v;
    if (get_u64(o, &v) < 0)
        return -1;
    if (v > UINT_MAX) {
        PyErr_Format(PyExc_OverflowError, "%s does not fit in an unsigned int", what);
        return -1;
    }
    *out = (unsigned int)v;
    return 0;
}

int
conv_u64(PyObject *o, void *out)
{
    return get_u64(o, (unsigned long long *)out) < 0 ? 0 : 1;
}

/* TypeError unless nargs == expected */
int
check_nargs(const char *name, Py_ssize_t nargs, Py_ssize_t expected)
{
    if (nargs == expected)
        return 0;
    PyErr_Format(PyExc_TypeError, "%s() takes exactly %zd arguments (%zd given)", name,
                 expected, nargs);
    return -1;
}

/* -- live slabs: the only memory the word helpers may touch ------------------------- */

typedef struct {
    const void *owner; /* the Reactor that registered it */
    uintptr_t lo, hi;  /* [lo, hi) */
} slab_range;

static pthread_mutex_t g_slabs_mu = PTHREAD_MUTEX_INITIALIZER;
static slab_range *g_slabs;
static size_t g_nslabs, g_slabs_cap;

int
slab_register(const void *owner, uintptr_t lo, uintptr_t hi)
{
    int rc = 0;
    pthread_mutex_lock(&g_slabs_mu);
    if (g_nslabs == g_slabs_cap) {
        size_t cap = g_slabs_cap ? 2 * g_slabs_cap : 4;
        slab_range *p = realloc(g_slabs, cap * sizeof(*p));
        if (p == NULL)
            rc = -1;
        else {
            g_slabs = p;
            g_slabs_cap = cap;
        }
    }
    if (rc == 0)
        g_slabs[g_nslabs++] = (slab_range){owner, lo, hi};
    pthread_mutex_unlock(&g_slabs_mu);
    return rc;
}

void
slab_unregister(const void *owner)
{
    pthread_mutex_lock(&g_slabs_mu);
    for (size_t i = 0; i < g_nslabs; i++) {
        if (g_slabs[i].owner == owner) {
            g_slabs[i] = g_slabs[--g_nslabs];
            break;
        }
    }
    if (g_nslabs == 0) {
        free(g_slabs);
        g_slabs = NULL;
        g_slabs_cap = 0;
    }
    pthread_mutex_unlock(&g_slabs_mu);
}

/* 1 if [a, a + 4) is an aligned word of a live slab; else 0 and, in ranges, the
 * valid ranges for the error message. */
static int
slab_word_ok(uintptr_t a, char *ranges, size_t size)
{
    int ok = 0;
    pthread_mutex_lock(&g_slabs_mu);
    for (size_t i = 0; i < g_nslabs && !ok; i++)
        ok = (a & 3u) == 0 && a >= g_slabs[i].lo && a < g_slabs[i].hi;
    if (!ok) {
        size_t used = (size_t)snprintf(ranges, size, g_nslabs ? "" : "none (no Reactor is open)");
        for (size_t i = 0; i < g_nslabs && used < size; i++)
            used += (size_t)snprintf(ranges + used, size - used, "%s[0x%llx, 0x%llx)",
                                     i ? ", " : "", (unsigned long long)g_slabs[i].lo,
                                     (unsigned long long)g_slabs[i].hi);
    }
    pthread_mutex_unlock(&g_slabs_mu);
    return ok;
}

/* The address of a uint32 flag word: an aligned word of a live Reactor's slab.
 * Anything else is refused, so that these helpers cannot write into arbitrary
 * memory (the interpreter's, say) by mistake. */
int
slab_word(unsigned long long v, _Atomic uint32_t **out)
{
    char ranges[256];
    if (v > (unsigned long long)UINTPTR_MAX || !slab_word_ok((uintptr_t)v, ranges, sizeof ranges)) {
        char msg[400]; /* PyErr_Format has no %llx before 3.12 */
        snprintf(msg, sizeof msg,
                 "address 0x%llx is not a 4-byte aligned word of a live Reactor's slab; "
                 "valid ranges: %s",
                 v, ranges);
        PyErr_SetString(PyExc_ValueError, msg);
        return -1;
    }
    *out = (_Atomic uint32_t *)(uintptr_t)v;
    return 0;
}

static int
get_word_address(PyObject *o, _Atomic uint32_t **out)
{
    unsigned long long v;
    return get_u64(o, &v) < 0 ? -1 : slab_word(v, out);
}

/* -- word helpers ------------------------------------------------------------------ */

/* Poll the word until gen is reached or the clock passes start + limit: 1 if reached. */
static int
poll_flag(_Atomic uint32_t *word, uint32_t gen, uint64_t start, uint64_t limit)
{
    for (;;) {
        for (int k = 0; k < 16; k++) {
            cpu_relax();
            if (gen_reached(load_acquire(word), gen))
                return 1;
        }
        if (now_ns() - start >= limit)
            return gen_reached(load_acquire(word), gen);
    }
}

int
spin_flag(_Atomic uint32_t *word, uint32_t gen, uint64_t budget_ns, uint64_t hold_ns)
{
    if (gen_reached(load_acquire(word), gen))
        return 1;
    if (budget_ns == 0)
        return 0;
    uint64_t start = now_ns();
    if (hold_ns > budget_ns)
        hold_ns = budget_ns;
    if (hold_ns && poll_flag(word, gen, start, hold_ns))
        return 1;
    if (hold_ns == budget_ns)
        return 0;
    int landed;
    Py_BEGIN_ALLOW_THREADS
    landed = poll_flag(word, gen, start, budget_ns);
    Py_END_ALLOW_THREADS
    return landed;
}

static PyObject *
mod_spin_wait(PyObject *Py_UNUSED(m), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 && nargs != 4) {
        PyErr_Format(PyExc_TypeError, "spin_wait() takes 3 or 4 arguments (%zd given)", nargs);
        return NULL;
    }
    _Atomic uint32_t *p;
    uint32_t expected;
    long long budget, hold = 0;
    if (get_word_address(args[0], &p) < 0 || get_u32(args[1], "expected", &expected) < 0 ||
        get_i64(args[2], &budget) < 0 || (nargs == 4 && get_i64(args[3], &hold) < 0))
        return NULL;
    if (budget < 0 || hold < 0) {
        PyErr_Format(PyExc_ValueError, "spin_wait: %s must be >= 0, got %lld",
                     budget < 0 ? "budget_ns" : "hold_ns", budget < 0 ? budget : hold);
        return NULL;
    }
    return PyBool_FromLong(spin_flag(p, expected, (uint64_t)budget, (uint64_t)hold));
}

static PyObject *
mod_load32(PyObject *Py_UNUSED(m), PyObject *arg)
{
    _Atomic uint32_t *p;
    if (get_word_address(arg, &p) < 0)
        return NULL;
    return PyLong_FromUnsignedLong(load_acquire(p));
}

static PyObject *
mod_store32(PyObject *Py_UNUSED(m), PyObject *const *args, Py_ssize_t nargs)
{
    if (check_nargs("store32", nargs, 2) < 0)
        return NULL;
    _Atomic uint32_t *p;
    uint32_t value;
    if (get_word_address(args[0], &p) < 0 || get_u32(args[1], "value", &value) < 0)
        return NULL;
    atomic_store_explicit(p, value, memory_order_release);
    Py_RETURN_NONE;
}

/* -- driver entry points ---------------------------------------------------------- */

/* (the ABIs of cuStreamWriteValue32_v2, cuLaunchKernel, cuCtxSetCurrent and
 * cuStreamSynchronize are in reactor.h) */
static _Atomic uintptr_t g_write_value32 = 0;
static _Atomic uintptr_t g_launch_kernel = 0;
static _Atomic uintptr_t g_ctx_set_current = 0;
static _Atomic uintptr_t g_stream_synchronize = 0;
static _Atomic uintptr_t g_memcpy_htod = 0;

static PyObject *
mod_set_entry_points(PyObject *Py_UNUSED(m), PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"write_value32", "launch_kernel", "ctx_set_current",
                             "stream_synchronize", "memcpy_htod", NULL};
    unsigned long long wv = 0, lk = 0, cs = 0, ss = 0, mh = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|$O&O&O&O&O&:set_entry_points", kwlist,
                                     conv_u64, &wv, conv_u64, &lk, conv_u64, &cs, conv_u64,
                                     &ss, conv_u64, &mh))
        return NULL;
    atomic_store_explicit(&g_memcpy_htod, (uintptr_t)mh, memory_order_release);
    atomic_store_explicit(&g_write_value32, (uintptr_t)wv, memory_order_release);
    atomic_store_explicit(&g_launch_kernel, (uintptr_t)lk, memory_order_release);
    atomic_store_explicit(&g_ctx_set_current, (uintptr_t)cs, memory_order_release);
    atomic_store_explicit(&g_stream_synchronize, (uintptr_t)ss, memory_order_release);
    Py_RETURN_NONE;
}

sub_entry
driver_entry_points(void)
{
    sub_entry e = {
        atomic_load_explicit(&g_launch_kernel, memory_order_acquire),
        atomic_load_explicit(&g_write_value32, memory_order_acquire),
        atomic_load_explicit(&g_ctx_set_current, memory_order_acquire),
        atomic_load_explicit(&g_stream_synchronize, memory_order_acquire),
    };
    return e;
}

/* The launch fence with launches still queued (a reference taken, with the GIL held),
 * else NULL: the native driver calls wait for them (wait_for_fence, GIL released), so
 * that they follow every launch pushed before them. */
static subcore *
fence_of_launches(void)
{
    subcore *c = launch_fence();
    if (c == NULL || subcore_pending(c) == 0)
        return NULL;
    subcore_retain(c);
    return c;
}

static void
wait_for_fence(subcore *c)
{
    if (c != NULL)
        subcore_fence(c);
}

static void
release_fence(subcore *c)
{
    if (c != NULL)
        subcore_drop(c);
}

static PyObject *
mod_write_value32(PyObject *Py_UNUSED(m), PyObject *const *args, Py_ssize_t nargs)
{
    if (check_nargs("write_value32", nargs, 3) < 0)
        return NULL;
    uintptr_t fp = atomic_load_explicit(&g_write_value32, memory_order_acquire);
    if (fp == 0) {
        PyErr_SetString(PyExc_RuntimeError,
                        "cuStreamWriteValue32 entry point not set (call set_entry_points)");
        return NULL;
    }
    unsigned long long stream, address;
    uint32_t value;
    if (get_u64(args[0], &stream) < 0 || get_u64(args[1], &address) < 0 ||
        get_u32(args[2], "value", &value) < 0)
        return NULL;
    CUresult rc;
    subcore *fence = fence_of_launches();
    Py_BEGIN_ALLOW_THREADS
    wait_for_fence(fence);
    rc = ((pfn_write_value32)fp)((void *)(uintptr_t)stream, (CUdeviceptr)address, value, 0u);
    Py_END_ALLOW_THREADS
    release_fence(fence);
    return PyLong_FromLong(rc);
}

/* copy_and_write(dst, src, nbytes, stream, address, value): cuMemcpyHtoDAsync, then (the
 * copy enqueued) cuStreamWriteValue32, the GIL released around both (after the launch
 * fence): 0, the copy's CUresult (nothing enqueued), or minus the write's (the copy is
 * enqueued). src must stay valid until the copy has run (pinned memory). */
static PyObject *
mod_copy_and_write(PyObject *Py_UNUSED(m), PyObject *const *args, Py_ssize_t nargs)
{
    if (check_nargs("copy_and_write", nargs, 6) < 0)
        return NULL;
    uintptr_t mh = atomic_load_explicit(&g_memcpy_htod, memory_order_acquire);
    uintptr_t wv = atomic_load_explicit(&g_write_value32, memory_order_acquire);
    if (mh == 0 || wv == 0) {
        PyErr_SetString(PyExc_RuntimeError,
                        mh == 0 ? "cuMemcpyHtoDAsync entry point not set (call set_entry_points)"
                                : "cuStreamWriteValue32 entry point not set "
                                  "(call set_entry_points)");
        return NULL;
    }
    unsigned long long dst, src, nbytes, stream, address;
    uint32_t value;
    if (get_u64(args[0], &dst) < 0 || get_u64(args[1], &src) < 0 ||
        get_u64(args[2], &nbytes) < 0 || get_u64(args[3], &stream) < 0 ||
        get_u64(args[4], &address) < 0 || get_u32(args[5], "value", &value) < 0)
        return NULL;
    return PyLong_FromLong(copy_write(mh, wv, dst, src, nbytes, stream, address, value));
}

long
copy_write(uintptr_t mh, uintptr_t wv, unsigned long long dst, unsigned long long src,
           unsigned long long nbytes, unsigned long long stream, unsigned long long address,
           uint32_t value)
{
    CUresult rc;
    subcore *fence = fence_of_launches();
    Py_BEGIN_ALLOW_THREADS
    wait_for_fence(fence);
    rc = ((pfn_memcpy_htod)mh)((CUdeviceptr)dst, (const void *)(uintptr_t)src, (size_t)nbytes,
                               (void *)(uintptr_t)stream);
    if (rc == 0) {
        CUresult wrc = ((pfn_write_value32)wv)((void *)(uintptr_t)stream, (CUdeviceptr)address,
                                               value, 0u);
        rc = wrc == 0 ? 0 : -wrc;
    }
    Py_END_ALLOW_THREADS
    release_fence(fence);
    return (long)rc;
}

int
get_copy_entry_points(uintptr_t *mh, uintptr_t *wv)
{
    *mh = atomic_load_explicit(&g_memcpy_htod, memory_order_acquire);
    *wv = atomic_load_explicit(&g_write_value32, memory_order_acquire);
    return *mh != 0 && *wv != 0;
}

int
get_launch_config(PyObject *const *args, launch_config *c)
{
    if (get_u64(args[0], &c->function) < 0 || get_uint(args[1], "gx", &c->gx) < 0 ||
        get_uint(args[2], "gy", &c->gy) < 0 || get_uint(args[3], "gz", &c->gz) < 0 ||
        get_uint(args[4], "bx", &c->bx) < 0 || get_uint(args[5], "by", &c->by) < 0 ||
        get_uint(args[6], "bz", &c->bz) < 0 || get_uint(args[7], "shared_mem", &c->shmem) < 0 ||
        get_u64(args[8], &c->stream) < 0)
        return -1;
    return 0;
}

/* The entry points a launch needs (the write's only with a flag address); RuntimeError
 * when one is not set. */
int
get_launch_entry_points(unsigned long long address, uintptr_t *lk, uintptr_t *wv)
{
    *lk = atomic_load_explicit(&g_launch_kernel, memory_order_acquire);
    *wv = atomic_load_explicit(&g_write_value32, memory_order_acquire);
    if (*lk == 0 || (address != 0 && *wv == 0)) {
        PyErr_SetString(PyExc_RuntimeError,
                        *lk == 0 ? "cuLaunchKernel entry point not set (call set_entry_points)"
                                 : "cuStreamWriteValue32 entry point not set "
                                   "(call set_entry_points)");
        return -1;
    }
    return 0;
}

/* cuLaunchKernel, then (launched, address != 0) cuStreamWriteValue32, the GIL released
 * around both (after the launch fence): 0, the launch's CUresult, or minus the write's
 * (the launch is enqueued).  Called with the GIL held. */
long
launch_write(uintptr_t lk, uintptr_t wv, const launch_config *c, void **params,
             unsigned long long address, uint32_t value)
{
    CUresult rc;
    subcore *fence = fence_of_launches();
    Py_BEGIN_ALLOW_THREADS
    wait_for_fence(fence);
    rc = ((pfn_launch_kernel)lk)((void *)(uintptr_t)c->function, c->gx, c->gy, c->gz, c->bx,
                                 c->by, c->bz, c->shmem, (void *)(uintptr_t)c->stream, params,
                                 NULL);
    if (rc == 0 && address != 0) {
        CUresult wrc = ((pfn_write_value32)wv)((void *)(uintptr_t)c->stream,
                                               (CUdeviceptr)address, value, 0u);
        rc = wrc == 0 ? 0 : -wrc;
    }
    Py_END_ALLOW_THREADS
    release_fence(fence);
    return (long)rc;
}

static PyObject *
launch_then_write(uintptr_t lk, uintptr_t wv, const launch_config *c, void **params,
                  unsigned long long address, uint32_t value)
{
    return PyLong_FromLong(launch_write(lk, wv, c, params, address, value));
}

static PyObject *
mod_launch_and_write(PyObject *Py_UNUSED(m), PyObject *const *args, Py_ssize_t nargs)
{
    if (check_nargs("launch_and_write", nargs, 12) < 0)
        return NULL;
    launch_config c;
    unsigned long long params, address;
    uint32_t value;
    uintptr_t lk, wv;
    if (get_launch_config(args, &c) < 0 || get_u64(args[9], &params) < 0 ||
        get_u64(args[10], &address) < 0 || get_u32(args[11], "value", &value) < 0 ||
        get_launch_entry_points(address, &lk, &wv) < 0)
        return NULL;
    return launch_then_write(lk, wv, &c, (void **)(uintptr_t)params, address, value);
}

/* -- launch_packed: the parameter block packed in C -------------------------------- */

/* A layout is one record per parameter: its struct code and its offset in the block. */
typedef struct {
    char code; /* struct code: ? b B h H i I q Q f d, or P (a pointer: an int or .ptr) */
    unsigned char pad[3];
    uint32_t offset; /* 16-byte aligned, from the start of the block */
} layout_rec;

_Static_assert(sizeof(layout_rec) == 8, "a layout record is 8 bytes");

/* Record i of a layout (copied: the bytes object's buffer promises no alignment). */
static layout_rec
layout_at(const char *layout, Py_ssize_t i)
{
    layout_rec r;
    memcpy(&r, layout + i * (Py_ssize_t)sizeof(layout_rec), sizeof r);
    return r;
}

static int
param_size(char code)
{
    switch (code) {
    case '?': case 'b': case 'B': return 1;
    case 'h': case 'H': return 2;
    case 'i': case 'I': case 'f': return 4;
    case 'q': case 'Q': case 'd': case 'P': return 8;
    default: return 0;
    }
}

/* An integer parameter of ``size`` bytes, signed or not; OverflowError out of range. */
static int
pack_int(PyObject *o, char code, unsigned char *dst)
{
    int size = param_size(code), is_signed = code == 'b' || code == 'h' || code == 'i' ||
                                             code == 'q';
    if (is_signed) {
        long long v;
        if (get_i64(o, &v) < 0)
            return -1;
        long long lo = size == 8 ? LLONG_MIN : -(1ll << (8 * size - 1));
        long long hi = size == 8 ? LLONG_MAX : (1ll << (8 * size - 1)) - 1;
        if (v < lo || v > hi)
            goto overflow;
        int8_t i8 = (int8_t)v;
        int16_t i16 = (int16_t)v;
        int32_t i32 = (int32_t)v;
        memcpy(dst, size == 1 ? (void *)&i8 : size == 2 ? (void *)&i16
                    : size == 4 ? (void *)&i32 : (void *)&v, (size_t)size);
        return 0;
    }
    unsigned long long u;
    if (get_u64(o, &u) < 0)
        return -1;
    if (size < 8 && u >> (8 * size))
        goto overflow;
    uint8_t u8 = (uint8_t)u;
    uint16_t u16 = (uint16_t)u;
    uint32_t u32 = (uint32_t)u;
    memcpy(dst, size == 1 ? (void *)&u8 : size == 2 ? (void *)&u16
                : size == 4 ? (void *)&u32 : (void *)&u, (size_t)size);
    return 0;
overflow:
    PyErr_Format(PyExc_OverflowError, "a kernel argument does not fit in its '%c' parameter",
                 code);
    return -1;
}

/* Pack one argument ``a`` by its record into ``block``; *slot points at it. */
int
pack_one(const char *layout, Py_ssize_t i, PyObject *a, unsigned char *block, void **slot)
{
    layout_rec rec = layout_at(layout, i);
    char code = rec.code;
    unsigned char *dst = block + rec.offset;
    *slot = dst;
    if (code == 'P') {
        unsigned long long ptr;
        if (PyLong_Check(a)) {
            if (get_u64(a, &ptr) < 0)
                return -1;
        }
        else {
            PyObject *p = PyObject_GetAttrString(a, "ptr");
            if (p == NULL)
                return -1;
            int bad = get_u64(p, &ptr);
            Py_DECREF(p);
            if (bad < 0)
                return -1;
        }
        memcpy(dst, &ptr, 8);
    }
    else if (code == 'f' || code == 'd') {
        double v = PyFloat_AsDouble(a);
        if (v == -1.0 && PyErr_Occurred())
            return -1;
        if (code == 'f') {
            /* as struct.pack: an overflow is a finite value that rounds to inf (a
             * value a little over FLT_MAX may round down to it) */
            float f = (float)v;
            if (isinf(f) && !isinf(v)) {
                PyErr_SetString(PyExc_OverflowError,
                                "a kernel argument is too large for its float parameter");
                return -1;
            }
            memcpy(dst, &f, 4);
        }
        else {
            memcpy(dst, &v, 8);
        }
    }
    else if (code == '?') {
        int t = PyObject_IsTrue(a);
        if (t < 0)
            return -1;
        *dst = (unsigned char)t;
    }
    else if (pack_int(a, code, dst) < 0) {
        return -1;
    }
    return 0;
}

/* The pointer parameter i of a checked layout: its slot in ``block`` (8 bytes), or NULL
 * when record i is not a pointer. */
unsigned char *
pointer_slot(const char *layout, Py_ssize_t i, unsigned char *block)
{
    layout_rec rec = layout_at(layout, i);
    return rec.code == 'P' ? block + rec.offset : NULL;
}

/* Pack ``args`` (a list or tuple, checked) into ``block`` by ``recs``; ``slots[i]``
 * points at parameter i. */
int
pack_params(const char *layout, Py_ssize_t n, PyObject *args, unsigned char *block,
            void **slots)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        if (pack_one(layout, i, PySequence_Fast_ITEMS(args)[i], block, &slots[i]) < 0)
            return -1;
    }
    return 0;
}

/* Check a layout (a bytes object of records) once per call: codes, offsets, bounds. */
int
check_layout(PyObject *layout, PyObject *args, const char **recs, Py_ssize_t *n)
{
    if (!PyBytes_Check(layout) || PyBytes_GET_SIZE(layout) % sizeof(layout_rec)) {
        PyErr_SetString(PyExc_TypeError, "layout must be bytes of 8-byte records");
        return -1;
    }
    if (!PyList_Check(args) && !PyTuple_Check(args)) {
        PyErr_SetString(PyExc_TypeError, "args must be a list or a tuple");
        return -1;
    }
    *n = PyBytes_GET_SIZE(layout) / (Py_ssize_t)sizeof(layout_rec);
    *recs = PyBytes_AS_STRING(layout);
    if (*n > PARAM_COUNT_MAX || PySequence_Fast_GET_SIZE(args) != *n) {
        PyErr_Format(PyExc_ValueError, "%zd arguments for a layout of %zd parameters (at most %d)",
                     PySequence_Fast_GET_SIZE(args), *n, PARAM_COUNT_MAX);
        return -1;
    }
    for (Py_ssize_t i = 0; i < *n; i++) {
        layout_rec rec = layout_at(*recs, i);
        int size = param_size(rec.code);
        uint32_t off = rec.offset;
        if (size == 0 || off % 16 || off + (uint32_t)size > PARAM_BLOCK_MAX) {
            PyErr_Format(PyExc_ValueError, "layout record %zd is invalid", i);
            return -1;
        }
    }
    return 0;
}

uint32_t
layout_extent(const char *layout, Py_ssize_t n)
{
    uint32_t end = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        layout_rec rec = layout_at(layout, i);
        uint32_t e = rec.offset + (uint32_t)param_size(rec.code);
        end = e > end ? e : end;
    }
    return end;
}

static PyObject *
mod_launch_packed(PyObject *Py_UNUSED(m), PyObject *const *args, Py_ssize_t nargs)
{
    if (check_nargs("launch_packed", nargs, 13) < 0)
        return NULL;
    launch_config c;
    unsigned long long address;
    uint32_t value;
    uintptr_t lk, wv;
    const char *recs;
    Py_ssize_t n;
    if (get_launch_config(args, &c) < 0 || check_layout(args[9], args[10], &recs, &n) < 0 ||
        get_u64(args[11], &address) < 0 || get_u32(args[12], "value", &value) < 0 ||
        get_launch_entry_points(address, &lk, &wv) < 0)
        return NULL;
    /* the driver copies the parameters before cuLaunchKernel returns: the block can live
     * on this stack, one per call, and needs no lock */
    _Alignas(16) unsigned char block[PARAM_BLOCK_MAX];
    void *slots[PARAM_COUNT_MAX];
    if (pack_params(recs, n, args[10], block, slots) < 0)
        return NULL;
    return launch_then_write(lk, wv, &c, n ? slots : NULL, address, value);
}

/* -- a stub driver table (benchmarks and tests of the native paths, no GPU) ---------- */

static _Atomic unsigned long long g_stub_launches = 0;
static _Atomic unsigned long long g_stub_copies = 0;
static _Atomic unsigned long long g_stub_launch_ns = 0; /* a launch's host time, modelled */

/* cuMemcpyHtoDAsync that copies nothing: it counts the call. */
static CUresult
stub_memcpy_htod(CUdeviceptr dst, const void *src, size_t nbytes, void *stream)
{
    (void)dst, (void)src, (void)nbytes, (void)stream;
    atomic_fetch_add_explicit(&g_stub_copies, 1, memory_order_relaxed);
    return 0;
}

/* cuLaunchKernel that launches nothing: it counts the call. */
static CUresult
stub_launch_kernel(void *f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                   unsigned int by, unsigned int bz, unsigned int shared_mem, void *stream,
                   void **params, void **extra)
{
    (void)f, (void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)shared_mem,
        (void)stream, (void)params, (void)extra;
    atomic_fetch_add_explicit(&g_stub_launches, 1, memory_order_relaxed);
    uint64_t ns = atomic_load_explicit(&g_stub_launch_ns, memory_order_relaxed);
    if (ns) { /* the driver's host time, spent as a busy wait (as the driver spends it) */
        uint64_t start = now_ns();
        while (now_ns() - start < ns)
            cpu_relax();
    }
    return 0;
}

/* cuCtxSetCurrent and cuStreamSynchronize that do nothing (the submitter's other two). */
static CUresult
stub_ctx_set_current(void *ctx)
{
    (void)ctx;
    return 0;
}

static CUresult
stub_stream_synchronize(void *stream)
{
    (void)stream;
    return 0;
}

/* cuStreamWriteValue32 done by the host at once: a release store to a word of a live
 * slab (anything else: CUDA_ERROR_INVALID_VALUE, nothing written). */
static CUresult
stub_write_value32(void *stream, CUdeviceptr address, uint32_t value, unsigned int flags)
{
    (void)stream, (void)flags;
    int live = 0;
    pthread_mutex_lock(&g_slabs_mu);
    for (size_t i = 0; i < g_nslabs && !live; i++)
        live = address >= g_slabs[i].lo && address + 4 <= g_slabs[i].hi && address % 4 == 0;
    pthread_mutex_unlock(&g_slabs_mu);
    if (!live)
        return 1;
    atomic_store_explicit((_Atomic uint32_t *)(uintptr_t)address, value, memory_order_release);
    return 0;
}

static PyObject *
mod_stub_entry_points(PyObject *Py_UNUSED(m), PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"launch_ns", NULL};
    unsigned long long launch_ns = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|$K:stub_entry_points", kwlist, &launch_ns))
        return NULL;
    atomic_store_explicit(&g_stub_launch_ns, launch_ns, memory_order_relaxed);
    return Py_BuildValue("{sKsKsKsKsK}", "launch_kernel",
                         (unsigned long long)(uintptr_t)stub_launch_kernel, "write_value32",
                         (unsigned long long)(uintptr_t)stub_write_value32, "memcpy_htod",
                         (unsigned long long)(uintptr_t)stub_memcpy_htod, "ctx_set_current",
                         (unsigned long long)(uintptr_t)stub_ctx_set_current,
                         "stream_synchronize",
                         (unsigned long long)(uintptr_t)stub_stream_synchronize);
}

static PyObject *
mod_stub_copies(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(arg))
{
    return PyLong_FromUnsignedLongLong(atomic_load_explicit(&g_stub_copies, memory_order_relaxed));
}

static PyObject *
mod_stub_launches(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(arg))
{
    return PyLong_FromUnsignedLongLong(
        atomic_load_explicit(&g_stub_launches, memory_order_relaxed));
}

int
is_launch_packed(PyObject *f)
{
    return PyCFunction_Check(f) &&
           ((PyCFunctionObject *)f)->m_ml->ml_meth == (PyCFunction)(void (*)(void))mod_launch_packed;
}

PyMethodDef cuasync_driver_methods[] = {
    {"spin_wait", (PyCFunction)(void (*)(void))mod_spin_wait, METH_FASTCALL,
     "spin_wait($module, address, expected, budget_ns, hold_ns=0, /)\n--\n\n"
     "Busy-wait until the word reaches expected or the budget is spent, the GIL kept for\n"
     "the first hold_ns of it and released for the rest. budget_ns == 0 checks once.\n"
     "address: a word of a live Reactor's slab."},
    {"load32", (PyCFunction)mod_load32, METH_O,
     "load32($module, address, /)\n--\n\nAcquire load of a word of a live Reactor's slab."},
    {"store32", (PyCFunction)(void (*)(void))mod_store32, METH_FASTCALL,
     "store32($module, address, value, /)\n--\n\nRelease store to a word of a live Reactor's slab."},
    {"set_entry_points", (PyCFunction)(void (*)(void))mod_set_entry_points,
     METH_VARARGS | METH_KEYWORDS,
     "set_entry_points($module, /, *, write_value32=0, launch_kernel=0, ctx_set_current=0, "
     "stream_synchronize=0, memcpy_htod=0)\n--\n\n"
     "Driver entry points from cuGetProcAddress; 0 clears. All are replaced on every call "
     "(a Submitter takes the ones set when it is made)."},
    {"write_value32", (PyCFunction)(void (*)(void))mod_write_value32, METH_FASTCALL,
     "write_value32($module, stream, address, value, /)\n--\n\n"
     "cuStreamWriteValue32(stream, address, value, 0)."},
    {"copy_and_write", (PyCFunction)(void (*)(void))mod_copy_and_write, METH_FASTCALL,
     "copy_and_write($module, dst, src, nbytes, stream, address, value, /)\n--\n\n"
     "cuMemcpyHtoDAsync(dst, src, nbytes, stream), then (if it succeeded) "
     "cuStreamWriteValue32(stream, address, value, 0). Returns 0, the copy's CUresult "
     "(nothing enqueued), or minus the write's CUresult (the copy is enqueued)."},
    {"launch_and_write", (PyCFunction)(void (*)(void))mod_launch_and_write, METH_FASTCALL,
     "launch_and_write($module, function, gx, gy, gz, bx, by, bz, shared_mem, stream, params, "
     "address, value, /)\n--\n\n"
     "cuLaunchKernel, then (if address != 0 and the launch succeeded) cuStreamWriteValue32. "
     "Returns 0, the launch's CUresult, or minus the write's CUresult (the launch is enqueued)."},
    {"stub_entry_points", (PyCFunction)(void (*)(void))mod_stub_entry_points,
     METH_VARARGS | METH_KEYWORDS,
     "stub_entry_points($module, /, *, launch_ns=0)\n--\n\n"
     "Entry points for set_entry_points(**...) that reach no driver: launch_kernel counts "
     "the call (stub_launches()), busy-waits launch_ns (a model of the driver's host time) "
     "and launches nothing, write_value32 stores the value to a word of a live slab at "
     "once, memcpy_htod counts the call (stub_copies()) and copies nothing, "
     "ctx_set_current and stream_synchronize do nothing. For measuring and testing the "
     "native paths (a Submitter made on them too)."},
    {"stub_copies", (PyCFunction)mod_stub_copies, METH_NOARGS,
     "stub_copies($module, /)\n--\n\nCalls of the stub memcpy_htod so far."},
    {"stub_launches", (PyCFunction)mod_stub_launches, METH_NOARGS,
     "stub_launches($module, /)\n--\n\nCalls of the stub launch_kernel so far."},
    {"launch_packed", (PyCFunction)(void (*)(void))mod_launch_packed, METH_FASTCALL,
     "launch_packed($module, function, gx, gy, gz, bx, by, bz, shared_mem, stream, layout, "
     "args, address, value, /)\n--\n\n"
     "launch_and_write with the parameters packed here: layout is bytes of 8-byte records "
     "(struct code, 3 pad bytes, uint32 offset, 16-aligned, within 4096 bytes), one per "
     "item of the list args (ints, floats, bools; a pointer is an int or has .ptr). "
     "Returns as launch_and_write does."},
    {NULL, NULL, 0, NULL},
};
