/*
 * The submitter of cuasync._reactor: a native thread that makes the driver calls of
 * queued kernel launches (cuLaunchKernel, then the completion flag's
 * cuStreamWriteValue32), so that an event loop submitting a burst of launches spends
 * none of their host time in the driver.  No Python API here (see reactor.h); design
 * notes in README.md, "The submitter".
 *
 * - Records are launched in the order they were pushed (one FIFO for every stream), so
 *   stream order is push order.  Python pushes under its execution lock and fences
 *   (waits for every record pushed so far) before any other driver call.
 * - A launch that fails never writes its flag from the device: the thread stores the
 *   CUresult in the slot's status word, then writes the flag itself (a release store),
 *   so whoever waits on the flag wakes and reads the status (acquire on the flag).  A
 *   flag write that fails after its launch was enqueued first synchronizes the stream:
 *   the flag never says "done" before the work is.
 * - The core lives on the heap, shared by the Python object and the thread; the last
 *   to let go frees it, so a thread still stuck in the driver at close() is detached
 *   instead of joined.
 */
#include "reactor.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#ifdef __linux__
#include <sys/prctl.h>
#endif

/* A fence spins this long for the queue before it waits on a condition variable. */
#define FENCE_SPIN_NS 20000u
/* A push that finds close() under way waits this long, at most, to learn whether the
 * thread made its record. */
#define CLOSE_RACE_NS 100000000u

struct subcore {
    /* immutable after subcore_new */
    _Atomic uint32_t *words;
    _Atomic int32_t *status;
    uint32_t nslots, cap;
    uint64_t spin_ns;
    sub_entry entry;

    /* The ring is single-consumer (the thread) and lock-free on both hot paths: a push
     * writes its record and publishes it with a release store of tail; the thread
     * acquire-loads tail, makes the record's calls, and release-stores head.  The
     * producers are serialized by pmu (cuasync pushes under its execution lock anyway,
     * so it is uncontended); mu and the condition variables serve only parking (the
     * thread, and fences that wait), starting and stopping. */
    pthread_mutex_t pmu;
    pthread_mutex_t mu;
    pthread_cond_t work_cv, done_cv;
    sub_rec *ring;
    _Atomic uint64_t head; /* next record to launch: stored by the thread alone */
    _Atomic uint64_t tail; /* next free record: stored by a producer under pmu */
    _Atomic int started, stop, exited;
    _Atomic int parked;        /* the thread waits on work_cv (or is about to) */
    _Atomic int fence_waiters; /* fences waiting on done_cv (or about to) */
    _Atomic int refs;          /* the Python object, the running thread, a fence in use */
    pthread_t thread;

    _Atomic uint64_t launched, failed, wakeups;
};

subcore *
subcore_new(_Atomic uint32_t *words, uint32_t nslots, uint32_t cap, uint64_t spin_ns,
            const sub_entry *entry)
{
    subcore *c = calloc(1, sizeof *c);
    if (c == NULL)
        return NULL;
    c->ring = calloc(cap, sizeof *c->ring);
    c->status = calloc(nslots, sizeof *c->status);
    if (c->ring == NULL || c->status == NULL)
        goto fail;
    if (pthread_mutex_init(&c->pmu, NULL) != 0)
        goto fail;
    if (pthread_mutex_init(&c->mu, NULL) != 0) {
        pthread_mutex_destroy(&c->pmu);
        goto fail;
    }
    if (pthread_cond_init(&c->work_cv, NULL) != 0) {
        pthread_mutex_destroy(&c->mu);
        pthread_mutex_destroy(&c->pmu);
        goto fail;
    }
    if (pthread_cond_init(&c->done_cv, NULL) != 0) {
        pthread_cond_destroy(&c->work_cv);
        pthread_mutex_destroy(&c->mu);
        pthread_mutex_destroy(&c->pmu);
        goto fail;
    }
    c->words = words;
    c->nslots = nslots;
    c->cap = cap;
    c->spin_ns = spin_ns;
    c->entry = *entry;
    atomic_init(&c->refs, 1);
    return c;
fail:
    free(c->ring);
    free((void *)c->status);
    free(c);
    return NULL;
}

