/*
 * The reactor of cuasync._reactor: armed slots, the thread that scans them, spins,
 * backs off and parks, and the routing of reports to loop queues (queue.c) or to the
 * orphan queue.  No Python API here (see reactor.h); design notes in README.md.
 *
 * Memory ordering, in short (README.md, "Memory ordering", argues it in full):
 * - cuStreamWriteValue32 (flags 0) fences before writing the flag, so the flag write
 *   is a release; store32 is a C11 release store.  The scan reads each flag with an
 *   acquire load, so everything written before the flag is visible once it is seen.
 * - The scan pushes under the queue mutex and drain() takes under it: unlock/lock is
 *   the release/acquire pair that carries this on to the loop.  The fd only wakes
 *   (edge-signalled; queue.c says why no wake-up is lost).
 * - Lock order: reactor mutex -> queue mutex.  No critical section calls Python, so a
 *   thread blocked on either mutex cannot deadlock against the GIL.
 */
#include "reactor.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>

#ifdef __linux__
#include <sys/prctl.h>
#endif

/* -- armed slots ------------------------------------------------------------------- */

struct armed_t {
    uint32_t slot, expected;
    qcore *q; /* holds a reference */
    uint64_t arm_ns, next_stale_ns, stale_interval_ns;
    uint64_t quiet_until_ns; /* not scanned for before this (an early wake watches it) */
};

static void
reactor_lock(reactor *r)
{
    atomic_fetch_add_explicit(&r->contenders, 1, memory_order_relaxed);
    pthread_mutex_lock(&r->mu);
    atomic_fetch_sub_explicit(&r->contenders, 1, memory_order_relaxed);
}

static void
reactor_unlock(reactor *r)
{
    pthread_mutex_unlock(&r->mu);
}

/* swap-with-last, and drop the entry's queue reference */
static void
armed_remove_locked(reactor *r, size_t i)
{
    qcore *q = r->armed[i].q;
    r->index[r->armed[i].slot] = -1;
    if (i != --r->narmed) {
        r->armed[i] = r->armed[r->narmed];
        r->index[r->armed[i].slot] = (int32_t)i;
    }
    qcore_decref(q);
}

static qcore *
live_orphan_locked(reactor *r)
{
    return r->orphan != NULL && !qcore_is_closed(r->orphan) ? r->orphan : NULL;
}

/* Push to *q, or to the orphan queue once *q turns out closed (updating *q).
 * PUSH_CLOSED: no open queue can take it. */
static int
push_or_orphan_locked(reactor *r, qcore **q, uint32_t slot, int stale)
{
    for (;;) {
        int rc = *q != NULL ? qcore_push(*q, slot, stale) : PUSH_CLOSED;
        if (rc != PUSH_CLOSED || *q == NULL)
            return rc;
        *q = *q == r->orphan ? NULL : live_orphan_locked(r);
    }
}

/* point e at q (the orphan queue), so that its later reports go there too */
static void
retarget_locked(armed_t *e, qcore *q)
{
    if (q != NULL && q != e->q) {
        qcore_incref(q);
        qcore_decref(e->q);
        e->q = q;
    }
}

/* Counters move before the push, so that a consumer who has drained an entry never
 * sees a counter that does not include it yet; a failed push takes it back. */
static int
report_locked(reactor *r, armed_t *e, int stale)
{
    _Atomic uint64_t *counter = stale ? &r->stale_reports : &r->completed;
    atomic_fetch_add_explicit(counter, 1, memory_order_relaxed);
    qcore *q = e->q;
    int rc = push_or_orphan_locked(r, &q, e->slot, stale);
    retarget_locked(e, q);
    if (rc != PUSH_OK)
        atomic_fetch_sub_explicit(counter, 1, memory_order_relaxed);
    return rc;
}

/* A stale report goes to the stale queue while one is set and open: whoever probes
 * streams for faults takes it there, and the entry's own queue (an event loop) is not
 * woken for work that is merely long.  Else, like a completion, to its own queue. */
