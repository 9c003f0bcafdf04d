/*
 * Queue cores of cuasync._reactor: what a LoopQueue and every entry armed to it share.
 * A mutex, two growable arrays (completed and stale slot ids) and an eventfd (a
 * non-blocking pipe off Linux) that wakes the event loop.  No Python API here.
 *
 * Ordering (README.md, "Memory ordering"): the reactor pushes under the mutex and a
 * drain takes under it, so unlock/lock hands the flag's acquire on to the loop; the fd
 * only wakes.  A push signals on the empty -> non-empty edge.  A drain clears the fd
 * FIRST and THEN takes, in one critical section, and signals again for whatever it
 * leaves behind: an entry is never left queued without a pending wake-up.
 */
#include "reactor.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef CUASYNC_HAVE_EVENTFD
#include <sys/eventfd.h>
#endif

struct qcore {
    atomic_size_t refs;
    pthread_mutex_t mu;
    int rfd, wfd;      /* eventfd: rfd == wfd; otherwise a pipe. -1 once closed */
    atomic_int closed; /* written under mu; read lock-free by the scan */
    int draining;      /* a drain is between its two halves */
    uint64_t epoch;    /* bumped by close: a drain that straddles it hands nothing out */
    u32vec done, stale;
    atomic_size_t npending; /* done.n + stale.n, for lock-free reads */
};

void
u32vec_free(u32vec *a)
{
    free(a->v);
    *a = (u32vec){NULL, 0, 0};
}

static int
u32vec_push(u32vec *a, uint32_t x)
{
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 16;
        uint32_t *p = realloc(a->v, cap * sizeof(*p));
        if (p == NULL)
            return -1;
        a->v = p;
        a->cap = cap;
    }
    a->v[a->n++] = x;
    return 0;
}

static void
u32vec_drop_front(u32vec *a, size_t n)
{
    if (n == 0)
        return; /* a->v may be NULL: no pointer arithmetic or memmove on it */
    memmove(a->v, a->v + n, (a->n - n) * sizeof(uint32_t));
    a->n -= n;
}

static void
close_fds_locked(qcore *q)
{
    if (q->rfd >= 0)
        close(q->rfd);
    if (q->wfd >= 0 && q->wfd != q->rfd)
        close(q->wfd);
    q->rfd = q->wfd = -1;
}

static int
open_fds(qcore *q)
{
#ifdef CUASYNC_HAVE_EVENTFD
    q->rfd = q->wfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    return q->rfd < 0 ? -1 : 0;
#else
    int fds[2];
    if (pipe(fds) < 0)
        return -1;
    for (int i = 0; i < 2; i++) {
        fcntl(fds[i], F_SETFL, fcntl(fds[i], F_GETFL) | O_NONBLOCK);
        fcntl(fds[i], F_SETFD, FD_CLOEXEC);
    }
    q->rfd = fds[0];
    q->wfd = fds[1];
    return 0;
#endif
}

qcore *
qcore_new(void)
{
    qcore *q = calloc(1, sizeof(*q));
    if (q == NULL)
        return NULL;
    q->rfd = q->wfd = -1;
    if (open_fds(q) < 0 || pthread_mutex_init(&q->mu, NULL) != 0) {
        int err = q->rfd < 0 ? errno : ENOMEM;
        close_fds_locked(q);
        free(q);
        errno = err;
        return NULL;
    }
    atomic_init(&q->refs, 1);
    atomic_init(&q->closed, 0);
    atomic_init(&q->npending, 0);
    return q;
}

void
qcore_incref(qcore *q)
{
    atomic_fetch_add_explicit(&q->refs, 1, memory_order_relaxed);
}

void
qcore_decref(qcore *q)
{
    if (atomic_fetch_sub_explicit(&q->refs, 1, memory_order_acq_rel) != 1)
        return;
    close_fds_locked(q); /* last reference: nobody else can touch it */
    u32vec_free(&q->done);
    u32vec_free(&q->stale);
    pthread_mutex_destroy(&q->mu);
    free(q);
}

int
qcore_is_closed(qcore *q)
{
    return atomic_load_explicit(&q->closed, memory_order_acquire);
}

size_t
qcore_pending(qcore *q)
{
    return atomic_load_explicit(&q->npending, memory_order_relaxed);
}

static void
update_pending_locked(qcore *q)
{
    atomic_store_explicit(&q->npending, q->done.n + q->stale.n, memory_order_relaxed);
}

int
qcore_fileno(qcore *q)
{
    pthread_mutex_lock(&q->mu);
    int fd = q->closed ? -1 : q->rfd;
    pthread_mutex_unlock(&q->mu);
    return fd;
}

static void
signal_fd_locked(qcore *q)
{
#ifdef CUASYNC_HAVE_EVENTFD
    uint64_t one = 1;
#else
    char one = 1;
#endif
    while (write(q->wfd, &one, sizeof one) < 0 && errno == EINTR) {
    }
    /* EAGAIN: a wake-up is already pending, which is all we need */
}

static void
clear_fd_locked(qcore *q)
{
    char buf[64]; /* an eventfd reads as one 8-byte counter; a pipe may hold more */
    ssize_t rc;
    do {
        rc = read(q->rfd, buf, sizeof buf);
    } while ((rc < 0 && errno == EINTR) || rc == (ssize_t)sizeof buf);
}

