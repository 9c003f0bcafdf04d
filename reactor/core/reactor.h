/*
 * The reactor proper of cuasync._reactor (reactor/core/; design notes: reactor/README.md):
 * what runs on its own threads or under its own mutexes, with no Python API.
 *
 *   reactor.c  the reactor: armed slots, the scan/spin/backoff/park thread, orphan
 *              routing, the memory-ordering argument.
 *   queue.c    queue cores: the completed/stale lists and eventfd behind a LoopQueue.
 *   submit.c   the submitter: the thread that makes queued launches and flag writes.
 *
 * Nothing under reactor/core includes Python.h, directly or through a header (a project
 * test checks it; the CPython types are in reactor/python/, module.h their shared
 * header), so the compiler enforces that nothing running on these threads or under
 * these mutexes calls the Python API. The slab registry's and the driver entry points'
 * declarations below are plain C, defined in reactor/python/driver.c.
 */
#ifndef CUASYNC_REACTOR_H
#define CUASYNC_REACTOR_H

/* first include of reactor.c and queue.c (Python.h, which comes first elsewhere, sets
 * the same): clock_gettime, pthread_setname_np, eventfd under -std=c11 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#ifdef __linux__
#define CUASYNC_HAVE_EVENTFD 1 /* else a non-blocking pipe */
#endif

_Static_assert(sizeof(_Atomic uint32_t) == sizeof(uint32_t), "atomic uint32 must be 4 bytes");

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

/* (int32_t)(word - expected) >= 0, without the implementation-defined conversion */
static inline int
gen_reached(uint32_t word, uint32_t expected)
{
    return (uint32_t)(word - expected) < 0x80000000u;
}

/* pairs with the release of cuStreamWriteValue32 (and of store32) */
static inline uint32_t
load_acquire(_Atomic uint32_t *p)
{
    return atomic_load_explicit(p, memory_order_acquire);
}

/* -- queue cores (queue.c) ------------------------------------------------------ */

typedef struct {
    uint32_t *v;
    size_t n, cap;
} u32vec;

void u32vec_free(u32vec *a);

typedef struct qcore qcore; /* shared by a LoopQueue and every entry armed to it */

qcore *qcore_new(void); /* NULL with errno set */
void qcore_incref(qcore *q);
void qcore_decref(qcore *q);
int qcore_is_closed(qcore *q);
size_t qcore_pending(qcore *q); /* lock-free */
int qcore_fileno(qcore *q);     /* -1 once closed */

enum { PUSH_OK = 0, PUSH_NOMEM, PUSH_CLOSED };

int qcore_push(qcore *q, uint32_t slot, int stale);

enum { TAKE_OK = 0, TAKE_CLOSED, TAKE_NOMEM };

typedef struct {
    uint32_t *v; /* nd completed entries, then ns stale ones */
    size_t nd, ns;
    uint64_t epoch;
    int owned; /* v was allocated by qcore_take_begin */
} qtake;

/* A drain in two halves around the building of its Python lists. */
int qcore_take_begin(qcore *q, uint32_t *buf, size_t cap, qtake *t);
int qcore_take_end(qcore *q, qtake *t, int delivered); /* 0: close() took them */
/* Close (idempotent) and move the pending entries out; qcore_untake puts them back. */
void qcore_close_take(qcore *q, u32vec *done, u32vec *stale);
void qcore_untake(qcore *q, u32vec *done, u32vec *stale);
void qcore_discard(qcore *q); /* close and drop the pending entries */

/* The host function of host-callback completions: pushes (uint32)data onto the queue
 * last given to hostsig_set (NULL: none; the signal is dropped). */
void hostsig_set(qcore *q); /* takes its own reference; releases the previous queue's */
void hostsig_fn(void *data);

/* -- the reactor (reactor.c) ---------------------------------------------------- */

typedef struct {
    uint64_t stale_ns, stale_max_ns, spin_ns, backoff_max_ns, long_ns, long_backoff_max_ns;
} reactor_params;

typedef struct armed_t armed_t;

typedef struct {
    /* immutable after reactor_init */
    _Atomic uint32_t *words;
    uint32_t nslots;
    reactor_params p;
    int sync_ok;

    /* protected by mu */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int32_t *index; /* slot -> position in armed[], -1 if not armed */
    armed_t *armed;
    size_t narmed, cap;
    uint64_t arm_seq;
    int stop, closed, started;
    int long_nap;  /* the thread waits on cv longer than backoff_max_ns: arm() wakes it */
    uint64_t nap_until; /* when that nap ends */
    qcore *orphan; /* receives reports of entries whose own queue is closed; may be NULL */
    qcore *stale_q; /* receives every stale report while open; NULL: each entry's own queue */
    pthread_t thread;

    pthread_mutex_t close_mu; /* serialises close() callers: each returns after the join */

    /* lock-free */
    atomic_int contenders; /* threads waiting for mu: the spinning thread yields to them */
    atomic_int parked;
    _Atomic uint64_t wakeups, completed, stale_reports, dropped, scans, backoff_ns;
} reactor;

