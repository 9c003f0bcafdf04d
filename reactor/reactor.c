/*
 * cuasync._reactor -- the native completion reactor.
 *
 * GPU work is followed by cuStreamWriteValue32(stream, &slab[slot], generation, 0).
 * One native thread (never holding the GIL, never calling the Python API) watches
 * the *armed* words of that pinned host slab and, when a word reaches its expected
 * generation, pushes the slot id onto the LoopQueue of the event loop awaiting it.
 *
 * MEMORY ORDERING
 * ---------------
 * 1. Device side.  cuStreamWriteValue32 is a stream-ordered command: it executes
 *    only after all earlier work on the stream has completed.  With the default
 *    flags (0, not CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER) the driver issues a
 *    memory fence before the write, with semantics similar to
 *    __threadfence_system() scoped to the stream.  So every device write made by
 *    earlier work on the stream (kernel outputs, DtoH copies into pinned memory)
 *    is visible system-wide before the flag word changes: the flag write acts as
 *    a *release* store.  NO_MEMORY_BARRIER would break that and must not be used.
 *    The emulator mirrors this with store32(), a C11 release store issued after
 *    the emulated command has written its results.
 *
 * 2. Host side.  The reactor (and spin_wait/load32) reads the flag with a C11
 *    *acquire* load.  Once it observes the new generation, all writes that were
 *    ordered before the flag write are visible to this thread.  On x86 this is a
 *    plain load plus a compiler barrier; on aarch64 (Grace) it is LDAR.  The
 *    word lives in pinned (page-locked, cacheable) host memory; device writes
 *    over PCIe/NVLink-C2C are cache-coherent, so polling costs no bus traffic
 *    until the line actually changes.
 *
 * 3. Hand-off to the loop.  The reactor pushes the slot id under the queue's
 *    mutex and the loop pops it under the same mutex (drain).  Unlock/lock is a
 *    release/acquire pair, so: device writes -> flag -> reactor acquire ->
 *    queue unlock -> drain lock -> Python code that reads the results.  The
 *    eventfd only wakes the loop; correctness never depends on it for ordering.
 *
 * 4. Edge-triggered signalling.  A push writes 1 to the eventfd only when the
 *    queue goes from empty (no completed and no stale entries) to non-empty.
 *    Bursts of completions therefore cost one syscall and one loop wake-up.
 *
 * 5. No lost wakeups.  drain() FIRST reads (clears) the eventfd and THEN pops all
 *    entries.  If it popped first and read afterwards, a push landing in between
 *    would see an empty queue, signal, and have that signal swallowed by the
 *    read: the entry would sit in the queue with no pending wake-up.  Reading
 *    first means any push after the read either is popped by this drain or finds
 *    the queue empty after it and signals again.  (We additionally do both steps
 *    inside one critical section of the queue mutex, which also keeps a
 *    concurrent close() from closing the fd under a reader.)
 *
 * 6. Reactor state (armed list, thread control) is protected by the
 *    reactor's own pthread mutex (counters are C11 atomics), never by the GIL,
 *    so the module is safe on free-threaded CPython (Py_mod_gil =
 *    Py_MOD_GIL_NOT_USED).  No critical section calls into Python, so an
 *    attached thread blocking on one of these mutexes can never deadlock
 *    against the GIL or a stop-the-world pause.
 *    Lock order: reactor mutex -> queue mutex (never the reverse).
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#ifdef _WIN32
#error "cuasync._reactor needs POSIX threads; the package falls back to host callbacks"
#endif

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifdef __linux__
#include <sys/eventfd.h>
#include <sys/prctl.h>
#define CUASYNC_HAVE_EVENTFD 1
#endif

_Static_assert(sizeof(_Atomic uint32_t) == sizeof(uint32_t), "atomic uint32 must be 4 bytes");

/* ---------------------------------------------------------------------------- */
/* driver types (declared here: no CUDA headers, never link libcuda)            */

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef CUresult (*pfn_write_value32)(void *stream, CUdeviceptr addr, uint32_t value,
                                      unsigned int flags);
typedef CUresult (*pfn_launch_kernel)(void *f, unsigned int gx, unsigned int gy,
                                      unsigned int gz, unsigned int bx, unsigned int by,
                                      unsigned int bz, unsigned int shared_mem, void *stream,
                                      void **params, void **extra);

static _Atomic uintptr_t g_write_value32 = 0;
static _Atomic uintptr_t g_launch_kernel = 0;

/* ---------------------------------------------------------------------------- */
/* small helpers                                                                */

static inline uint64_t
now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline void
cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __asm__ __volatile__("pause" ::: "memory");
#elif defined(__aarch64__) || defined(__arm__)
    __asm__ __volatile__("yield" ::: "memory");
#else
    atomic_signal_fence(memory_order_seq_cst);
#endif
}

static void
sleep_ns(uint64_t ns)
{
    struct timespec ts;
    ts.tv_sec = (time_t)(ns / 1000000000ull);
    ts.tv_nsec = (long)(ns % 1000000000ull);
    nanosleep(&ts, NULL); /* signals are blocked on the reactor thread */
}

/* "reached" == (int32_t)(word - expected) >= 0, written without the
 * implementation-defined unsigned->signed conversion. */
static inline int
gen_reached(uint32_t word, uint32_t expected)
{
    return (uint32_t)(word - expected) < 0x80000000u;
}

static inline uint32_t
load_acquire(_Atomic uint32_t *p)
{
    return atomic_load_explicit(p, memory_order_acquire);
}

