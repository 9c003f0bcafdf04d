/*
 * driver_floor: what each way of learning that a tiny kernel finished costs in C, with
 * no Python at all, so that cuasync's figures can be read against the floor of the
 * driver calls they make.  Built and run by driver_floor.py (gcc, dlopen of libcuda:
 * no CUDA headers needed).
 *
 *   ./driver_floor [N]        p50/p99 of each variant over N repetitions (default 20000)
 */
#define _GNU_SOURCE 1
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <pthread.h>
#include <stdatomic.h>

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext, *CUmodule, *CUfunction, *CUstream, *CUevent;
typedef unsigned long long CUdeviceptr;

static CUresult (*cuInit)(unsigned);
static CUresult (*cuDeviceGet)(CUdevice *, int);
static CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
static CUresult (*cuCtxSetCurrent)(CUcontext);
static CUresult (*cuCtxGetFlags)(unsigned *);
static CUresult (*cuModuleLoadData)(CUmodule *, const void *);
static CUresult (*cuModuleGetFunction)(CUfunction *, CUmodule, const char *);
static CUresult (*cuStreamCreate)(CUstream *, unsigned);
static CUresult (*cuStreamSynchronize)(CUstream);
static CUresult (*cuStreamQuery)(CUstream);
static CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                                  unsigned, unsigned, CUstream, void **, void **);
static CUresult (*cuStreamWriteValue32)(CUstream, CUdeviceptr, uint32_t, unsigned);
static CUresult (*cuMemHostAlloc)(void **, size_t, unsigned);
static CUresult (*cuMemHostGetDevicePointer)(CUdeviceptr *, void *, unsigned);
static CUresult (*cuEventCreate)(CUevent *, unsigned);
static CUresult (*cuEventRecord)(CUevent, CUstream);
static CUresult (*cuEventQuery)(CUevent);
static CUresult (*cuMemAlloc)(CUdeviceptr *, size_t);

static const char PTX[] =
    ".version 8.0\n.target sm_90\n.address_size 64\n"
    ".visible .entry tiny() { ret; }\n"
    ".visible .entry two(.param .u64 x, .param .u32 n) { ret; }\n";

