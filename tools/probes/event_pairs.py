"""Do device events around back-to-back sleep ops measure each op alone?

do_bench_paired on the H200 timed a 2 ms sleep op as 2.0 ms and 4.8 ms in alternate
positions of its ABBA order. This times sleep(2000) and sleep(200) with an event pair
around each, in several orders, gated (everything enqueued behind a closed gate, as
do_bench does) and not, and prints every pair's elapsed time.
"""

import cuasync
import cuasync.bench
import cuasync.testing as ct
from cuasync import Event

dev = cuasync.Device(0)
stream = dev.new_stream()
ct.sleep(1).sync()


def run(order: str, gated: bool) -> list[str]:
    marks = []
    futs = []

    def enqueue() -> None:
        for name in order:
            start = Event(dev, timing=True).record(stream)
            futs.append(ct.sleep(2000 if name == "A" else 200).submit_on(stream))
            marks.append((name, start, Event(dev, timing=True).record(stream)))

    if gated:
        with ct.gate(stream):
            enqueue()
    else:
        enqueue()
    stream.synchronize()
    for f in futs:
        f.wait()
    return [f"{n}={s.elapsed_ms(e):.3f}" for n, s, e in marks]


for order in ("AAAA", "BBBB", "ABBAABBA", "ABAB"):
    for gated in (False, True):
        print(f"{order:9} gated={gated!s:5}", " ".join(run(order, gated)))
r = cuasync.bench.do_bench_paired(lambda: ct.sleep(2000), lambda: ct.sleep(200), warmup=2, rep=8)
print("paired a", [round(t, 3) for t in r.a.times_ms])
print("paired b", [round(t, 3) for t in r.b.times_ms])
