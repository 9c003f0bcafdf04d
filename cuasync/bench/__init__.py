"""Benchmarks: an API to time device work, and suites run by
``python -m cuasync.bench SUITE... [--json PATH] [--quick]``.

The API times with device events and is usable from sync code and from ``await``:

>>> r = cuasync.bench.do_bench(lambda: x.dup())              # BenchResult, in ms
>>> r = await cuasync.bench.do_bench_async(lambda: x.dup())
>>> p = cuasync.bench.do_bench_paired(lambda: x.dup(), lambda: x + 1)  # PairedResult
>>> p.ratio, p.ci_low, p.ci_high

Suites: completion, launch, graphs, transfers, peer, matmul, all. Every figure is measured side
by side with its alternatives in one process, so ratios are meaningful on the machine
they ran on. See docs/performance.md for recorded runs.
"""

from ._api import do_bench as do_bench
from ._api import do_bench_async as do_bench_async
from ._api import do_bench_paired as do_bench_paired
from ._api import do_bench_paired_async as do_bench_paired_async
from ._results import BenchResult as BenchResult
from ._results import PairedResult as PairedResult

__all__ = [
    "BenchResult",
    "PairedResult",
    "do_bench",
    "do_bench_async",
    "do_bench_paired",
    "do_bench_paired_async",
]
