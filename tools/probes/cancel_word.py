"""Issue 36's two measurements: what a cancel word costs a kernel, and how fast a set word
is seen by work already queued.

(a) **Cost of the check.** ``c = a + b`` float32 as the generated op runs it (1 float4 a
thread, blocks of 128, one pass), with a once-per-block check of a cancel word before
any load, compared with no check: the word in pinned host-mapped memory
(``cuMemHostAlloc`` DEVICEMAP, the backend's ``host_alloc``) or in device memory; read by
thread 0 of the block then ``__syncthreads`` (``ld.volatile`` or ``ld.relaxed.sys``), or
by every thread (``ld.volatile`` or ``ld.relaxed.sys``). The word is 0 throughout (the
kernel does all its work): the cost a kernel pays when nobody cancels. At 64 MiB operands
(target: <= 1 % of the kernel's time) and on a tiny kernel (4096 elements, 8 blocks;
target: <= 0.5 us), each call between two device events (``cuasync.bench``'s gated
runs, 2 batches of 16 calls), the variants interleaved in 5 rounds (order reversed every
other round), the median call of each round, the median round kept; the tiny kernel is
also timed as 200 back-to-back launches between two events behind a gate (per launch).

(b) **How fast a set word is seen.**

1. Round trip: a one-block kernel spins on the word (bounded: 100 ms) and, when it sees
   it set, writes an acknowledgement to pinned host-mapped memory that the host spins
   on; the host times from just before it sets the word to the acknowledgement, 20
   times per way of setting it: a host store to the mapped pinned word; and, on a
   separate stream of the greatest priority, ``cuStreamWriteValue32`` of the pinned word,
   of a device word (``cuMemAlloc``, as cancel scopes hold theirs: the backend's
   ``device_words_alloc``) and of a word in the stream-ordered pool (refused on the
   H200 once: a way the driver refuses is printed and left out), ``cuMemsetD32Async``
   of the device word, and the backend's ``write_device_word`` (what
   ``CancelScope.cancel()`` enqueues).
2. A queue: 200 float32 adds of 64 MiB (~50 us each on an H200) behind a gate, each
   checking the word once per block (thread 0, ``ld.volatile``) and marking whether its
   first block ran and whether its last block did; the gate opens, the host waits 2 ms
   and sets the word (each way of 1., the pinned word read by the kernels for the host
   store, the device word otherwise); the queue's time between two device events,
   against the same queue not cancelled (word in each memory); the kernels that still
   ran (first block) and finished (last block), the device time from the first kernel's
   start to the last started one's (``%globaltimer``) less the host's 2 ms (a rough
   detection lag: the clocks differ by the gate's release), and the time a skipped
   kernel still takes (the queue's time less the kernels that ran, over those skipped).
   3 rounds, the ways interleaved, medians.

    python tools/probes/cancel_word.py     # a GPU (CUASYNC_BACKEND=cuda); ~30 s

On the emulator it says that it needs a GPU, parses every kernel source through
``cuasync.Kernel`` (and compiles it for sm_90 where NVRTC is installed) and exits 0.
"""

from __future__ import annotations

import ctypes
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
from gpu_probe import offline_check, time_row

import cuasync
from cuasync._backends import get_backend
from cuasync.lowlevel import DevicePointer
from cuasync.testing import gate

ROUNDS = 5
BATCH = 200  # tiny launches between two events
BIG = 16 << 20  # float32 elements: 64 MiB an operand
TINY = 4096
QUEUE = 200  # kernels in the queue of (b)
QUEUE_ROUNDS = 3
CANCEL_AFTER_S = 2e-3
TRIPS = 20