#define CHECK(call)                                                                        \
    do {                                                                                   \
        CUresult rc_ = (call);                                                             \
        if (rc_ != 0) {                                                                    \
            fprintf(stderr, "%s failed: %d (line %d)\n", #call, rc_, __LINE__);            \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

static uint64_t
now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int
cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void
report(const char *name, uint64_t *t, int n)
{
    qsort(t, (size_t)n, sizeof *t, cmp_u64);
    printf("  %-58s p50 %7.2f us   p99 %7.2f us\n", name, t[n / 2] / 1e3, t[n * 99 / 100] / 1e3);
    fflush(stdout);
}

static void *
sym(void *lib, const char *name)
{
    void *p = dlsym(lib, name);
    if (p == NULL) {
        fprintf(stderr, "no %s in libcuda\n", name);
        exit(1);
    }
    return p;
}

static inline void
pause_(void)
{
    __asm__ __volatile__("pause" ::: "memory");
}

static volatile uint32_t *flag;
static CUdeviceptr dflag;
static uint32_t gen;

static inline void
spin_tight(uint32_t want)
{
    while ((int32_t)(__atomic_load_n(flag, __ATOMIC_ACQUIRE) - want) < 0)
        pause_();
}

/* like cuasync's spin_wait: 16 polls between clock reads */
static inline void
spin_clocked(uint32_t want, uint64_t budget)
{
    uint64_t start = now_ns();
    for (;;) {
        for (int k = 0; k < 16; k++) {
            if ((int32_t)(__atomic_load_n(flag, __ATOMIC_ACQUIRE) - want) >= 0)
                return;
            pause_();
        }
        if (now_ns() - start > budget)
            return;
    }
}

/* -- two threads: a producer (the event loop) hands launches to a launcher thread ------
 * The producer spends `work_ns` per record (standing in for a task's Python) and
 * publishes it in a lock-free ring; the launcher thread launches it and writes its
 * flag word (every record, or one per `flag_every`).  What this measures: whether
 * the driver lets a second thread's launches overlap the first thread's own work on
 * this machine (the premise of cuasync's submitter), with no mutex and no Python. */
#define PIPE_MAX 8192
static CUfunction pipe_fn;
static CUstream pipe_stream;
static _Atomic uint64_t pipe_tail, pipe_head;
static uint32_t pipe_gen[PIPE_MAX];
static int pipe_m, pipe_flag_every;
static _Atomic int pipe_stop;

static void
busy_ns(uint64_t ns)
{
    if (ns == 0)
        return;
    uint64_t start = now_ns();
    while (now_ns() - start < ns)
        pause_();
}

static void *
pipe_launcher(void *arg)
{
    (void)arg;
    CUcontext ctx = *(CUcontext *)arg;
    CHECK(cuCtxSetCurrent(ctx));
    for (;;) {
        uint64_t h = atomic_load_explicit(&pipe_head, memory_order_relaxed);
        uint64_t t;
        while ((t = atomic_load_explicit(&pipe_tail, memory_order_acquire)) == h) {
            if (atomic_load_explicit(&pipe_stop, memory_order_relaxed))
                return NULL;
            pause_();
        }
        for (; h < t; h++) {
            CHECK(cuLaunchKernel(pipe_fn, 1, 1, 1, 32, 1, 1, 0, pipe_stream, NULL, NULL));
            if ((h + 1) % (uint64_t)pipe_flag_every == 0 || (int)h == pipe_m - 1)
                CHECK(cuStreamWriteValue32(pipe_stream, dflag, pipe_gen[h % PIPE_MAX], 0));
            atomic_store_explicit(&pipe_head, h + 1, memory_order_release);
        }
    }
}

/* ops/s of m records through the launcher thread, the producer spending work_ns each */
static double
pipeline(CUcontext ctx, int m, uint64_t work_ns, int flag_every)
{
    pipe_m = m;
    pipe_flag_every = flag_every;
    atomic_store(&pipe_tail, 0);
    atomic_store(&pipe_head, 0);
    atomic_store(&pipe_stop, 0);
    pthread_t th;
    pthread_create(&th, NULL, pipe_launcher, &ctx);
    uint64_t a = now_ns();
    for (int i = 0; i < m; i++) {
        busy_ns(work_ns);
        pipe_gen[i % PIPE_MAX] = ++gen;
        atomic_store_explicit(&pipe_tail, (uint64_t)i + 1, memory_order_release);
    }
    spin_tight(gen);
    uint64_t b = now_ns();
    atomic_store(&pipe_stop, 1);
    pthread_join(th, NULL);
    return m / ((b - a) / 1e9);
}

/* the same m records made on the producer's own thread */
static double
inline_loop(int m, uint64_t work_ns)
{
    uint64_t a = now_ns();
    for (int i = 0; i < m; i++) {
        busy_ns(work_ns);
        CHECK(cuLaunchKernel(pipe_fn, 1, 1, 1, 32, 1, 1, 0, pipe_stream, NULL, NULL));
        CHECK(cuStreamWriteValue32(pipe_stream, dflag, ++gen, 0));
    }
    spin_tight(gen);
    return m / ((now_ns() - a) / 1e9);
}

int
main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 20000;
    void *lib = dlopen("libcuda.so.1", RTLD_NOW);
    if (lib == NULL) {
        fprintf(stderr, "dlopen libcuda.so.1: %s\n", dlerror());
        return 1;
    }
    cuInit = sym(lib, "cuInit");
    cuDeviceGet = sym(lib, "cuDeviceGet");
    cuDevicePrimaryCtxRetain = sym(lib, "cuDevicePrimaryCtxRetain");
    cuCtxSetCurrent = sym(lib, "cuCtxSetCurrent");
    cuCtxGetFlags = sym(lib, "cuCtxGetFlags");
    cuModuleLoadData = sym(lib, "cuModuleLoadData");
    cuModuleGetFunction = sym(lib, "cuModuleGetFunction");
    cuStreamCreate = sym(lib, "cuStreamCreate");
    cuStreamSynchronize = sym(lib, "cuStreamSynchronize");
    cuStreamQuery = sym(lib, "cuStreamQuery");
    cuLaunchKernel = sym(lib, "cuLaunchKernel");
    cuStreamWriteValue32 = sym(lib, "cuStreamWriteValue32_v2");
    cuMemHostAlloc = sym(lib, "cuMemHostAlloc");
    cuMemHostGetDevicePointer = sym(lib, "cuMemHostGetDevicePointer_v2");
    cuEventCreate = sym(lib, "cuEventCreate");
    cuEventRecord = sym(lib, "cuEventRecord");
    cuEventQuery = sym(lib, "cuEventQuery");
    cuMemAlloc = sym(lib, "cuMemAlloc_v2");

    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUfunction tiny, two;
    CUstream s;
    CUevent ev;
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK(cuCtxSetCurrent(ctx));
    unsigned flags = 0;
    CHECK(cuCtxGetFlags(&flags));
    CHECK(cuModuleLoadData(&mod, PTX));
    CHECK(cuModuleGetFunction(&tiny, mod, "tiny"));
    CHECK(cuModuleGetFunction(&two, mod, "two"));
    CHECK(cuStreamCreate(&s, 1 /* CU_STREAM_NON_BLOCKING */));
    CHECK(cuEventCreate(&ev, 2 /* CU_EVENT_DISABLE_TIMING */));
    void *host;
    CHECK(cuMemHostAlloc(&host, 4096, 0x02 /* DEVICEMAP */ | 0x01 /* PORTABLE */));
    memset(host, 0, 4096);
    flag = host;
    CHECK(cuMemHostGetDevicePointer(&dflag, host, 0));
    CUdeviceptr buf;
    CHECK(cuMemAlloc(&buf, 4096));
    printf("driver_floor: n=%d, context flags 0x%x (sched %u)\n", n, flags, flags & 7);

    uint64_t *t = malloc(sizeof(uint64_t) * (size_t)n);
    int warm = n / 10 + 50;
#define LOOP(name, body)                                                                   \
    do {                                                                                   \
        for (int i = -warm; i < n; i++) {                                                  \
            uint64_t t0 = now_ns();                                                        \
            body;                                                                          \
            if (i >= 0)                                                                    \
                t[i] = now_ns() - t0;                                                      \
        }                                                                                  \
        report(name, t, n);                                                                \
    } while (0)
#define LAUNCH() CHECK(cuLaunchKernel(tiny, 1, 1, 1, 32, 1, 1, 0, s, NULL, NULL))

    uint64_t t0 = now_ns();
    for (int i = 0; i < 100000; i++)
        (void)now_ns();
    printf("  %-58s %7.1f ns\n", "clock_gettime(CLOCK_MONOTONIC)", (now_ns() - t0) / 1e5);

    /* host cost alone (synchronized every 64 so the queue never fills) */
    for (int i = -warm; i < n; i++) {
        uint64_t a = now_ns();
        LAUNCH();
        uint64_t b = now_ns();
        if (i >= 0)
            t[i] = b - a;
        if ((i & 63) == 0)
            CHECK(cuStreamSynchronize(s));
    }
    report("cuLaunchKernel host time (no params)", t, n);
    {
        unsigned long long x = buf;
        unsigned nn = 64;
        void *params[] = {&x, &nn};
        for (int i = -warm; i < n; i++) {
            uint64_t a = now_ns();
            CHECK(cuLaunchKernel(two, 1, 1, 1, 256, 1, 1, 0, s, params, NULL));
            uint64_t b = now_ns();
            if (i >= 0)
                t[i] = b - a;
            if ((i & 63) == 0)
                CHECK(cuStreamSynchronize(s));
        }
        report("cuLaunchKernel host time (u64, u32 params)", t, n);
    }
    for (int i = -warm; i < n; i++) {
        LAUNCH();
        uint64_t a = now_ns();
        CHECK(cuStreamWriteValue32(s, dflag, ++gen, 0));
        uint64_t b = now_ns();
        if (i >= 0)
            t[i] = b - a;
        spin_tight(gen);
    }
    report("cuStreamWriteValue32 host time (after a launch)", t, n);
    for (int i = -warm; i < n; i++) {
        LAUNCH();
        uint64_t a = now_ns();
        CHECK(cuEventRecord(ev, s));
        uint64_t b = now_ns();
        if (i >= 0)
            t[i] = b - a;
        CHECK(cuStreamSynchronize(s));
    }
    report("cuEventRecord host time (after a launch)", t, n);

    LOOP("launch + cuStreamSynchronize", LAUNCH(); CHECK(cuStreamSynchronize(s)));
    LOOP("launch + cuStreamQuery spin", LAUNCH(); while (cuStreamQuery(s) != 0) {});
    LOOP("launch + cuEventRecord + cuEventQuery spin",
         LAUNCH(); CHECK(cuEventRecord(ev, s)); while (cuEventQuery(ev) != 0) {});
    LOOP("launch + cuStreamWriteValue32 + tight spin",
         LAUNCH(); CHECK(cuStreamWriteValue32(s, dflag, ++gen, 0)); spin_tight(gen));
    LOOP("launch + cuStreamWriteValue32 + clocked spin (as spin_wait)",
         LAUNCH(); CHECK(cuStreamWriteValue32(s, dflag, ++gen, 0)); spin_clocked(gen, 20000));
    LOOP("cuStreamWriteValue32 alone + spin",
         CHECK(cuStreamWriteValue32(s, dflag, ++gen, 0)); spin_tight(gen));
    LOOP("launch; write; then the host learns the launch returned (t of write end)",
         LAUNCH(); CHECK(cuStreamWriteValue32(s, dflag, ++gen, 0)));
    spin_tight(gen);

    /* pipelined throughput on one stream, as 8192 concurrent awaits would need */
    for (int round = 0; round < 2; round++) {
        int m = 8192;
        uint64_t a = now_ns();
        for (int i = 0; i < m; i++) {
            LAUNCH();
            CHECK(cuStreamWriteValue32(s, dflag, ++gen, 0));
        }
        spin_tight(gen);
        uint64_t b = now_ns();
        for (int i = 0; i < m; i++)
            LAUNCH();
        CHECK(cuStreamWriteValue32(s, dflag, ++gen, 0));
        spin_tight(gen);
        uint64_t c = now_ns();
        for (int i = 0; i < m; i++) {
            LAUNCH();
            if ((i & 63) == 63)
                CHECK(cuStreamWriteValue32(s, dflag, ++gen, 0));
        }
        CHECK(cuStreamWriteValue32(s, dflag, ++gen, 0));
        spin_tight(gen);
        uint64_t d = now_ns();
        for (int i = 0; i < m; i++) {
            LAUNCH();
            CHECK(cuStreamSynchronize(s));
        }
        uint64_t e = now_ns();
        if (round == 1) {
            printf("  %-58s %9.0f ops/s\n", "8192 x (launch + write), one stream, spin on the last",
                   m / ((b - a) / 1e9));
            printf("  %-58s %9.0f ops/s\n", "8192 launches, one write at the end", m / ((c - b) / 1e9));
            printf("  %-58s %9.0f ops/s\n", "8192 launches, one write per 64", m / ((d - c) / 1e9));
            printf("  %-58s %9.0f ops/s\n", "8192 x (launch + synchronize)", m / ((e - d) / 1e9));
        }
    }
    /* two threads (see pipeline): the producer's own work per record against making
     * the launches itself; best of three rounds each */
    pipe_fn = tiny;
    pipe_stream = s;
    printf("  two threads, 8192 records (best of 3; producer work per record):\n");
    uint64_t works[] = {0, 2000, 4000, 6000};
    for (int w = 0; w < 4; w++) {
        double best_inline = 0, best_pipe = 0, best_pipe64 = 0;
        for (int round = 0; round < 3; round++) {
            double x = inline_loop(8192, works[w]);
            double y = pipeline(ctx, 8192, works[w], 1);
            double z = pipeline(ctx, 8192, works[w], 64);
            best_inline = x > best_inline ? x : best_inline;
            best_pipe = y > best_pipe ? y : best_pipe;
            best_pipe64 = z > best_pipe64 ? z : best_pipe64;
        }
        printf("    work %4.1f us: launch + write on the producer %9.0f ops/s; launcher thread "
               "%9.0f ops/s (a flag each), %9.0f ops/s (a flag per 64)\n",
               works[w] / 1e3, best_inline, best_pipe, best_pipe64);
    }
    return 0;
}