static void
subcore_free(subcore *c)
{
    pthread_cond_destroy(&c->done_cv);
    pthread_cond_destroy(&c->work_cv);
    pthread_mutex_destroy(&c->mu);
    pthread_mutex_destroy(&c->pmu);
    free(c->ring);
    free((void *)c->status);
    free(c);
}

void
subcore_retain(subcore *c)
{
    atomic_fetch_add_explicit(&c->refs, 1, memory_order_relaxed);
}

/* Drop one reference; the last frees the core. */
static void
subcore_release(subcore *c)
{
    if (atomic_fetch_sub_explicit(&c->refs, 1, memory_order_acq_rel) == 1)
        subcore_free(c);
}

/* The driver calls of one record (no lock held). */
static void
run_record(subcore *c, const sub_rec *r, uintptr_t *current)
{
    CUresult rc = 0;
    if (r->context != *current) {
        rc = ((pfn_ctx_set_current)c->entry.ctx_set_current)((void *)r->context);
        *current = rc == 0 ? r->context : 0;
    }
    if (rc == 0) {
        void *slots[SUB_PARAMS_MAX];
        for (uint32_t i = 0; i < r->nparams; i++)
            slots[i] = (void *)(r->block + r->offsets[i]);
        rc = ((pfn_launch_kernel)c->entry.launch_kernel)(
            (void *)r->function, r->gx, r->gy, r->gz, r->bx, r->by, r->bz, r->shmem,
            (void *)r->stream, r->nparams ? slots : NULL, NULL);
    }
    if (rc == 0) {
        CUresult w = ((pfn_write_value32)c->entry.write_value32)(
            (void *)r->stream, (CUdeviceptr)(uintptr_t)(c->words + r->slot), r->value, 0u);
        if (w == 0) {
            atomic_fetch_add_explicit(&c->launched, 1, memory_order_relaxed);
            return;
        }
        /* the launch is enqueued: the flag may say "done" only once the stream is */
        ((pfn_stream_synchronize)c->entry.stream_synchronize)((void *)r->stream);
        rc = -w;
    }
    else {
        /* no launch, but the stream's earlier work may still run: the flag says "done"
         * only once it has (the stream counts as completed up to this record, and other
         * streams then order nothing after it) */
        ((pfn_stream_synchronize)c->entry.stream_synchronize)((void *)r->stream);
    }
    atomic_fetch_add_explicit(&c->failed, 1, memory_order_relaxed);
    atomic_store_explicit(&c->status[r->slot], rc, memory_order_relaxed);
    atomic_store_explicit(&c->words[r->slot], r->value, memory_order_release);
}

/* Wait until a record is queued (1) or stop is set with nothing queued (0): spin for
 * spin_ns without any lock, then park on work_cv.  Parking is a handshake with push:
 * the thread stores parked and then loads tail, push stores tail and then loads parked
 * (all sequentially consistent), so at least one of them sees the other's store: the
 * thread does not sleep on a record, or push signals it (under mu, which the thread
 * holds from before its store of parked until it waits). */
static int
wait_for_work(subcore *c, uint64_t head)
{
    uint64_t idle_since = now_ns();
    for (;;) {
        for (int k = 0; k < 64; k++) {
            if (atomic_load_explicit(&c->tail, memory_order_acquire) != head)
                return 1;
            cpu_relax();
        }
        /* (sequentially consistent, as push's store of tail and load of stop: either
         * the thread sees a record pushed before close, or the push sees stop) */
        if (atomic_load(&c->stop))
            return atomic_load(&c->tail) != head;
        if (now_ns() - idle_since < c->spin_ns)
            continue;
        pthread_mutex_lock(&c->mu);
        atomic_store(&c->parked, 1);
        while (atomic_load(&c->tail) == head && !atomic_load(&c->stop))
            pthread_cond_wait(&c->work_cv, &c->mu);
        atomic_store(&c->parked, 0);
        pthread_mutex_unlock(&c->mu);
        atomic_fetch_add_explicit(&c->wakeups, 1, memory_order_relaxed);
        idle_since = now_ns();
    }
}