_SOURCE = r"""
__device__ __forceinline__ unsigned ld_vol(const unsigned* p) {
    return *(const volatile unsigned*)p;
}
__device__ __forceinline__ unsigned ld_sys(const unsigned* p) {
    unsigned v;
    asm volatile("ld.relaxed.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ unsigned long long now_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// MODE 0: no check; 1: thread 0 ld.volatile, __syncthreads; 2: thread 0 ld.relaxed.sys,
// __syncthreads; 3: every thread ld.volatile; 4: every thread ld.relaxed.sys
template <int MODE>
__device__ __forceinline__ bool cancelled(const unsigned* word) {
    if (MODE == 0) return false;
    if (MODE == 1 || MODE == 2) {
        __shared__ unsigned seen;
        if (threadIdx.x == 0) seen = MODE == 1 ? ld_vol(word) : ld_sys(word);
        __syncthreads();
        return seen != 0;
    }
    return (MODE == 3 ? ld_vol(word) : ld_sys(word)) != 0;
}

__device__ __forceinline__ void add_body(const float* a, const float* b, float* c, long long n) {
    const long long n4 = n / 4, j = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (j < n4) {
        const float4 x = ((const float4*)a)[j], y = ((const float4*)b)[j];
        ((float4*)c)[j] = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
    }
    if (blockIdx.x == 0 && threadIdx.x < n - n4 * 4) {
        const long long i = n4 * 4 + threadIdx.x;
        c[i] = a[i] + b[i];
    }
}

template <int MODE>
__global__ void add_chk(const float* a, const float* b, float* c, long long n,
                        const unsigned* word) {
    if (cancelled<MODE>(word)) return;
    add_body(a, b, c, n);
}

// (b) 2: the queue's kernel; ran[i]/finished[i]: its first/last block did its work
__global__ void add_mark(const float* a, const float* b, float* c, long long n,
                         const unsigned* word, unsigned* ran, unsigned* finished,
                         unsigned long long* started, int i) {
    if (cancelled<1>(word)) return;
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        ran[i] = 1;
        started[i] = now_ns();
    }
    add_body(a, b, c, n);
    if (blockIdx.x == gridDim.x - 1 && threadIdx.x == 0) finished[i] = 1;
}

// (b) 1: one thread spins on the word; ack (pinned, host-mapped): 3 started, 1 seen,
// 2 gave up after timeout_ns
__global__ void watch(const unsigned* word, unsigned* ack, long long timeout_ns) {
    volatile unsigned* a = ack;
    *a = 3;
    __threadfence_system();
    const unsigned long long t0 = now_ns();
    for (;;) {
        if (ld_vol(word)) {
            *a = 1;
            __threadfence_system();
            return;
        }
        if (now_ns() - t0 > (unsigned long long)timeout_ns) {
            *a = 2;
            return;
        }
    }
}
"""

#: (a)'s variants: name -> (MODE, which word: "host" pinned mapped or "dev")
VARIANTS: dict[str, tuple[int, str]] = {
    "no check": (0, "dev"),
    "thread 0 ld.volatile + sync, pinned host word": (1, "host"),
    "thread 0 ld.relaxed.sys + sync, pinned host word": (2, "host"),
    "every thread ld.volatile, pinned host word": (3, "host"),
    "every thread ld.relaxed.sys, pinned host word": (4, "host"),
    "thread 0 ld.volatile + sync, device word": (1, "dev"),
    "thread 0 ld.relaxed.sys + sync, device word": (2, "dev"),
    "every thread ld.volatile, device word": (3, "dev"),
    "every thread ld.relaxed.sys, device word": (4, "dev"),
}


def kernels() -> dict[str, cuasync.Kernel]:
    """Every kernel of the probe, by name (parsed, not compiled)."""
    ks = {f"add_chk<{m}>": cuasync.Kernel(_SOURCE, f"add_chk<{m}>") for m in range(5)}
    ks["add_mark"] = cuasync.Kernel(_SOURCE, "add_mark")
    ks["watch"] = cuasync.Kernel(_SOURCE, "watch")
    return ks