enum { ARM_OK = 0, ARM_CLOSED, ARM_BUSY, ARM_NOMEM, ARM_THREAD };

int reactor_init(reactor *r, _Atomic uint32_t *words, uint32_t nslots,
                 const reactor_params *p); /* -1: out of memory */
void reactor_destroy(reactor *r);
void reactor_shutdown(reactor *r); /* stop and join the thread; idempotent */
/* quiet_until: a monotonic time (now_ns) before which the entry is not scanned for,
 * its loop's early wake watching it meanwhile; 0: at once. watched: that wake looks at
 * it before quiet_until (and arms it again if it has not landed then): a parked or
 * napping thread is not woken for it */
int reactor_arm(reactor *r, uint32_t slot, uint32_t expected, qcore *q, uint64_t quiet_until,
                int watched, int *thread_err);
int reactor_disarm(reactor *r, uint32_t slot);
int reactor_set_orphan(reactor *r, qcore *q); /* -1 once closed */
int reactor_set_stale_queue(reactor *r, qcore *q); /* -1 once closed */
size_t reactor_narmed(reactor *r);

/* -- driver entry points (driver.c sets them, submit.c calls them) --------------- */

/* the ABIs of cuda.h (no CUDA headers: the entry points come from cuGetProcAddress) */
typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef CUresult (*pfn_write_value32)(void *stream, CUdeviceptr addr, uint32_t value,
                                      unsigned int flags);
typedef CUresult (*pfn_launch_kernel)(void *f, unsigned int gx, unsigned int gy,
                                      unsigned int gz, unsigned int bx, unsigned int by,
                                      unsigned int bz, unsigned int shared_mem, void *stream,
                                      void **params, void **extra);
typedef CUresult (*pfn_memcpy_htod)(CUdeviceptr dst, const void *src, size_t nbytes,
                                    void *stream); /* cuMemcpyHtoDAsync_v2 */
typedef CUresult (*pfn_ctx_set_current)(void *ctx);
typedef CUresult (*pfn_stream_synchronize)(void *stream);

/* -- the submitter (submit.c) ----------------------------------------------------- */

enum { SUB_PARAMS_MAX = 16, SUB_BLOCK_MAX = 256 };

typedef struct {
    uintptr_t launch_kernel, write_value32, ctx_set_current, stream_synchronize;
} sub_entry;

/* One queued launch: its configuration, its packed parameters and its completion flag
 * (the slab word of slot, written with value). */
typedef struct {
    uintptr_t function, stream, context;
    unsigned int gx, gy, gz, bx, by, bz, shmem;
    uint32_t slot, value, nparams;
    uint16_t offsets[SUB_PARAMS_MAX]; /* of each parameter in block */
    _Alignas(16) unsigned char block[SUB_BLOCK_MAX];
} sub_rec;

typedef struct subcore subcore;

enum { SUB_OK = 0, SUB_FULL, SUB_CLOSED, SUB_THREAD };

subcore *subcore_new(_Atomic uint32_t *words, uint32_t nslots, uint32_t cap, uint64_t spin_ns,
                     const sub_entry *entry); /* NULL: out of memory */
/* Queue rec (its ticket, the count of records pushed before it, in *ticket); starts the
 * thread at the first push. */
int subcore_push(subcore *c, const sub_rec *rec, uint64_t *ticket, int *thread_err);
uint64_t subcore_pending(subcore *c); /* lock-free */
uint64_t subcore_done(subcore *c);    /* records launched (or failed) so far; lock-free */
void subcore_fence(subcore *c); /* blocks until every record pushed before it is launched */
int32_t subcore_status(subcore *c, uint32_t slot);
void subcore_counters(subcore *c, uint64_t *launched, uint64_t *failed, uint64_t *wakeups);
/* Stop once the queue is drained, waiting up to timeout_ns for the thread; 0: it was
 * still in the driver and is left to finish (and free the core) on its own. */
int subcore_close(subcore *c, uint64_t timeout_ns);
void subcore_retain(subcore *c);
void subcore_drop(subcore *c); /* a reference taken by subcore_new or subcore_retain */

/* -- live slabs (driver.c) ------------------------------------------------------ */

int slab_register(const void *owner, uintptr_t lo, uintptr_t hi); /* -1: out of memory */
void slab_unregister(const void *owner);

#endif