static void *
sub_main(void *arg)
{
    subcore *c = arg;
#if defined(__linux__)
    pthread_setname_np(pthread_self(), "cuasync-submit"); /* <= 15 characters */
#elif defined(__APPLE__)
    pthread_setname_np("cuasync-submit");
#endif
    uintptr_t current = 0; /* the context this thread made current, 0: unknown */
    uint64_t head = atomic_load_explicit(&c->head, memory_order_relaxed);
    while (wait_for_work(c, head)) {
        uint64_t tail = atomic_load_explicit(&c->tail, memory_order_acquire);
        for (; head < tail; head++) {
            run_record(c, &c->ring[head % c->cap], &current); /* ours until head moves */
            /* release: the driver calls above happen before whatever sees head past the
             * record (a fence, then the caller's next driver call; a push reusing it) */
            atomic_store(&c->head, head + 1);
            if (atomic_load(&c->fence_waiters)) {
                pthread_mutex_lock(&c->mu);
                pthread_cond_broadcast(&c->done_cv);
                pthread_mutex_unlock(&c->mu);
            }
        }
    }
    pthread_mutex_lock(&c->mu);
    atomic_store(&c->exited, 1);
    pthread_cond_broadcast(&c->done_cv);
    pthread_mutex_unlock(&c->mu);
    subcore_release(c);
    return NULL;
}

/* Start the thread (mu held): all signals blocked on it. */
static int
start_locked(subcore *c)
{
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    subcore_retain(c); /* the thread's: taken before it can run and let go */
    int err = pthread_create(&c->thread, NULL, sub_main, c);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (err != 0) {
        subcore_release(c);
        return err;
    }
    atomic_store(&c->started, 1);
    return 0;
}

int
subcore_push(subcore *c, const sub_rec *rec, uint64_t *ticket, int *thread_err)
{
    if (!atomic_load_explicit(&c->started, memory_order_acquire)) {
        int rc = SUB_OK;
        pthread_mutex_lock(&c->mu);
        if (atomic_load(&c->stop) || atomic_load(&c->exited))
            rc = SUB_CLOSED;
        else if (!atomic_load(&c->started) && (*thread_err = start_locked(c)) != 0)
            rc = SUB_THREAD;
        pthread_mutex_unlock(&c->mu);
        if (rc != SUB_OK)
            return rc;
    }
    if (atomic_load_explicit(&c->stop, memory_order_acquire))
        return SUB_CLOSED;
    pthread_mutex_lock(&c->pmu);
    uint64_t tail = atomic_load_explicit(&c->tail, memory_order_relaxed);
    /* acquire: the thread is done with the record it last moved head past */
    if (tail - atomic_load_explicit(&c->head, memory_order_acquire) >= c->cap) {
        pthread_mutex_unlock(&c->pmu);
        return SUB_FULL;
    }
    c->ring[tail % c->cap] = *rec;
    atomic_store_explicit(&c->status[rec->slot], 0, memory_order_relaxed);
    atomic_store(&c->tail, tail + 1); /* publishes the record (seq_cst: see wait_for_work) */
    pthread_mutex_unlock(&c->pmu);
    *ticket = tail;
    if (atomic_load(&c->parked)) {
        pthread_mutex_lock(&c->mu);
        pthread_cond_signal(&c->work_cv);
        pthread_mutex_unlock(&c->mu);
    }
    if (atomic_load(&c->stop)) {
        /* close() raced with this push: the thread either makes the record (it drains
         * what it sees queued before it exits) or exits without seeing it. Waited for
         * CLOSE_RACE_NS at most (a thread close() left stuck in the driver may never
         * come back): then the record counts as refused, and if that thread makes it
         * after all, its flag write lands on a slot whose generation has moved on. */
        uint64_t start = now_ns();
        while (atomic_load(&c->head) <= tail && !atomic_load(&c->exited) &&
               now_ns() - start < CLOSE_RACE_NS)
            cpu_relax();
        if (atomic_load(&c->head) <= tail)
            return SUB_CLOSED;
    }
    return SUB_OK;
}