/* Push a completed (stale == 0) or stale slot id; signal on the empty -> non-empty
 * edge.  PUSH_CLOSED: the caller routes it to the orphan queue.  PUSH_NOMEM: the
 * scan retries next time. */
int
qcore_push(qcore *q, uint32_t slot, int stale)
{
    int rc = PUSH_CLOSED;
    pthread_mutex_lock(&q->mu);
    if (!q->closed) {
        int was_empty = q->done.n == 0 && q->stale.n == 0;
        rc = u32vec_push(stale ? &q->stale : &q->done, slot) < 0 ? PUSH_NOMEM : PUSH_OK;
        if (rc == PUSH_OK) {
            update_pending_locked(q);
            if (was_empty)
                signal_fd_locked(q);
        }
    }
    pthread_mutex_unlock(&q->mu);
    return rc;
}

/* First half of a drain: clear the fd, then copy the entries into buf (or a larger
 * allocation), leaving them queued until qcore_take_end.  An overlapping drain
 * takes nothing. */
int
qcore_take_begin(qcore *q, uint32_t *buf, size_t cap, qtake *t)
{
    *t = (qtake){buf, 0, 0, 0, 0};
    pthread_mutex_lock(&q->mu);
    int rc = q->closed ? TAKE_CLOSED : TAKE_OK;
    if (rc == TAKE_OK && !q->draining) {
        size_t n = q->done.n + q->stale.n;
        if (n > cap && (t->v = malloc(n * sizeof(uint32_t))) == NULL)
            rc = TAKE_NOMEM;
        else {
            t->owned = n > cap;
            clear_fd_locked(q); /* FIRST clear the wake-up, THEN take */
            t->nd = q->done.n;
            t->ns = q->stale.n;
            if (t->nd) /* an empty array may be NULL, which memcpy must not see */
                memcpy(t->v, q->done.v, t->nd * sizeof(uint32_t));
            if (t->ns)
                memcpy(t->v + t->nd, q->stale.v, t->ns * sizeof(uint32_t));
            t->epoch = q->epoch;
            q->draining = n > 0;
        }
    }
    pthread_mutex_unlock(&q->mu);
    return rc;
}

/* Second half: remove the entries if they were delivered, and signal again for what
 * is left (pushed meanwhile, or kept because building the lists failed).  Returns 0
 * if a close() took the entries meanwhile: they are its to return. */
int
qcore_take_end(qcore *q, qtake *t, int delivered)
{
    int ours = 1;
    if (t->nd + t->ns > 0) {
        pthread_mutex_lock(&q->mu);
        q->draining = 0;
        ours = q->epoch == t->epoch;
        if (ours && delivered) {
            u32vec_drop_front(&q->done, t->nd);
            u32vec_drop_front(&q->stale, t->ns);
            update_pending_locked(q);
        }
        if (ours && q->done.n + q->stale.n > 0)
            signal_fd_locked(q);
        pthread_mutex_unlock(&q->mu);
    }
    if (t->owned)
        free(t->v);
    return ours;
}

void
qcore_close_take(qcore *q, u32vec *done, u32vec *stale)
{
    pthread_mutex_lock(&q->mu);
    if (!q->closed) {
        atomic_store_explicit(&q->closed, 1, memory_order_release);
        q->epoch++;
        close_fds_locked(q);
    }
    *done = q->done; /* moved, not copied: nothing to allocate under the lock */
    *stale = q->stale;
    q->done = q->stale = (u32vec){NULL, 0, 0};
    update_pending_locked(q);
    pthread_mutex_unlock(&q->mu);
}

void
qcore_untake(qcore *q, u32vec *done, u32vec *stale)
{
    pthread_mutex_lock(&q->mu); /* closed: no push can have landed since the take */
    q->done = *done;
    q->stale = *stale;
    update_pending_locked(q);
    pthread_mutex_unlock(&q->mu);
}

void
qcore_discard(qcore *q)
{
    u32vec done, stale;
    qcore_close_take(q, &done, &stale);
    u32vec_free(&done);
    u32vec_free(&stale);
}

/* -- host signals -------------------------------------------------------------------
 * hostsig_fn is a CUDA host function (cuLaunchHostFunc, C ABI void fn(void *)): the
 * driver runs it on one of its own threads once the stream's prior work is done.  It
 * pushes its userData, a 32-bit id, onto the process's signal queue and returns: no
 * GIL, no CUDA call (the driver forbids both there; either can deadlock it).  The
 * mutex only guards the queue pointer against hostsig_set; qcore_push nests inside it
 * and never takes it, so the lock order is always g_sig_mu, then the queue's mutex. */
static pthread_mutex_t g_sig_mu = PTHREAD_MUTEX_INITIALIZER;
static qcore *g_sig = NULL;

void
hostsig_set(qcore *q)
{
    if (q != NULL)
        qcore_incref(q);
    pthread_mutex_lock(&g_sig_mu);
    qcore *old = g_sig;
    g_sig = q;
    pthread_mutex_unlock(&g_sig_mu);
    if (old != NULL)
        qcore_decref(old);
}

void
hostsig_fn(void *data)
{
    pthread_mutex_lock(&g_sig_mu);
    if (g_sig != NULL) {
        /* PUSH_NOMEM or PUSH_CLOSED lose the signal; the waiter is then finished by
         * the watcher's probe, which sees the stream idle (cuasync/_core/completion.py) */
        (void)qcore_push(g_sig, (uint32_t)(uintptr_t)data, 0);
    }
    pthread_mutex_unlock(&g_sig_mu);
}