static int
report_stale_locked(reactor *r, armed_t *e)
{
    qcore *q = r->stale_q;
    if (q == NULL || qcore_is_closed(q))
        return report_locked(r, e, 1);
    atomic_fetch_add_explicit(&r->stale_reports, 1, memory_order_relaxed);
    int rc = qcore_push(q, e->slot, 1);
    if (rc == PUSH_OK)
        return rc;
    atomic_fetch_sub_explicit(&r->stale_reports, 1, memory_order_relaxed);
    return rc == PUSH_CLOSED ? report_locked(r, e, 1) : rc; /* closed meanwhile */
}

typedef struct {
    size_t found;          /* completions pushed */
    uint64_t youngest_arm; /* latest arm time of the entries still armed */
    uint64_t next_stale;   /* their earliest stale deadline */
    uint64_t watch_from;   /* their earliest quiet_until_ns (0: one is watched now) */
} scan_t;

/* One pass over the armed entries.  Completed ones leave, and so do the ones no open
 * queue can receive any more (counted in dropped). */
static scan_t
scan_locked(reactor *r, uint64_t t)
{
    scan_t sc = {0, 0, UINT64_MAX, UINT64_MAX};
    atomic_fetch_add_explicit(&r->scans, 1, memory_order_relaxed);
    for (size_t i = 0; i < r->narmed;) {
        armed_t *e = &r->armed[i];
        int reached = gen_reached(load_acquire(&r->words[e->slot]), e->expected);
        int rc = PUSH_OK;
        if (reached) {
            rc = report_locked(r, e, 0);
        }
        else if (r->p.stale_ns && t >= e->next_stale_ns) {
            if ((rc = report_stale_locked(r, e)) == PUSH_OK) {
                uint64_t next = e->stale_interval_ns * 2;
                e->stale_interval_ns = next < r->p.stale_max_ns ? next : r->p.stale_max_ns;
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
            armed_remove_locked(r, i); /* armed[i] is now the former last entry */
            continue;
        }
        /* still armed (PUSH_NOMEM: retried next time) */
        if (e->arm_ns > sc.youngest_arm)
            sc.youngest_arm = e->arm_ns;
        if (r->p.stale_ns && e->next_stale_ns < sc.next_stale)
            sc.next_stale = e->next_stale_ns;
        if (e->quiet_until_ns < sc.watch_from)
            sc.watch_from = e->quiet_until_ns;
        i++;
    }
    return sc;
}

/* -- the thread -------------------------------------------------------------------- */

#define BACKOFF_START_NS 1000u
#define LONG_AGE_DIVISOR 16u

/* 1 us, doubling, up to a cap: backoff_max_ns while the youngest entry is younger
 * than long_ns (short work is seen within ~backoff_max_ns), then its age / 16 (a
 * report at most ~6% later than the work has run) up to long_backoff_max_ns. */
static uint64_t
next_backoff(const reactor *r, uint64_t backoff, uint64_t youngest_age)
{
    uint64_t cap = r->p.backoff_max_ns;
    if (youngest_age >= r->p.long_ns && youngest_age / LONG_AGE_DIVISOR > cap)
        cap = youngest_age / LONG_AGE_DIVISOR;
    if (cap > r->p.long_backoff_max_ns)
        cap = r->p.long_backoff_max_ns;
    backoff = backoff ? backoff * 2 : BACKOFF_START_NS;
    return backoff < cap ? backoff : cap;
}

static void
sleep_ns(uint64_t ns)
{
    struct timespec ts = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
    nanosleep(&ts, NULL); /* signals are blocked on this thread */
}

/* Wait on cv up to ns, mu held (released while waiting): arm() and close() wake it. */
static void
long_nap_locked(reactor *r, uint64_t ns)
{
    r->long_nap = 1;
    r->nap_until = now_ns() + ns; /* (ns is bounded: see QUIET_MAX_NS) */
#ifdef __APPLE__
    struct timespec rel = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
    pthread_cond_timedwait_relative_np(&r->cv, &r->mu, &rel);
#else
    uint64_t at = r->nap_until; /* cv runs on CLOCK_MONOTONIC (reactor_init) */
    struct timespec abs = {(time_t)(at / 1000000000ull), (long)(at % 1000000000ull)};
    pthread_cond_timedwait(&r->cv, &r->mu, &abs);
#endif
    r->long_nap = 0;
}

static void
park_locked(reactor *r)
{
    atomic_store_explicit(&r->backoff_ns, 0, memory_order_relaxed);
    atomic_store_explicit(&r->parked, 1, memory_order_release);
    while (r->narmed == 0 && !r->stop)
        pthread_cond_wait(&r->cv, &r->mu);
    atomic_store_explicit(&r->parked, 0, memory_order_release);
    if (!r->stop)
        atomic_fetch_add_explicit(&r->wakeups, 1, memory_order_relaxed);
}

static void *
reactor_main(void *arg)
{
    reactor *r = arg;
#if defined(__linux__)
    pthread_setname_np(pthread_self(), "cuasync-reactor"); /* <= 15 characters */
    /* the default 50 us timer slack would turn a 1 us nanosleep into ~60 us */
    prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
#elif defined(__APPLE__)
    pthread_setname_np("cuasync-reactor");
#endif
    uint64_t backoff = 0, last_progress, seen_seq;
    pthread_mutex_lock(&r->mu);
    /* born parked: being started by the first arm is a wake-up */
    atomic_fetch_add_explicit(&r->wakeups, 1, memory_order_relaxed);
    last_progress = now_ns();
    seen_seq = r->arm_seq;

    while (!r->stop) {
        uint64_t t = now_ns();
        if (r->arm_seq != seen_seq) { /* a new arm resets the spin window and backoff */
            seen_seq = r->arm_seq;
            last_progress = t;
            backoff = 0;
        }
        scan_t sc = {0, t, UINT64_MAX, 0};
        if (r->narmed)
            sc = scan_locked(r, t);
        if (sc.found) {
            last_progress = t;
            backoff = 0;
        }
        /* every entry left is watched by its loop's early wake until watch_from: no
         * spin and no scan before then (nor past the next stale report) */
        int quiet = r->narmed && sc.watch_from > t;
        int spinning = !quiet && t - last_progress < r->p.spin_ns;
        if (r->narmed == 0 && !spinning) {
            /* Park only after the spin window, so that a back-to-back await loop does
             * not pay a futex wake-up per await. */
            park_locked(r);
            backoff = 0;
            last_progress = now_ns();
            seen_seq = r->arm_seq;
            continue;
        }
        uint64_t nap = 0;
        if (quiet) {
            backoff = 0;
            nap = sc.watch_from - t;
        }
        else if (!spinning) { /* armed but idle: back off */
            backoff = next_backoff(r, backoff, t > sc.youngest_arm ? t - sc.youngest_arm : 0);
            nap = backoff;
        }
        if (nap && sc.next_stale > t && sc.next_stale - t < nap)
            nap = sc.next_stale - t; /* never past the next stale report */
        atomic_store_explicit(&r->backoff_ns, nap, memory_order_relaxed);
        if (nap > r->p.backoff_max_ns) {
            long_nap_locked(r, nap); /* Python threads had the mutex meanwhile */
            continue;
        }
        pthread_mutex_unlock(&r->mu);
        if (spinning)
            for (int k = 0; k < 8; k++)
                cpu_relax();
        else if (nap)
            sleep_ns(nap);
        else
            sched_yield();
        /* let threads blocked in arm()/disarm() take the mutex first */
        for (int k = 0; k < 100000 && atomic_load_explicit(&r->contenders, memory_order_relaxed);
             k++)
            cpu_relax();
        pthread_mutex_lock(&r->mu);
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

/* -- the reactor ------------------------------------------------------------------- */

int
reactor_init(reactor *r, _Atomic uint32_t *words, uint32_t nslots, const reactor_params *p)
{
    r->words = words;
    r->nslots = nslots;
    r->p = *p;
    if (r->p.stale_max_ns < r->p.stale_ns)
        r->p.stale_max_ns = r->p.stale_ns;
    if (r->p.long_backoff_max_ns < r->p.backoff_max_ns)
        r->p.long_backoff_max_ns = r->p.backoff_max_ns;
    if ((r->index = malloc(nslots * sizeof(int32_t))) == NULL)
        return -1;
    memset(r->index, 0xFF, nslots * sizeof(int32_t)); /* all -1 */
    pthread_condattr_t attr;
    if (pthread_condattr_init(&attr) != 0)
        return -1;
#ifndef __APPLE__
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC); /* long naps use now_ns() */
#endif
    int ok = pthread_cond_init(&r->cv, &attr) == 0;
    pthread_condattr_destroy(&attr);
    if (ok && pthread_mutex_init(&r->mu, NULL) != 0) {
        pthread_cond_destroy(&r->cv);
        ok = 0;
    }
    if (ok && pthread_mutex_init(&r->close_mu, NULL) != 0) {
        pthread_mutex_destroy(&r->mu);
        pthread_cond_destroy(&r->cv);
        ok = 0;
    }
    r->sync_ok = ok;
    return ok ? 0 : -1;
}

/* Stop and join the thread, then release every entry.  Concurrent callers return
 * only after the first has finished. */
void
reactor_shutdown(reactor *r)
{
    if (!r->sync_ok)
        return;
    pthread_mutex_lock(&r->close_mu);
    reactor_lock(r);
    int first = !r->closed, join = first && r->started;
    r->closed = r->stop = 1;
    pthread_cond_broadcast(&r->cv);
    reactor_unlock(r);
    if (join)
        pthread_join(r->thread, NULL); /* never needs the GIL: fine to hold it here */
    if (first) {
        reactor_lock(r);
        while (r->narmed)
            armed_remove_locked(r, r->narmed - 1);
        if (r->orphan != NULL)
            qcore_decref(r->orphan);
        if (r->stale_q != NULL)
            qcore_decref(r->stale_q);
        r->orphan = r->stale_q = NULL;
        reactor_unlock(r);
    }
    pthread_mutex_unlock(&r->close_mu);
}

void
reactor_destroy(reactor *r)
{
    reactor_shutdown(r);
    if (r->sync_ok) {
        pthread_mutex_destroy(&r->close_mu);
        pthread_cond_destroy(&r->cv);
        pthread_mutex_destroy(&r->mu);
    }
    free(r->armed);
    free(r->index);
}

/* a new entry at the end of armed[]; -1: out of memory */
static int
armed_append_locked(reactor *r, uint32_t slot, uint32_t expected, qcore *q, uint64_t quiet_until)
{
    if (r->narmed == r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 64;
        armed_t *p = realloc(r->armed, (cap < r->nslots ? cap : r->nslots) * sizeof(*p));
        if (p == NULL)
            return -1;
        r->armed = p;
        r->cap = cap < r->nslots ? cap : r->nslots;
    }
    uint64_t t = now_ns();
    r->armed[r->narmed] =
        (armed_t){slot, expected, q, t, t + r->p.stale_ns, r->p.stale_ns, quiet_until};
    qcore_incref(q);
    r->index[slot] = (int32_t)r->narmed++;
    if (quiet_until <= t) /* a quiet entry opens no spin window */
        r->arm_seq++;
    return 0;
}

/* Start the thread lazily, or wake it if it is parked, or in a long nap that ends
 * after quiet_until (the time the new entry wants watching from; 0: now); not for a
 * watched entry (its loop looks at it before quiet_until, and arms it again, waking the
 * thread, if it has not landed then): a thread parked or napping stays so. */
static int
wake_locked(reactor *r, uint64_t quiet_until, int watched)
{
    if (!r->started) {
        sigset_t all, old; /* the thread must never take process signals */
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        int err = pthread_create(&r->thread, NULL, reactor_main, r);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        r->started = err == 0;
        return err;
    }
    if (watched)
        return 0;
    if (r->long_nap && quiet_until < r->nap_until) { /* it must not delay short work */
        r->long_nap = 0;
        atomic_fetch_add_explicit(&r->wakeups, 1, memory_order_relaxed);
        pthread_cond_signal(&r->cv);
    }
    else if (atomic_load_explicit(&r->parked, memory_order_relaxed)) {
        /* (parked with nothing armed, or with watched entries only) */
        pthread_cond_signal(&r->cv);
    }
    return 0;
}

/* The furthest ahead an arm may be quiet (a later time is taken as this): keeps every
 * nap's end within the clock's range. */
#define QUIET_MAX_NS 60000000000ull

int
reactor_arm(reactor *r, uint32_t slot, uint32_t expected, qcore *q, uint64_t quiet_until,
            int watched, int *thread_err)
{
    int err = ARM_OK;
    if (quiet_until) {
        uint64_t latest = now_ns() + QUIET_MAX_NS;
        if (quiet_until > latest)
            quiet_until = latest;
    }
    reactor_lock(r);
    if (qcore_is_closed(q)) {
        q = live_orphan_locked(r);
        watched = 0; /* (no loop's wake looks at what the orphan queue receives) */
    }
    if (r->closed)
        err = ARM_CLOSED;
    else if (r->index[slot] >= 0)
        err = ARM_BUSY;
    else if (q == NULL) /* a closed queue and no orphan queue: nobody could receive it */
        atomic_fetch_add_explicit(&r->dropped, 1, memory_order_relaxed);
    else if (gen_reached(load_acquire(&r->words[slot]), expected)) {
        /* already there: push now, no thread hop */
        atomic_fetch_add_explicit(&r->completed, 1, memory_order_relaxed);
        int rc = push_or_orphan_locked(r, &q, slot, 0);
        if (rc != PUSH_OK)
            atomic_fetch_sub_explicit(&r->completed, 1, memory_order_relaxed);
        if (rc == PUSH_CLOSED)
            atomic_fetch_add_explicit(&r->dropped, 1, memory_order_relaxed);
        err = rc == PUSH_NOMEM ? ARM_NOMEM : ARM_OK;
    }
    else if (armed_append_locked(r, slot, expected, q, quiet_until) < 0)
        err = ARM_NOMEM;
    else if ((*thread_err = wake_locked(r, quiet_until, watched && quiet_until)) != 0) {
        armed_remove_locked(r, r->narmed - 1);
        err = ARM_THREAD;
    }
    reactor_unlock(r);
    return err;
}

int
reactor_disarm(reactor *r, uint32_t slot)
{
    reactor_lock(r);
    int32_t i = r->index[slot];
    if (i >= 0)
        armed_remove_locked(r, (size_t)i);
    reactor_unlock(r);
    return i >= 0;
}

/* *field = q, holding a reference to q and dropping the old one; -1 once closed */
static int
set_queue_field(reactor *r, qcore **field, qcore *q)
{
    reactor_lock(r);
    int closed = r->closed;
    if (!closed) {
        qcore *old = *field;
        if (q != NULL)
            qcore_incref(q);
        *field = q;
        if (old != NULL)
            qcore_decref(old);
    }
    reactor_unlock(r);
    return closed ? -1 : 0;
}

int
reactor_set_orphan(reactor *r, qcore *q)
{
    return set_queue_field(r, &r->orphan, q);
}

int
reactor_set_stale_queue(reactor *r, qcore *q)
{
    return set_queue_field(r, &r->stale_q, q);
}

size_t
reactor_narmed(reactor *r)
{
    reactor_lock(r);
    size_t n = r->narmed;
    reactor_unlock(r);
    return n;
}