uint64_t
subcore_pending(subcore *c)
{
    /* lock-free; tail first: never more than was pushed, never less than is left of what
     * was pushed before the call */
    uint64_t tail = atomic_load_explicit(&c->tail, memory_order_acquire);
    return tail - atomic_load_explicit(&c->head, memory_order_acquire);
}

uint64_t
subcore_done(subcore *c)
{
    return atomic_load_explicit(&c->head, memory_order_acquire);
}

/* Spin briefly (the queue is usually a few launches deep), then wait on done_cv: the
 * same handshake as parking, with fence_waiters and head. */
void
subcore_fence(subcore *c)
{
    uint64_t target = atomic_load_explicit(&c->tail, memory_order_acquire);
    uint64_t start = now_ns();
    while (atomic_load_explicit(&c->head, memory_order_acquire) < target) {
        if (atomic_load_explicit(&c->exited, memory_order_acquire) ||
            !atomic_load_explicit(&c->started, memory_order_acquire))
            return;
        if (now_ns() - start >= FENCE_SPIN_NS) {
            pthread_mutex_lock(&c->mu);
            atomic_fetch_add(&c->fence_waiters, 1);
            while (atomic_load(&c->head) < target && !atomic_load(&c->exited))
                pthread_cond_wait(&c->done_cv, &c->mu);
            atomic_fetch_sub(&c->fence_waiters, 1);
            pthread_mutex_unlock(&c->mu);
            return;
        }
        for (int k = 0; k < 16; k++)
            cpu_relax();
    }
}

int32_t
subcore_status(subcore *c, uint32_t slot)
{
    return atomic_load_explicit(&c->status[slot], memory_order_relaxed);
}

void
subcore_counters(subcore *c, uint64_t *launched, uint64_t *failed, uint64_t *wakeups)
{
    *launched = atomic_load_explicit(&c->launched, memory_order_relaxed);
    *failed = atomic_load_explicit(&c->failed, memory_order_relaxed);
    *wakeups = atomic_load_explicit(&c->wakeups, memory_order_relaxed);
}

int
subcore_close(subcore *c, uint64_t timeout_ns)
{
    pthread_mutex_lock(&c->mu);
    int was_started = atomic_load(&c->started) && !atomic_load(&c->stop);
    atomic_store(&c->stop, 1);
    pthread_cond_broadcast(&c->work_cv);
    int drained = 1;
    if (was_started) {
        struct timespec deadline;
        clock_gettime(CLOCK_REALTIME, &deadline);
        uint64_t ns = (uint64_t)deadline.tv_nsec + timeout_ns;
        deadline.tv_sec += (time_t)(ns / 1000000000u);
        deadline.tv_nsec = (long)(ns % 1000000000u);
        while (!atomic_load(&c->exited)) {
            if (pthread_cond_timedwait(&c->done_cv, &c->mu, &deadline) == ETIMEDOUT)
                break;
        }
        drained = atomic_load(&c->exited);
    }
    pthread_mutex_unlock(&c->mu);
    if (was_started) {
        if (drained)
            pthread_join(c->thread, NULL); /* it has exited: at once */
        else
            pthread_detach(c->thread); /* stuck in the driver: it frees the core itself */
    }
    return drained;
}

void
subcore_drop(subcore *c)
{
    subcore_release(c);
}