class Words:
    """The probe's words: pinned host-mapped (``host``, ``ack``) and in device memory
    (``dev``), with the host's view of the pinned ones."""

    def __init__(self) -> None:
        backend: Any = get_backend()  # (the CUDA backend's host_alloc and device pointer)
        self.block = backend.host_alloc(64)
        self.host = DevicePointer(backend.host_device_pointer(self.block))
        self.ack = DevicePointer(backend.host_device_pointer(self.block + 32))
        self.host_word = ctypes.c_uint32.from_address(self.block)
        self.host_ack = ctypes.c_uint32.from_address(self.block + 32)
        # the device word as cuasync's cancel scopes hold it (cuMemAlloc, outside the
        # pool), and one in the stream-ordered pool (where cuStreamWriteValue32 was refused)
        zeroing = cuasync.get_default_device().new_stream()  # (zeroed there, waited for)
        self.dev = DevicePointer(backend.device_words_alloc(0, 64, zeroing.handle))
        self.pool_tensor = cuasync.full((1,), 0, "uint32").sync()
        self.pool = DevicePointer(self.pool_tensor.ptr)

    def of(self, which: str) -> DevicePointer:
        return {"host": self.host, "dev": self.dev, "pool": self.pool}[which]

    def reset(self, stream: cuasync.Stream) -> None:
        self.host_word.value = 0
        self.host_ack.value = 0
        get_backend().memset_d8_async(int(self.dev), 0, 4, stream.handle)
        get_backend().memset_d8_async(int(self.pool), 0, 4, stream.handle)
        stream.synchronize()


# -- (a) the cost of the check -------------------------------------------------------------


def time_batches(
    variants: dict[str, Callable[[], Any]], stream: cuasync.Stream
) -> dict[str, float]:
    """Median over ROUNDS rounds of each variant's time per launch (us) in BATCH
    back-to-back launches between two events, held behind a gate until all are queued."""
    names = list(variants)
    per: dict[str, list[float]] = {name: [] for name in names}
    for r in range(ROUNDS):
        for name in names if r % 2 == 0 else names[::-1]:
            futures = []
            with gate(stream):
                e0 = cuasync.Event(stream.device, timing=True).record(stream)
                for _ in range(BATCH):
                    futures.append(variants[name]().submit_on(stream))
                e1 = cuasync.Event(stream.device, timing=True).record(stream)
            e1.synchronize()
            for f in futures:
                f.wait()
            per[name].append(e0.elapsed_ms(e1) * 1e3 / BATCH)
    return {name: statistics.median(ts) for name, ts in per.items()}


