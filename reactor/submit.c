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

struct subcore {
    /* immutable after subcore_new */
    _Atomic uint32_t *words;
    _Atomic int32_t *status;
    uint32_t nslots, cap;
    uint64_t spin_ns;
    sub_entry entry;

    pthread_mutex_t mu;
    pthread_cond_t work_cv, done_cv;
    sub_rec *ring;
    _Atomic uint64_t head; /* next record to launch: advanced by the thread alone, under mu */
    _Atomic uint64_t tail; /* next free record: advanced under mu, polled without it */
    int started, stop, exited, parked, fence_waiters;
    _Atomic int refs; /* the Python object, the running thread, a fence in use */
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
    if (pthread_mutex_init(&c->mu, NULL) != 0)
        goto fail;
    if (pthread_cond_init(&c->work_cv, NULL) != 0) {
        pthread_mutex_destroy(&c->mu);
        goto fail;
    }
    if (pthread_cond_init(&c->done_cv, NULL) != 0) {
        pthread_cond_destroy(&c->work_cv);
        pthread_mutex_destroy(&c->mu);
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
    atomic_fetch_add_explicit(&c->failed, 1, memory_order_relaxed);
    atomic_store_explicit(&c->status[r->slot], rc, memory_order_relaxed);
    atomic_store_explicit(&c->words[r->slot], r->value, memory_order_release);
}

/* Wait (mu held) until a record is queued or stop is set: spin for spin_ns with the
 * mutex released, then park.  Returns 0 when there is nothing more to do. */
static int
wait_for_work_locked(subcore *c)
{
    uint64_t idle_since = now_ns();
    uint64_t head = atomic_load_explicit(&c->head, memory_order_relaxed);
    while (head == atomic_load_explicit(&c->tail, memory_order_relaxed)) {
        if (c->stop)
            return 0;
        if (now_ns() - idle_since < c->spin_ns) {
            pthread_mutex_unlock(&c->mu);
            for (int k = 0; k < 64; k++) {
                if (atomic_load_explicit(&c->tail, memory_order_relaxed) != head)
                    break;
                cpu_relax();
            }
            pthread_mutex_lock(&c->mu);
            continue;
        }
        c->parked = 1;
        pthread_cond_wait(&c->work_cv, &c->mu);
        c->parked = 0;
        atomic_fetch_add_explicit(&c->wakeups, 1, memory_order_relaxed);
        idle_since = now_ns();
    }
    return 1;
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
    pthread_mutex_lock(&c->mu);
    while (wait_for_work_locked(c)) {
        uint64_t head = atomic_load_explicit(&c->head, memory_order_relaxed);
        sub_rec *r = &c->ring[head % c->cap];
        pthread_mutex_unlock(&c->mu);
        run_record(c, r, &current); /* the slot stays ours until head moves past it */
        pthread_mutex_lock(&c->mu);
        /* release: the driver calls above happen before a fence that sees head past it */
        atomic_store_explicit(&c->head, head + 1, memory_order_release);
        if (c->fence_waiters)
            pthread_cond_broadcast(&c->done_cv);
    }
    c->exited = 1;
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
    int err = pthread_create(&c->thread, NULL, sub_main, c);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (err != 0)
        return err;
    c->started = 1;
    subcore_retain(c);
    return 0;
}

int
subcore_push(subcore *c, const sub_rec *rec, uint64_t *ticket, int *thread_err)
{
    int rc = SUB_OK;
    pthread_mutex_lock(&c->mu);
    uint64_t tail = atomic_load_explicit(&c->tail, memory_order_relaxed);
    if (c->stop || c->exited) {
        rc = SUB_CLOSED;
    }
    else if (tail - atomic_load_explicit(&c->head, memory_order_relaxed) >= c->cap) {
        rc = SUB_FULL;
    }
    else if (!c->started && (*thread_err = start_locked(c)) != 0) {
        rc = SUB_THREAD;
    }
    else {
        c->ring[tail % c->cap] = *rec;
        *ticket = tail;
        atomic_store_explicit(&c->status[rec->slot], 0, memory_order_relaxed);
        atomic_store_explicit(&c->tail, tail + 1, memory_order_relaxed);
        if (c->parked)
            pthread_cond_signal(&c->work_cv);
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
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

void
subcore_fence(subcore *c)
{
    pthread_mutex_lock(&c->mu);
    uint64_t target = atomic_load_explicit(&c->tail, memory_order_relaxed);
    c->fence_waiters++;
    while (atomic_load_explicit(&c->head, memory_order_relaxed) < target && !c->exited)
        pthread_cond_wait(&c->done_cv, &c->mu);
    c->fence_waiters--;
    pthread_mutex_unlock(&c->mu);
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
    int was_started = c->started && !c->stop;
    c->stop = 1;
    pthread_cond_broadcast(&c->work_cv);
    int drained = 1;
    if (was_started) {
        struct timespec deadline;
        clock_gettime(CLOCK_REALTIME, &deadline);
        uint64_t ns = (uint64_t)deadline.tv_nsec + timeout_ns;
        deadline.tv_sec += (time_t)(ns / 1000000000u);
        deadline.tv_nsec = (long)(ns % 1000000000u);
        while (!c->exited) {
            if (pthread_cond_timedwait(&c->done_cv, &c->mu, &deadline) == ETIMEDOUT)
                break;
        }
        drained = c->exited;
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