/* int -> unsigned long long; accepts __index__ objects (numpy ints). */
static int
get_u64(PyObject *o, unsigned long long *out)
{
    unsigned long long v;
    if (PyLong_Check(o)) {
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

static int
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
static int
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

/* ---------------------------------------------------------------------------- */
/* live slabs: the only memory load32/store32/spin_wait may touch               */

typedef struct {
    const void *owner; /* the Reactor that registered it */
    uintptr_t lo, hi;  /* [lo, hi) */
} slab_range;

static pthread_mutex_t g_slabs_mu = PTHREAD_MUTEX_INITIALIZER;
static slab_range *g_slabs;
static size_t g_nslabs, g_slabs_cap;

static int
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

static void
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
static int
get_word_address(PyObject *o, _Atomic uint32_t **out)
{
    unsigned long long v;
    char ranges[256];
    if (get_u64(o, &v) < 0)
        return -1;
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
conv_u64(PyObject *o, void *out)
{
    return get_u64(o, (unsigned long long *)out) < 0 ? 0 : 1;
}

/* ---------------------------------------------------------------------------- */
/* queue core: heap object shared by the LoopQueue and every armed entry       */

typedef struct {
    uint32_t *v;
    size_t n, cap;
} u32vec;

static int
u32vec_push(u32vec *a, uint32_t x)
{
    if (a->n == a->cap) {
        size_t nc = a->cap ? a->cap * 2 : 16;
        uint32_t *p = realloc(a->v, nc * sizeof(*p));
        if (p == NULL)
            return -1;
        a->v = p;
        a->cap = nc;
    }
    a->v[a->n++] = x;
    return 0;
}

static void
u32vec_free(u32vec *a)
{
    free(a->v);
    a->v = NULL;
    a->n = a->cap = 0;
}

typedef struct {
    atomic_size_t refs;
    pthread_mutex_t mu;
    int rfd, wfd; /* eventfd: rfd == wfd; otherwise a pipe. -1 once closed */
    atomic_int closed; /* written under mu; read lock-free by the reactor's scan */
    int draining;      /* a drain() is building its lists (between its two critical sections) */
    uint64_t epoch;    /* bumped by close(): a drain that straddles it hands nothing out */
    u32vec done;
    u32vec stale;
    atomic_size_t npending; /* done.n + stale.n, mirrored for lock-free reads */
} qcore;

static void
qcore_close_fds_locked(qcore *q)
{
    if (q->rfd >= 0)
        close(q->rfd);
    if (q->wfd >= 0 && q->wfd != q->rfd)
        close(q->wfd);
    q->rfd = q->wfd = -1;
}

static qcore *
qcore_new(void)
{
    qcore *q = calloc(1, sizeof(*q));
    if (q == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    q->rfd = q->wfd = -1;
#ifdef CUASYNC_HAVE_EVENTFD
    q->rfd = q->wfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (q->rfd < 0) {
        free(q);
        return NULL;
    }
#else
    int fds[2];
    if (pipe(fds) < 0) {
        free(q);
        return NULL;
    }
    for (int i = 0; i < 2; i++) {
        int fl = fcntl(fds[i], F_GETFL);
        fcntl(fds[i], F_SETFL, fl | O_NONBLOCK);
        fcntl(fds[i], F_SETFD, FD_CLOEXEC);
    }
    q->rfd = fds[0];
    q->wfd = fds[1];
#endif
    if (pthread_mutex_init(&q->mu, NULL) != 0) {
        qcore_close_fds_locked(q);
        free(q);
        errno = ENOMEM;
        return NULL;
    }
    atomic_init(&q->refs, 1);
    atomic_init(&q->npending, 0);
    atomic_init(&q->closed, 0);
    return q;
}

static inline void
qcore_incref(qcore *q)
{
    atomic_fetch_add_explicit(&q->refs, 1, memory_order_relaxed);
}

static void
qcore_decref(qcore *q)
{
    if (atomic_fetch_sub_explicit(&q->refs, 1, memory_order_acq_rel) != 1)
        return;
    /* last reference: nobody else can touch it any more */
    qcore_close_fds_locked(q);
    u32vec_free(&q->done);
    u32vec_free(&q->stale);
    pthread_mutex_destroy(&q->mu);
    free(q);
}

static void
qcore_signal_locked(qcore *q)
{
    ssize_t rc;
#ifdef CUASYNC_HAVE_EVENTFD
    uint64_t one = 1;
    do {
        rc = write(q->wfd, &one, sizeof(one));
    } while (rc < 0 && errno == EINTR);
#else
    char one = 1;
    do {
        rc = write(q->wfd, &one, 1);
    } while (rc < 0 && errno == EINTR);
#endif
    (void)rc; /* EAGAIN: a wake-up is already pending, which is all we need */
}

static void
qcore_clear_fd_locked(qcore *q)
{
    ssize_t rc;
#ifdef CUASYNC_HAVE_EVENTFD
    uint64_t cnt;
    do {
        rc = read(q->rfd, &cnt, sizeof(cnt));
    } while (rc < 0 && errno == EINTR);
#else
    char buf[64];
    for (;;) {
        rc = read(q->rfd, buf, sizeof(buf));
        if (rc < 0 && errno == EINTR)
            continue;
        if (rc <= 0)
            break;
    }
#endif
    (void)rc; /* EAGAIN: nothing was pending */
}

static inline int
qcore_is_closed(qcore *q)
{
    return atomic_load_explicit(&q->closed, memory_order_acquire);
}

static inline void
qcore_update_pending_locked(qcore *q)
{
    atomic_store_explicit(&q->npending, q->done.n + q->stale.n, memory_order_relaxed);
}

enum { PUSH_OK = 0, PUSH_NOMEM, PUSH_CLOSED };

/* Push a completed (stale == 0) or stale (stale == 1) slot id.  Signals the fd on
 * the empty -> non-empty edge.  Returns PUSH_CLOSED on a closed queue (the reactor
 * then routes the entry to its orphan queue) and PUSH_NOMEM if the array cannot
 * grow (the reactor retries at its next scan). */
static int
qcore_push(qcore *q, uint32_t slot, int stale)
{
    int rc = PUSH_CLOSED;
    pthread_mutex_lock(&q->mu);
    if (!q->closed) {
        int was_empty = (q->done.n == 0 && q->stale.n == 0);
        rc = u32vec_push(stale ? &q->stale : &q->done, slot) < 0 ? PUSH_NOMEM : PUSH_OK;
        if (rc == PUSH_OK) {
            qcore_update_pending_locked(q);
            if (was_empty)
                qcore_signal_locked(q);
        }
    }
    pthread_mutex_unlock(&q->mu);
    return rc;
}

/* Mark closed and close the fd; the entries stay for the caller to take. */
static void
qcore_close_locked(qcore *q)
{
    if (!q->closed) {
        atomic_store_explicit(&q->closed, 1, memory_order_release);
        q->epoch++;
        qcore_close_fds_locked(q);
    }
}

/* ---------------------------------------------------------------------------- */
/* module state                                                                 */

typedef struct {
    PyTypeObject *reactor_type;
    PyTypeObject *queue_type;
} modstate;

/* ---------------------------------------------------------------------------- */
/* LoopQueue                                                                    */

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
    self->core = qcore_new();
    if (self->core == NULL) {
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
    qcore *q = self->core;
    if (q != NULL) {
        /* Entries nobody took are discarded; slots still armed to this queue keep
         * the core alive and report to the reactor's orphan queue from now on. */
        pthread_mutex_lock(&q->mu);
        qcore_close_locked(q);
        u32vec_free(&q->done);
        u32vec_free(&q->stale);
        qcore_update_pending_locked(q);
        pthread_mutex_unlock(&q->mu);
        qcore_decref(q);
        self->core = NULL;
    }
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static PyObject *
LoopQueue_fileno(LoopQueue *self, PyObject *Py_UNUSED(ignored))
{
    qcore *q = self->core;
    pthread_mutex_lock(&q->mu);
    int fd = q->closed ? -1 : q->rfd;
    pthread_mutex_unlock(&q->mu);
    if (fd < 0) {
        PyErr_SetString(PyExc_ValueError, "fileno() on a closed LoopQueue");
        return NULL;
    }
    return PyLong_FromLong(fd);
}

static PyObject *
u32_list(const uint32_t *v, size_t n)
{
    PyObject *lst = PyList_New((Py_ssize_t)n);
    if (lst == NULL)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        PyObject *x = PyLong_FromUnsignedLong(v[i]);
        if (x == NULL) {
            Py_DECREF(lst);
            return NULL;
        }
        PyList_SET_ITEM(lst, (Py_ssize_t)i, x);
    }
    return lst;
}

/* (list(done), list(stale)); NULL with MemoryError if any allocation fails */
static PyObject *
pair_of_lists(const uint32_t *done, size_t nd, const uint32_t *stale, size_t ns)
{
    PyObject *result = NULL, *dl = u32_list(done, nd), *sl = NULL;
    if (dl != NULL)
        sl = u32_list(stale, ns);
    if (sl != NULL)
        result = PyTuple_Pack(2, dl, sl);
    Py_XDECREF(dl);
    Py_XDECREF(sl);
    return result;
}

static void
u32vec_drop_front(u32vec *a, size_t n)
{
    memmove(a->v, a->v + n, (a->n - n) * sizeof(uint32_t));
    a->n -= n;
}

#define DRAIN_INLINE 128

/* Two critical sections around the list building, which allocates and so must not
 * run under the queue mutex: the first clears the fd and copies the entries, the
 * second removes them only once the lists exist.  If building them fails, the
 * entries are still in the queue and the fd is signalled again: nothing is lost.
 * Entries pushed in between are kept and re-signalled the same way. */
static PyObject *
LoopQueue_drain(LoopQueue *self, PyObject *Py_UNUSED(ignored))
{
    qcore *q = self->core;
    uint32_t inline_buf[DRAIN_INLINE], *buf = inline_buf;
    pthread_mutex_lock(&q->mu);
    if (q->closed) {
        pthread_mutex_unlock(&q->mu);
        PyErr_SetString(PyExc_ValueError, "drain() on a closed LoopQueue");
        return NULL;
    }
    size_t nd = q->done.n, ns = q->stale.n;
    if (q->draining) /* another thread, or a finalizer run by this drain's allocations */
        nd = ns = 0;
    else if (nd + ns > DRAIN_INLINE && (buf = malloc((nd + ns) * sizeof(uint32_t))) == NULL) {
        pthread_mutex_unlock(&q->mu);
        return PyErr_NoMemory();
    }
    if (nd + ns == 0) {
        if (!q->draining)
            qcore_clear_fd_locked(q);
        pthread_mutex_unlock(&q->mu);
        return pair_of_lists(NULL, 0, NULL, 0);
    }
    /* FIRST clear the wake-up, THEN take the entries (ordering note 5). */
    qcore_clear_fd_locked(q);
    memcpy(buf, q->done.v, nd * sizeof(uint32_t));
    memcpy(buf + nd, q->stale.v, ns * sizeof(uint32_t));
    q->draining = 1;
    uint64_t epoch = q->epoch;
    pthread_mutex_unlock(&q->mu);

    PyObject *result = pair_of_lists(buf, nd, buf + nd, ns);

    pthread_mutex_lock(&q->mu);
    q->draining = 0;
    int taken_by_close = q->epoch != epoch;
    if (!taken_by_close) {
        if (result != NULL) {
            u32vec_drop_front(&q->done, nd);
            u32vec_drop_front(&q->stale, ns);
            qcore_update_pending_locked(q);
        }
        if (q->done.n + q->stale.n)
            qcore_signal_locked(q); /* what is left needs a wake-up of its own */
    }
    pthread_mutex_unlock(&q->mu);
    if (buf != inline_buf)
        free(buf);
    if (taken_by_close && result != NULL) /* close() returned these entries */
        Py_SETREF(result, pair_of_lists(NULL, 0, NULL, 0));
    return result;
}

static PyObject *
LoopQueue_close(LoopQueue *self, PyObject *Py_UNUSED(ignored))
{
    qcore *q = self->core;
    pthread_mutex_lock(&q->mu);
    qcore_close_locked(q);
    u32vec done = q->done, stale = q->stale; /* steal: no allocation under the lock */
    q->done = q->stale = (u32vec){NULL, 0, 0};
    qcore_update_pending_locked(q);
    pthread_mutex_unlock(&q->mu);

    PyObject *result = pair_of_lists(done.v, done.n, stale.v, stale.n);
    if (result == NULL) {
        /* A closed queue takes no pushes: put the entries back for a later close(). */
        pthread_mutex_lock(&q->mu);
        q->done = done;
        q->stale = stale;
        qcore_update_pending_locked(q);
        pthread_mutex_unlock(&q->mu);
        return NULL;
    }
    u32vec_free(&done);
    u32vec_free(&stale);
    return result;
}

static PyObject *
LoopQueue_get_pending(LoopQueue *self, void *Py_UNUSED(closure))
{
    /* lock-free, so polling it never contends with the reactor's push */
    return PyLong_FromSize_t(atomic_load_explicit(&self->core->npending, memory_order_relaxed));
}

static PyObject *
LoopQueue_get_closed(LoopQueue *self, void *Py_UNUSED(closure))
{
    return PyBool_FromLong(qcore_is_closed(self->core));
}

static PyMethodDef LoopQueue_methods[] = {
    {"fileno", (PyCFunction)LoopQueue_fileno, METH_NOARGS,
     "fileno() -> int\n\nThe fd to watch for readability (eventfd; a pipe's read end off Linux)."},
    {"drain", (PyCFunction)LoopQueue_drain, METH_NOARGS,
     "drain() -> (completed: list[int], stale: list[int])\n\n"
     "Clears the fd first, then pops every pending entry. On MemoryError nothing is popped."},
    {"close", (PyCFunction)LoopQueue_close, METH_NOARGS,
     "close() -> (completed: list[int], stale: list[int])\n\n"
     "Closes the fd and pops the entries still pending, atomically with closing; later calls "
     "return empty lists. Slots still armed to this queue report to the reactor's orphan "
     "queue from now on."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef LoopQueue_getset[] = {
    {"pending", (getter)LoopQueue_get_pending, NULL, "entries waiting to be drained", NULL},
    {"closed", (getter)LoopQueue_get_closed, NULL, "whether close() was called", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot LoopQueue_slots[] = {
    {Py_tp_new, (void *)LoopQueue_new},
    {Py_tp_dealloc, (void *)LoopQueue_dealloc},
    {Py_tp_methods, LoopQueue_methods},
    {Py_tp_getset, LoopQueue_getset},
    {Py_tp_doc, (void *)"LoopQueue()\n\nPer-event-loop completion queue with an eventfd wake-up."},
    {0, NULL},
};

static PyType_Spec LoopQueue_spec = {
    .name = "cuasync._reactor.LoopQueue",
    .basicsize = sizeof(LoopQueue),
    .itemsize = 0,
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = LoopQueue_slots,
};

/* ---------------------------------------------------------------------------- */
/* Reactor                                                                      */

typedef struct {
    uint32_t slot;
    uint32_t expected;
    qcore *q;
    uint64_t arm_ns;
    uint64_t next_stale_ns;
    uint64_t stale_interval_ns;
} armed_t;

typedef struct {
    PyObject_HEAD
    /* immutable after construction */
    _Atomic uint32_t *words;
    uint32_t nslots;
    uint64_t stale_ns, stale_max_ns, spin_ns, backoff_max_ns, long_ns, long_backoff_max_ns;
    int sync_ok;

    /* protected by mu */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int32_t *index; /* slot -> position in armed[], -1 if not armed */
    armed_t *armed;
    size_t narmed, cap;
    uint64_t arm_seq;
    int stop, closed, started;
    int long_nap; /* the thread waits on cv for longer than backoff_max_ns: arm() wakes it */
    pthread_t thread;
    qcore *orphan; /* receives reports of entries whose own queue is closed; may be NULL */

    /* serialises close() callers so that each returns after the join */
    pthread_mutex_t close_mu;

    /* lock-free */
    atomic_int contenders; /* Python threads waiting for mu: the spinner yields to them */
    atomic_int parked;
    _Atomic uint64_t wakeups, completed, stale_reports, dropped, scans, backoff_ns;
} Reactor;

static inline void
reactor_lock(Reactor *r)
{
    atomic_fetch_add_explicit(&r->contenders, 1, memory_order_relaxed);
    pthread_mutex_lock(&r->mu);
    atomic_fetch_sub_explicit(&r->contenders, 1, memory_order_relaxed);
}

static inline void
reactor_unlock(Reactor *r)
{
    pthread_mutex_unlock(&r->mu);
}

/* remove armed[i] by swap-with-last; the caller drops the queue reference */
static void
armed_remove_locked(Reactor *r, size_t i)
{
    r->index[r->armed[i].slot] = -1;
    r->narmed--;
    if (i != r->narmed) {
        r->armed[i] = r->armed[r->narmed];
        r->index[r->armed[i].slot] = (int32_t)i;
    }
}

/* The orphan queue if it can take reports, else NULL. */
static inline qcore *
live_orphan_locked(Reactor *r)
{
    return r->orphan != NULL && !qcore_is_closed(r->orphan) ? r->orphan : NULL;
}

/* Push slot to *q; if *q is closed, to the orphan queue instead (updating *q).
 * PUSH_CLOSED: no open queue can take it. */
static int
push_or_orphan_locked(Reactor *r, qcore **q, uint32_t slot, int stale)
{
    for (;;) {
        int rc = *q != NULL ? qcore_push(*q, slot, stale) : PUSH_CLOSED;
        if (rc != PUSH_CLOSED || *q == NULL)
            return rc;
        *q = *q == r->orphan ? NULL : live_orphan_locked(r);
    }
}

/* Re-target entry e to q (the orphan queue) so that its later reports go there too. */
static void
retarget_locked(armed_t *e, qcore *q)
{
    if (q != NULL && q != e->q) {
        qcore_incref(q);
        qcore_decref(e->q);
        e->q = q;
    }
}

/* Push a report of entry e, following it to the orphan queue if needed. */
static int
entry_push_locked(Reactor *r, armed_t *e, int stale)
{
    qcore *q = e->q;
    int rc = push_or_orphan_locked(r, &q, e->slot, stale);
    retarget_locked(e, q);
    return rc;
}

/* Counters move before the push so that a consumer that has drained an entry never
 * sees a counter that does not include it yet; a failed push takes it back. */
static int
entry_report_locked(Reactor *r, armed_t *e, int stale)
{
    _Atomic uint64_t *counter = stale ? &r->stale_reports : &r->completed;
    atomic_fetch_add_explicit(counter, 1, memory_order_relaxed);
    int rc = entry_push_locked(r, e, stale);
    if (rc != PUSH_OK)
        atomic_fetch_sub_explicit(counter, 1, memory_order_relaxed);
    return rc;
}

typedef struct {
    size_t found;           /* completions pushed */
    uint64_t youngest_arm;  /* latest arm time among the entries still armed */
    uint64_t next_stale;    /* earliest stale deadline among them */
} scan_t;

/* One pass over the armed entries.  Completed entries and entries that no open
 * queue can receive any more (counted in dropped) leave the armed array. */
static scan_t
reactor_scan_locked(Reactor *r, uint64_t t)
{
    scan_t sc = {0, 0, UINT64_MAX};
    size_t i = 0;
    atomic_fetch_add_explicit(&r->scans, 1, memory_order_relaxed);
    while (i < r->narmed) {
        armed_t *e = &r->armed[i];
        int reached = gen_reached(load_acquire(&r->words[e->slot]), e->expected);
        int rc = PUSH_OK;
        if (reached) {
            rc = entry_report_locked(r, e, 0);
        }
        else if (r->stale_ns && t >= e->next_stale_ns) {
            rc = entry_report_locked(r, e, 1);
            if (rc == PUSH_OK) {
                uint64_t nxt = e->stale_interval_ns * 2;
                e->stale_interval_ns = nxt > r->stale_max_ns ? r->stale_max_ns : nxt;
                e->next_stale_ns = t + e->stale_interval_ns;
            }
        }
        else if (qcore_is_closed(e->q)) {
            qcore *q = live_orphan_locked(r);
            retarget_locked(e, q);
            rc = q != NULL ? PUSH_OK : PUSH_CLOSED;
        }
        if (rc == PUSH_CLOSED || (reached && rc == PUSH_OK)) {
            if (rc == PUSH_CLOSED)
                atomic_fetch_add_explicit(&r->dropped, 1, memory_order_relaxed);
            else
                sc.found++;
            qcore *q = e->q;
            armed_remove_locked(r, i); /* armed[i] now holds the former last entry */
            qcore_decref(q);
            continue;
        }
        /* still armed (PUSH_NOMEM: retried at the next scan) */
        if (e->arm_ns > sc.youngest_arm)
            sc.youngest_arm = e->arm_ns;
        if (r->stale_ns && e->next_stale_ns < sc.next_stale)
            sc.next_stale = e->next_stale_ns;
        i++;
    }
    return sc;
}

#define BACKOFF_START_NS 1000u
#define LONG_AGE_DIVISOR 16u

/* The next sleep between scans while entries stay armed without progress: 1 us,
 * doubling, up to a cap.  The cap is backoff_max_ns while the youngest entry is
 * younger than long_ns, so that short work is seen within ~backoff_max_ns of its
 * flag landing.  Beyond, it is the youngest entry's age / 16 (the report comes at
 * most ~6% after the time the work has already run), up to long_backoff_max_ns:
 * one long kernel then costs ~500 wake-ups per second instead of ~10,000. */
static uint64_t
next_backoff(const Reactor *r, uint64_t backoff, uint64_t youngest_age)
{
    uint64_t cap = r->backoff_max_ns;
    if (youngest_age >= r->long_ns && youngest_age / LONG_AGE_DIVISOR > cap)
        cap = youngest_age / LONG_AGE_DIVISOR;
    if (cap > r->long_backoff_max_ns)
        cap = r->long_backoff_max_ns;
    backoff = backoff ? backoff * 2 : BACKOFF_START_NS;
    return backoff < cap ? backoff : cap;
}

/* Wait on cv for up to ns with mu held (released while waiting): arm() and close()
 * wake it, so a long nap never delays a new arm. */
static void
long_nap_locked(Reactor *r, uint64_t ns)
{
    r->long_nap = 1;
#ifdef __APPLE__
    struct timespec rel = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
    pthread_cond_timedwait_relative_np(&r->cv, &r->mu, &rel);
#else
    uint64_t deadline = now_ns() + ns; /* cv runs on CLOCK_MONOTONIC (see Reactor_new) */
    struct timespec abs = {(time_t)(deadline / 1000000000ull), (long)(deadline % 1000000000ull)};
    pthread_cond_timedwait(&r->cv, &r->mu, &abs);
#endif
    r->long_nap = 0;
}

static void
name_this_thread(void)
{
#if defined(__APPLE__)
    pthread_setname_np("cuasync-reactor");
#elif defined(__linux__)
    pthread_setname_np(pthread_self(), "cuasync-reactor"); /* <= 15 characters */
    /* default timer slack (50 us) would turn a 1 us nanosleep into ~60 us */
    prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
#endif
}

static void *
reactor_main(void *arg)
{
    Reactor *r = (Reactor *)arg;
    name_this_thread();
    uint64_t backoff = 0;
    uint64_t last_progress;
    uint64_t seen_seq;

    pthread_mutex_lock(&r->mu);
    /* The thread is born parked; being started by the first arm is a wake-up. */
    atomic_fetch_add_explicit(&r->wakeups, 1, memory_order_relaxed);
    last_progress = now_ns();
    seen_seq = r->arm_seq;

    while (!r->stop) {
        uint64_t t = now_ns();
        if (r->arm_seq != seen_seq) { /* a new arm resets spin window and backoff */
            seen_seq = r->arm_seq;
            last_progress = t;
            backoff = 0;
        }
        scan_t sc = {0, t, UINT64_MAX};
        if (r->narmed)
            sc = reactor_scan_locked(r, t);
        if (sc.found) {
            last_progress = t;
            backoff = 0;
        }
        int spinning = (t - last_progress) < r->spin_ns;

        if (r->narmed == 0 && !spinning) {
            /* Nothing armed and the spin window is over: park.  (Lingering for the
             * spin window first keeps a back-to-back await loop from paying a
             * futex wake-up per await.)  cond_wait releases the mutex. */
            atomic_store_explicit(&r->backoff_ns, 0, memory_order_relaxed);
            atomic_store_explicit(&r->parked, 1, memory_order_release);
            while (r->narmed == 0 && !r->stop)
                pthread_cond_wait(&r->cv, &r->mu);
            atomic_store_explicit(&r->parked, 0, memory_order_release);
            if (r->stop)
                break;
            atomic_fetch_add_explicit(&r->wakeups, 1, memory_order_relaxed);
            backoff = 0;
            last_progress = now_ns();
            seen_seq = r->arm_seq;
            continue; /* scan at once */
        }

        uint64_t nap = 0;
        if (!spinning) {
            /* armed but idle past the spin window: sleep 1us, 2us, 4us, ... (capped),
             * never past the next stale report */
            backoff = next_backoff(r, backoff, t > sc.youngest_arm ? t - sc.youngest_arm : 0);
            nap = backoff;
            if (sc.next_stale > t && sc.next_stale - t < nap)
                nap = sc.next_stale - t;
        }
        atomic_store_explicit(&r->backoff_ns, nap, memory_order_relaxed);
        if (nap > r->backoff_max_ns) {
            long_nap_locked(r, nap);
            continue; /* the mutex is held again; Python threads had it while we waited */
        }
        pthread_mutex_unlock(&r->mu);
        if (spinning) {
            for (int k = 0; k < 8; k++)
                cpu_relax();
        }
        else if (nap) {
            sleep_ns(nap);
        }
        else {
            sched_yield();
        }
        /* Let Python threads blocked in arm()/disarm() take the mutex first. */
        for (int k = 0; k < 100000 && atomic_load_explicit(&r->contenders, memory_order_relaxed);
             k++)
            cpu_relax();
        pthread_mutex_lock(&r->mu);
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

/* Stop and join the thread, then release every armed entry.  Safe without the
 * GIL; concurrent callers return only after the first one has finished. */
static void
reactor_shutdown(Reactor *r)
{
    if (!r->sync_ok)
        return;
    pthread_mutex_lock(&r->close_mu);
    reactor_lock(r);
    if (r->closed) {
        reactor_unlock(r);
        pthread_mutex_unlock(&r->close_mu);
        return;
    }
    r->closed = 1;
    r->stop = 1;
    slab_unregister(r);
    int join = r->started;
    pthread_cond_broadcast(&r->cv);
    reactor_unlock(r);

    if (join)
        pthread_join(r->thread, NULL);

    reactor_lock(r);
    for (size_t i = 0; i < r->narmed; i++) {
        r->index[r->armed[i].slot] = -1;
        qcore_decref(r->armed[i].q);
    }
    r->narmed = 0;
    if (r->orphan != NULL) {
        qcore_decref(r->orphan);
        r->orphan = NULL;
    }
    atomic_store_explicit(&r->parked, 0, memory_order_relaxed);
    reactor_unlock(r);
    pthread_mutex_unlock(&r->close_mu);
}

static PyObject *
Reactor_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"address",        "nslots",  "stale_ns",
                             "stale_max_ns",   "spin_ns", "backoff_max_ns",
                             "long_ns",        "long_backoff_max_ns", NULL};
    unsigned long long address = 0;
    Py_ssize_t nslots = 0;
    long long stale_ns = 2000000, stale_max_ns = 50000000, spin_ns = 50000,
              backoff_max_ns = 200000, long_ns = 10000000, long_backoff_max_ns = 2000000;

    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O&n|$LLLLLL:Reactor", kwlist, conv_u64,
                                     &address, &nslots, &stale_ns, &stale_max_ns, &spin_ns,
                                     &backoff_max_ns, &long_ns, &long_backoff_max_ns))
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
    if (stale_ns < 0 || stale_max_ns < 0 || spin_ns < 0 || backoff_max_ns < 0 || long_ns < 0 ||
        long_backoff_max_ns < 0) {
        PyErr_SetString(PyExc_ValueError, "stale_ns, stale_max_ns, spin_ns, backoff_max_ns, "
                                          "long_ns and long_backoff_max_ns must be >= 0");
        return NULL;
    }

    Reactor *self = (Reactor *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->words = (_Atomic uint32_t *)(uintptr_t)address;
    self->nslots = (uint32_t)nslots;
    self->stale_ns = (uint64_t)stale_ns;
    self->stale_max_ns = (uint64_t)(stale_max_ns < stale_ns ? stale_ns : stale_max_ns);
    self->spin_ns = (uint64_t)spin_ns;
    self->backoff_max_ns = (uint64_t)backoff_max_ns;
    self->long_ns = (uint64_t)long_ns;
    self->long_backoff_max_ns = (uint64_t)(long_backoff_max_ns < backoff_max_ns
                                               ? backoff_max_ns
                                               : long_backoff_max_ns);
    atomic_init(&self->contenders, 0);
    atomic_init(&self->parked, 0);
    atomic_init(&self->wakeups, 0);
    atomic_init(&self->completed, 0);
    atomic_init(&self->stale_reports, 0);
    atomic_init(&self->dropped, 0);
    atomic_init(&self->scans, 0);
    atomic_init(&self->backoff_ns, 0);

    self->index = malloc((size_t)nslots * sizeof(int32_t));
    if (self->index == NULL) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    memset(self->index, 0xFF, (size_t)nslots * sizeof(int32_t)); /* all -1 */

    int ok = pthread_mutex_init(&self->mu, NULL) == 0;
    pthread_condattr_t cv_attr;
    if (ok && pthread_condattr_init(&cv_attr) != 0) {
        pthread_mutex_destroy(&self->mu);
        ok = 0;
    }
    if (ok) {
#ifndef __APPLE__
        pthread_condattr_setclock(&cv_attr, CLOCK_MONOTONIC); /* long naps: see now_ns() */
#endif
        if (pthread_cond_init(&self->cv, &cv_attr) != 0) {
            pthread_mutex_destroy(&self->mu);
            ok = 0;
        }
        pthread_condattr_destroy(&cv_attr);
    }
    if (ok && pthread_mutex_init(&self->close_mu, NULL) != 0) {
        pthread_cond_destroy(&self->cv);
        pthread_mutex_destroy(&self->mu);
        ok = 0;
    }
    if (!ok) {
        Py_DECREF(self);
        PyErr_SetString(PyExc_RuntimeError, "could not initialise reactor synchronisation");
        return NULL;
    }
    self->sync_ok = 1;
    if (slab_register(self, (uintptr_t)address, (uintptr_t)address + 4 * (uintptr_t)nslots) < 0) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    return (PyObject *)self;
}

static void
Reactor_dealloc(Reactor *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    /* The thread never needs the GIL, so joining while holding it cannot
     * deadlock; it takes at most one backoff sleep. */
    reactor_shutdown(self);
    if (self->sync_ok) {
        pthread_mutex_destroy(&self->close_mu);
        pthread_cond_destroy(&self->cv);
        pthread_mutex_destroy(&self->mu);
    }
    free(self->armed);
    free(self->index);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static int
parse_slot(Reactor *r, PyObject *o, uint32_t *slot)
{
    long long v;
    if (get_i64(o, &v) < 0) {
        if (PyErr_ExceptionMatches(PyExc_OverflowError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_ValueError, "slot out of range [0, %u)", r->nslots);
        }
        return -1;
    }
    if (v < 0 || v >= (long long)r->nslots) {
        PyErr_Format(PyExc_ValueError, "slot %lld out of range [0, %u)", v, r->nslots);
        return -1;
    }
    *slot = (uint32_t)v;
    return 0;
}

/* The core of a LoopQueue argument; NULL with TypeError for anything else. */
static qcore *
queue_core(Reactor *r, PyObject *o, const char *what)
{
    modstate *st = (modstate *)PyType_GetModuleState(Py_TYPE(r));
    if (st == NULL)
        return NULL;
    if (!PyObject_TypeCheck(o, st->queue_type)) {
        PyErr_Format(PyExc_TypeError, "%s must be a LoopQueue, not %.100s", what,
                     Py_TYPE(o)->tp_name);
        return NULL;
    }
    return ((LoopQueue *)o)->core;
}

enum { ARM_OK = 0, ARM_CLOSED, ARM_BUSY, ARM_NOMEM, ARM_THREAD };

static PyObject *
Reactor_arm(Reactor *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError, "arm() takes exactly 3 arguments (%zd given)", nargs);
        return NULL;
    }
    uint32_t slot, expected;
    if (parse_slot(self, args[0], &slot) < 0)
        return NULL;
    if (get_u32(args[1], "expected", &expected) < 0)
        return NULL;
    qcore *q = queue_core(self, args[2], "queue");
    if (q == NULL)
        return NULL;
    int err = ARM_OK, thread_err = 0;

    reactor_lock(self);
    if (qcore_is_closed(q))
        q = live_orphan_locked(self);
    if (self->closed) {
        err = ARM_CLOSED;
    }
    else if (self->index[slot] >= 0) {
        err = ARM_BUSY;
    }
    else if (q == NULL) {
        /* armed to a closed queue and no orphan queue: nobody could receive it */
        atomic_fetch_add_explicit(&self->dropped, 1, memory_order_relaxed);
    }
    else if (gen_reached(load_acquire(&self->words[slot]), expected)) {
        /* already there: push now, no thread hop */
        atomic_fetch_add_explicit(&self->completed, 1, memory_order_relaxed);
        int rc = push_or_orphan_locked(self, &q, slot, 0);
        if (rc != PUSH_OK) {
            atomic_fetch_sub_explicit(&self->completed, 1, memory_order_relaxed);
            if (rc == PUSH_CLOSED)
                atomic_fetch_add_explicit(&self->dropped, 1, memory_order_relaxed);
            else
                err = ARM_NOMEM;
        }
    }
    else {
        if (self->narmed == self->cap) {
            size_t nc = self->cap ? self->cap * 2 : 64;
            if (nc > self->nslots)
                nc = self->nslots;
            armed_t *p = realloc(self->armed, nc * sizeof(*p));
            if (p == NULL)
                err = ARM_NOMEM;
            else {
                self->armed = p;
                self->cap = nc;
            }
        }
        if (err == ARM_OK) {
            uint64_t t = now_ns();
            armed_t *e = &self->armed[self->narmed];
            e->slot = slot;
            e->expected = expected;
            e->q = q;
            e->arm_ns = t;
            e->stale_interval_ns = self->stale_ns;
            e->next_stale_ns = t + self->stale_ns;
            qcore_incref(q);
            self->index[slot] = (int32_t)self->narmed;
            self->narmed++;
            self->arm_seq++;
            if (!self->started) {
                /* lazy start; the thread must never take process signals */
                sigset_t all, old;
                sigfillset(&all);
                pthread_sigmask(SIG_SETMASK, &all, &old);
                thread_err = pthread_create(&self->thread, NULL, reactor_main, self);
                pthread_sigmask(SIG_SETMASK, &old, NULL);
                if (thread_err != 0) {
                    armed_remove_locked(self, self->narmed - 1);
                    qcore_decref(q);
                    err = ARM_THREAD;
                }
                else {
                    self->started = 1;
                }
            }
            else if (self->long_nap) {
                /* a long nap must not delay short work: wake the thread */
                self->long_nap = 0;
                atomic_fetch_add_explicit(&self->wakeups, 1, memory_order_relaxed);
                pthread_cond_signal(&self->cv);
            }
            else if (self->narmed == 1) {
                /* empty -> armed edge: wake the parked thread */
                pthread_cond_signal(&self->cv);
            }
        }
    }
    reactor_unlock(self);

    switch (err) {
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
    int was = 0;
    reactor_lock(self);
    int32_t i = self->index[slot];
    if (!self->closed && i >= 0) {
        qcore *q = self->armed[i].q;
        armed_remove_locked(self, (size_t)i);
        qcore_decref(q);
        was = 1;
    }
    reactor_unlock(self);
    return PyBool_FromLong(was);
}

static PyObject *
Reactor_set_orphan_queue(Reactor *self, PyObject *arg)
{
    qcore *q = NULL;
    if (arg != Py_None && (q = queue_core(self, arg, "the orphan queue")) == NULL)
        return NULL;
    if (q != NULL && qcore_is_closed(q)) {
        PyErr_SetString(PyExc_ValueError, "the orphan queue must be open, got a closed LoopQueue");
        return NULL;
    }
    reactor_lock(self);
    int closed = self->closed;
    if (!closed) {
        qcore *old = self->orphan;
        if (q != NULL)
            qcore_incref(q);
        self->orphan = q;
        if (old != NULL)
            qcore_decref(old);
    }
    reactor_unlock(self);
    if (closed && q != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "the Reactor is closed");
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *
Reactor_close(Reactor *self, PyObject *Py_UNUSED(ignored))
{
    Py_BEGIN_ALLOW_THREADS
    reactor_shutdown(self);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyObject *
Reactor_get_armed(Reactor *self, void *Py_UNUSED(closure))
{
    reactor_lock(self);
    size_t n = self->narmed;
    reactor_unlock(self);
    return PyLong_FromSize_t(n);
}

static PyObject *
Reactor_get_closed(Reactor *self, void *Py_UNUSED(closure))
{
    reactor_lock(self);
    int c = self->closed;
    reactor_unlock(self);
    return PyBool_FromLong(c);
}

static PyObject *
Reactor_get_wakeups(Reactor *self, void *Py_UNUSED(closure))
{
    return PyLong_FromUnsignedLongLong(
        atomic_load_explicit(&self->wakeups, memory_order_relaxed));
}

static PyObject *
Reactor_get_completed(Reactor *self, void *Py_UNUSED(closure))
{
    return PyLong_FromUnsignedLongLong(
        atomic_load_explicit(&self->completed, memory_order_relaxed));
}

static PyObject *
Reactor_get_stale_reports(Reactor *self, void *Py_UNUSED(closure))
{
    return PyLong_FromUnsignedLongLong(
        atomic_load_explicit(&self->stale_reports, memory_order_relaxed));
}

static PyObject *
Reactor_get_dropped(Reactor *self, void *Py_UNUSED(closure))
{
    return PyLong_FromUnsignedLongLong(
        atomic_load_explicit(&self->dropped, memory_order_relaxed));
}

static PyObject *
Reactor_get_scans(Reactor *self, void *Py_UNUSED(closure))
{
    return PyLong_FromUnsignedLongLong(atomic_load_explicit(&self->scans, memory_order_relaxed));
}

static PyObject *
Reactor_get_backoff_ns(Reactor *self, void *Py_UNUSED(closure))
{
    return PyLong_FromUnsignedLongLong(
        atomic_load_explicit(&self->backoff_ns, memory_order_relaxed));
}

static PyObject *
Reactor_get_parked(Reactor *self, void *Py_UNUSED(closure))
{
    return PyBool_FromLong(atomic_load_explicit(&self->parked, memory_order_acquire));
}

static PyObject *
Reactor_get_nslots(Reactor *self, void *Py_UNUSED(closure))
{
    return PyLong_FromUnsignedLong(self->nslots);
}

static PyMethodDef Reactor_methods[] = {
    {"arm", (PyCFunction)(void (*)(void))Reactor_arm, METH_FASTCALL,
     "arm(slot, expected, queue) -> None\n\n"
     "Watch slot until (int32)(word - expected) >= 0, then push it onto queue. Pushes at once "
     "if already reached. ValueError: slot out of range; RuntimeError: already armed or "
     "closed; TypeError: queue is not a LoopQueue."},
    {"set_orphan_queue", (PyCFunction)Reactor_set_orphan_queue, METH_O,
     "set_orphan_queue(queue) -> None\n\n"
     "Reports of slots armed to a closed queue go to queue instead (None: they are dropped "
     "and counted in dropped)."},
    {"disarm", (PyCFunction)Reactor_disarm, METH_O,
     "disarm(slot) -> bool\n\nStop watching slot without notifying; True if it was armed."},
    {"close", (PyCFunction)Reactor_close, METH_NOARGS,
     "close() -> None\n\nStop and join the thread (GIL released) and drop all armed slots; "
     "idempotent."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Reactor_getset[] = {
    {"armed", (getter)Reactor_get_armed, NULL, "number of armed slots", NULL},
    {"wakeups", (getter)Reactor_get_wakeups, NULL,
     "times an arm had to wake the thread (from parked, or from a long nap)", NULL},
    {"scans", (getter)Reactor_get_scans, NULL, "passes over the armed slots", NULL},
    {"backoff_ns", (getter)Reactor_get_backoff_ns, NULL,
     "the thread's current sleep between scans (0 while spinning or parked)", NULL},
    {"completed", (getter)Reactor_get_completed, NULL,
     "completions pushed (thread + immediate)", NULL},
    {"stale_reports", (getter)Reactor_get_stale_reports, NULL, "stale reports pushed", NULL},
    {"dropped", (getter)Reactor_get_dropped, NULL,
     "armed slots dropped because their queue was closed and no orphan queue was open", NULL},
    {"parked", (getter)Reactor_get_parked, NULL,
     "whether the thread is parked waiting for an arm (diagnostics/tests)", NULL},
    {"nslots", (getter)Reactor_get_nslots, NULL, "number of slots", NULL},
    {"closed", (getter)Reactor_get_closed, NULL, "whether close() was called", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot Reactor_slots[] = {
    {Py_tp_new, (void *)Reactor_new},
    {Py_tp_dealloc, (void *)Reactor_dealloc},
    {Py_tp_methods, Reactor_methods},
    {Py_tp_getset, Reactor_getset},
    {Py_tp_doc, (void *)"Reactor(address, nslots, *, stale_ns=2_000_000, "
                        "stale_max_ns=50_000_000, spin_ns=50_000, backoff_max_ns=200_000, "
                        "long_ns=10_000_000, long_backoff_max_ns=2_000_000)\n\n"
                        "Watches armed uint32 flag words of a host slab on one native thread."},
    {0, NULL},
};

static PyType_Spec Reactor_spec = {
    .name = "cuasync._reactor.Reactor",
    .basicsize = sizeof(Reactor),
    .itemsize = 0,
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = Reactor_slots,
};

/* ---------------------------------------------------------------------------- */
/* module functions                                                             */

static PyObject *
mod_spin_wait(PyObject *Py_UNUSED(m), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError, "spin_wait() takes exactly 3 arguments (%zd given)",
                     nargs);
        return NULL;
    }
    _Atomic uint32_t *p;
    uint32_t expected;
    long long budget;
    if (get_word_address(args[0], &p) < 0 || get_u32(args[1], "expected", &expected) < 0 ||
        get_i64(args[2], &budget) < 0)
        return NULL;
    if (budget < 0) {
        PyErr_SetString(PyExc_ValueError, "budget_ns must be >= 0");
        return NULL;
    }
    int reached = gen_reached(load_acquire(p), expected);
    if (!reached && budget > 0) {
        Py_BEGIN_ALLOW_THREADS
        uint64_t start = now_ns();
        for (;;) {
            for (int k = 0; k < 16 && !reached; k++) {
                cpu_relax();
                reached = gen_reached(load_acquire(p), expected);
            }
            if (reached || now_ns() - start >= (uint64_t)budget)
                break;
        }
        if (!reached)
            reached = gen_reached(load_acquire(p), expected);
        Py_END_ALLOW_THREADS
    }
    return PyBool_FromLong(reached);
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
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "store32() takes exactly 2 arguments (%zd given)", nargs);
        return NULL;
    }
    _Atomic uint32_t *p;
    uint32_t value;
    if (get_word_address(args[0], &p) < 0 || get_u32(args[1], "value", &value) < 0)
        return NULL;
    atomic_store_explicit(p, value, memory_order_release);
    Py_RETURN_NONE;
}

static PyObject *
mod_set_entry_points(PyObject *Py_UNUSED(m), PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"write_value32", "launch_kernel", NULL};
    unsigned long long wv = 0, lk = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|$O&O&:set_entry_points", kwlist, conv_u64,
                                     &wv, conv_u64, &lk))
        return NULL;
    atomic_store_explicit(&g_write_value32, (uintptr_t)wv, memory_order_release);
    atomic_store_explicit(&g_launch_kernel, (uintptr_t)lk, memory_order_release);
    Py_RETURN_NONE;
}

static PyObject *
mod_write_value32(PyObject *Py_UNUSED(m), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError, "write_value32() takes exactly 3 arguments (%zd given)",
                     nargs);
        return NULL;
    }
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
    Py_BEGIN_ALLOW_THREADS
    rc = ((pfn_write_value32)fp)((void *)(uintptr_t)stream, (CUdeviceptr)address, value, 0u);
    Py_END_ALLOW_THREADS
    return PyLong_FromLong(rc);
}

static PyObject *
mod_launch_and_write(PyObject *Py_UNUSED(m), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 12) {
        PyErr_Format(PyExc_TypeError,
                     "launch_and_write() takes exactly 12 arguments (%zd given)", nargs);
        return NULL;
    }
    unsigned long long function, stream, params, address;
    unsigned int gx, gy, gz, bx, by, bz, shmem;
    uint32_t value;
    if (get_u64(args[0], &function) < 0 || get_uint(args[1], "gx", &gx) < 0 ||
        get_uint(args[2], "gy", &gy) < 0 || get_uint(args[3], "gz", &gz) < 0 ||
        get_uint(args[4], "bx", &bx) < 0 || get_uint(args[5], "by", &by) < 0 ||
        get_uint(args[6], "bz", &bz) < 0 || get_uint(args[7], "shared_mem", &shmem) < 0 ||
        get_u64(args[8], &stream) < 0 || get_u64(args[9], &params) < 0 ||
        get_u64(args[10], &address) < 0 || get_u32(args[11], "value", &value) < 0)
        return NULL;

    uintptr_t lk = atomic_load_explicit(&g_launch_kernel, memory_order_acquire);
    uintptr_t wv = atomic_load_explicit(&g_write_value32, memory_order_acquire);
    if (lk == 0 || (address != 0 && wv == 0)) {
        PyErr_SetString(PyExc_RuntimeError,
                        lk == 0 ? "cuLaunchKernel entry point not set (call set_entry_points)"
                                : "cuStreamWriteValue32 entry point not set "
                                  "(call set_entry_points)");
        return NULL;
    }
    CUresult rc;
    Py_BEGIN_ALLOW_THREADS
    rc = ((pfn_launch_kernel)lk)((void *)(uintptr_t)function, gx, gy, gz, bx, by, bz, shmem,
                                 (void *)(uintptr_t)stream, (void **)(uintptr_t)params, NULL);
    if (rc == 0 && address != 0)
        rc = ((pfn_write_value32)wv)((void *)(uintptr_t)stream, (CUdeviceptr)address, value,
                                     0u);
    Py_END_ALLOW_THREADS
    return PyLong_FromLong(rc);
}

static PyMethodDef module_methods[] = {
    {"spin_wait", (PyCFunction)(void (*)(void))mod_spin_wait, METH_FASTCALL,
     "spin_wait(address, expected, budget_ns) -> bool\n\n"
     "Busy-wait (GIL released when budget_ns > 0) until the word reaches expected or the "
     "budget is spent. budget_ns == 0 checks once. address: a word of a live Reactor's slab."},
    {"load32", (PyCFunction)mod_load32, METH_O,
     "load32(address) -> int\n\nAcquire load of a word of a live Reactor's slab."},
    {"store32", (PyCFunction)(void (*)(void))mod_store32, METH_FASTCALL,
     "store32(address, value) -> None\n\nRelease store to a word of a live Reactor's slab."},
    {"set_entry_points", (PyCFunction)(void (*)(void))mod_set_entry_points,
     METH_VARARGS | METH_KEYWORDS,
     "set_entry_points(*, write_value32=0, launch_kernel=0) -> None\n\n"
     "Driver entry points from cuGetProcAddress; 0 clears. Both are replaced on every call."},
    {"write_value32", (PyCFunction)(void (*)(void))mod_write_value32, METH_FASTCALL,
     "write_value32(stream, address, value) -> CUresult\n\n"
     "cuStreamWriteValue32(stream, address, value, 0)."},
    {"launch_and_write", (PyCFunction)(void (*)(void))mod_launch_and_write, METH_FASTCALL,
     "launch_and_write(function, gx, gy, gz, bx, by, bz, shared_mem, stream, params, address, "
     "value) -> CUresult\n\n"
     "cuLaunchKernel, then (if address != 0 and the launch succeeded) cuStreamWriteValue32."},
    {NULL, NULL, 0, NULL},
};

/* ---------------------------------------------------------------------------- */
/* module definition (multi-phase init)                                         */

static int
module_exec(PyObject *m)
{
    modstate *st = (modstate *)PyModule_GetState(m);
    st->queue_type = (PyTypeObject *)PyType_FromModuleAndSpec(m, &LoopQueue_spec, NULL);
    if (st->queue_type == NULL)
        return -1;
    st->reactor_type = (PyTypeObject *)PyType_FromModuleAndSpec(m, &Reactor_spec, NULL);
    if (st->reactor_type == NULL)
        return -1;
    if (PyModule_AddObjectRef(m, "LoopQueue", (PyObject *)st->queue_type) < 0)
        return -1;
    if (PyModule_AddObjectRef(m, "Reactor", (PyObject *)st->reactor_type) < 0)
        return -1;
#ifdef CUASYNC_HAVE_EVENTFD
    if (PyModule_AddIntConstant(m, "HAVE_EVENTFD", 1) < 0)
        return -1;
#else
    if (PyModule_AddIntConstant(m, "HAVE_EVENTFD", 0) < 0)
        return -1;
#endif
    return 0;
}

static int
module_traverse(PyObject *m, visitproc visit, void *arg)
{
    modstate *st = (modstate *)PyModule_GetState(m);
    if (st != NULL) {
        Py_VISIT(st->queue_type);
        Py_VISIT(st->reactor_type);
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
#ifdef Py_mod_multiple_interpreters
    {Py_mod_multiple_interpreters, Py_MOD_PER_INTERPRETER_GIL_SUPPORTED},
#endif
#ifdef Py_mod_gil
    {Py_mod_gil, Py_MOD_GIL_NOT_USED},
#endif
    {0, NULL},
};

static struct PyModuleDef reactor_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "cuasync._reactor",
    .m_doc = "Native completion reactor of cuasync: watches pinned-host flag words written by "
             "cuStreamWriteValue32 and wakes asyncio loops through eventfds.",
    .m_size = sizeof(modstate),
    .m_methods = module_methods,
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