def check_cost(ks: dict[str, cuasync.Kernel], words: Words, stream: cuasync.Stream) -> None:
    print("(a) the check's cost (the word stays 0: every block does its work)")
    for label, n in (("64 MiB add", BIG), ("tiny add (4096 elements, 8 blocks)", TINY)):
        a, b = (cuasync.full((n,), v, "float32").sync() for v in (0.5, 2.0))
        grid = (-(-(n // 4) // 128), 1, 1)
        variants: dict[str, Callable[[], Any]] = {}
        outs: dict[str, cuasync.Tensor] = {}
        for name, (mode, which) in VARIANTS.items():
            out = outs[name] = cuasync.full((n,), 0.0, "float32").sync()
            k = ks[f"add_chk<{mode}>"]
            variants[name] = partial(k.launch, a, b, out, n, words.of(which), grid=grid, block=128)
        cur = outs["cuasync.add (the op, reference)"] = cuasync.full((n,), 0.0, "float32").sync()
        variants["cuasync.add (the op, reference)"] = partial(cuasync.add, a, b, out=cur)
        for fn in variants.values():
            fn().submit_on(stream)
        stream.synchronize()
        for name, out in outs.items():
            host = np.asarray(out.to_host().sync())
            if not np.all(host == 2.5):
                print(f"  WRONG RESULT: {label}, {name}")
        us = time_row(variants, stream)
        batch = time_batches(variants, stream) if n == TINY else {}
        base = us["no check"]
        head = f"  {label:<36} {'variant':<50} {'us':>9} {'x none':>7} {'+us':>7}"
        if batch:
            head += f" {'batched us':>10} {'+us':>7}"
        print(head)
        for name, t in us.items():
            line = f"  {'':<36} {name:<50} {t:9.3f} {t / base:7.4f} {t - base:7.3f}"
            if batch:
                line += f" {batch[name]:10.3f} {batch[name] - batch['no check']:7.3f}"
            print(line)
        print(flush=True)


# -- (b) how fast a set word is seen -------------------------------------------------------
def setters(
    words: Words, urgent: cuasync.Stream, stream: cuasync.Stream
) -> dict[str, tuple[str, Callable[[], None]]]:
    """Ways of setting the word: name -> (the word the kernels read, the set); a way the
    driver refuses is printed once and left out."""
    backend: Any = get_backend()

    def host_store() -> None:
        words.host_word.value = 1

    def write_host() -> None:
        backend.write_value32(urgent.handle, words.block, 1)

    def write(word: DevicePointer) -> Callable[[], None]:
        def set_word() -> None:
            backend._call_on(urgent.handle, "cuStreamWriteValue32", urgent.handle, int(word), 1, 0)

        return set_word

    def memset_dev() -> None:
        backend._call_on(urgent.handle, "cuMemsetD32Async", int(words.dev), 1, 1, urgent.handle)

    def cuasync_way() -> None:  # what CancelScope.cancel() does
        backend.write_device_word(urgent.handle, int(words.dev), 1)

    ways: dict[str, tuple[str, Callable[[], None]]] = {
        "host store, pinned word": ("host", host_store),
        "cuStreamWriteValue32 (urgent stream), pinned word": ("host", write_host),
        "cuStreamWriteValue32 (urgent stream), device word": ("dev", write(words.dev)),
        "cuStreamWriteValue32 (urgent stream), pool word": ("pool", write(words.pool)),
        "cuMemsetD32Async (urgent stream), device word": ("dev", memset_dev),
        "write_device_word (cuasync's), device word": ("dev", cuasync_way),
    }
    for name, (_, set_word) in list(ways.items()):
        try:
            set_word()
            urgent.synchronize()
        except cuasync.errors.DriverError as e:
            print(f"  ({name}: refused, {e}; left out)")
            del ways[name]
        words.reset(stream)
    return ways


def round_trips(
    ks: dict[str, cuasync.Kernel], words: Words, stream: cuasync.Stream, urgent: cuasync.Stream
) -> None:
    print("(b) 1. a spinning kernel sees the word: host time from the set to its ack (us)")
    ways = setters(words, urgent, stream)
    per: dict[str, list[float]] = {name: [] for name in ways}
    calls: dict[str, list[float]] = {name: [] for name in ways}
    failures: dict[str, int] = dict.fromkeys(ways, 0)
    for t in range(TRIPS):
        for name in ways if t % 2 == 0 else list(ways)[::-1]:
            which, set_word = ways[name]
            words.reset(stream)
            urgent.synchronize()
            op = ks["watch"].launch(words.of(which), words.ack, 100_000_000, grid=1, block=1)
            fut = op.submit_on(stream)
            ack = words.host_ack
            while ack.value != 3:
                pass
            t0 = time.perf_counter()
            set_word()
            t1 = time.perf_counter()
            while ack.value == 3:
                pass
            t2 = time.perf_counter()
            fut.wait()
            if ack.value != 1:
                failures[name] += 1
                continue
            per[name].append((t2 - t0) * 1e6)
            calls[name].append((t1 - t0) * 1e6)
    print(f"  {'way':<52} {'p50 us':>8} {'p10':>8} {'p90':>8} {'set call':>9} {'missed':>6}")
    for name, ts in per.items():
        if not ts:
            print(f"  {name:<52} {'never seen':>8}")
            continue
        q = np.percentile(ts, [50, 10, 90])
        print(
            f"  {name:<52} {q[0]:8.2f} {q[1]:8.2f} {q[2]:8.2f} "
            f"{statistics.median(calls[name]):9.2f} {failures[name]:6d}"
        )
    print(flush=True)


def queue(
    ks: dict[str, cuasync.Kernel], words: Words, stream: cuasync.Stream, urgent: cuasync.Stream
) -> None:
    print(
        f"(b) 2. {QUEUE} adds of 64 MiB queued behind a gate, the word set "
        f"{CANCEL_AFTER_S * 1e3:g} ms after the gate opens"
    )
    n = BIG
    a, b, c = (cuasync.full((n,), v, "float32").sync() for v in (0.5, 2.0, 0.0))
    ran = cuasync.full((QUEUE,), 0, "uint32").sync()
    finished = cuasync.full((QUEUE,), 0, "uint32").sync()
    started = cuasync.full((QUEUE,), 0, "uint64").sync()
    grid = (-(-(n // 4) // 128), 1, 1)
    k = ks["add_mark"]
    ways: dict[str, tuple[str, Callable[[], None] | None]] = {
        "not cancelled, pinned word": ("host", None),
        "not cancelled, device word": ("dev", None),
    }
    ways.update(setters(words, urgent, stream))
    rows: dict[str, list[tuple[float, ...]]] = {name: [] for name in ways}
    backend = get_backend()
    for r in range(QUEUE_ROUNDS):
        for name in ways if r % 2 == 0 else list(ways)[::-1]:
            which, set_word = ways[name]
            words.reset(stream)
            for t in (ran, finished, started):
                backend.memset_d8_async(t.ptr, 0, t.nbytes, stream.handle)
            stream.synchronize()
            futures = []
            word = words.of(which)
            with gate(stream):
                e0 = cuasync.Event(stream.device, timing=True).record(stream)
                for i in range(QUEUE):
                    op = k.launch(a, b, c, n, word, ran, finished, started, i, grid=grid, block=128)
                    futures.append(op.submit_on(stream))
                e1 = cuasync.Event(stream.device, timing=True).record(stream)
            t_open = time.perf_counter()
            if set_word is not None:
                while time.perf_counter() - t_open < CANCEL_AFTER_S:
                    pass
                t_set = time.perf_counter()
                set_word()
            else:
                t_set = t_open
            e1.synchronize()
            urgent.synchronize()
            for f in futures:
                f.wait()
            total_us = e0.elapsed_ms(e1) * 1e3
            r_h = np.asarray(ran.to_host().sync())
            f_h = np.asarray(finished.to_host().sync())
            s_h = np.asarray(started.to_host().sync()).astype(np.int64)
            n_ran, n_fin = int(r_h.sum()), int(f_h.sum())
            last = int(np.nonzero(r_h)[0].max()) if n_ran else 0
            span_us = (s_h[last] - s_h[0]) / 1e3 if n_ran else 0.0
            lag_us = span_us - (t_set - t_open) * 1e6 if set_word is not None else 0.0
            rows[name].append((total_us, n_ran, n_fin, span_us, lag_us))
            c.to_host().sync()  # (the adds' result, read: nothing left pending)
    bases = {
        which: statistics.median(row[0] for row in rows[f"not cancelled, {kind} word"])
        for which, kind in (("host", "pinned"), ("dev", "device"), ("pool", "device"))
    }
    print(
        f"  {'way':<52} {'queue us':>9} {'x none':>7} {'ran':>5} {'finished':>8} "
        f"{'last start us':>13} {'lag us':>7} {'skipped kernel us':>17}"
    )
    for name, rs in rows.items():
        med = [statistics.median(col) for col in zip(*rs, strict=True)]
        total, n_ran, n_fin, span, lag = med
        base = bases[ways[name][0]]
        per_kernel = base / QUEUE
        skipped = QUEUE - n_ran
        per_skip = (total - n_ran * per_kernel) / skipped if skipped else 0.0
        print(
            f"  {name:<52} {total:9.0f} {total / base:7.3f} {n_ran:5.0f} {n_fin:8.0f} "
            f"{span:13.0f} {lag:7.0f} {per_skip:17.2f}"
        )
    print(
        f"  (x none: against the queue not cancelled reading the same word; a kernel not "
        f"cancelled: pinned word {bases['host'] / QUEUE:.1f} us, device word "
        f"{bases['dev'] / QUEUE:.1f} us; medians of {QUEUE_ROUNDS} rounds)"
    )
    print(flush=True)


def main() -> int:
    ks = kernels()
    if not get_backend().driver_handles:
        return offline_check("cancel_word", ks)
    start = time.perf_counter()
    dev = cuasync.Device(0)
    major, minor = dev.compute_capability
    for k in ks.values():
        k.compile_image(f"sm_{major}{minor}")
    stream = dev.new_stream()
    urgent = dev.new_stream(priority=dev.stream_priority_range.greatest)
    print(f"cancel_word: {dev.name}, urgent stream priority {urgent.priority}")
    words = Words()
    words.reset(stream)
    check_cost(ks, words, stream)
    round_trips(ks, words, stream, urgent)
    queue(ks, words, stream, urgent)
    print(f"({time.perf_counter() - start:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
