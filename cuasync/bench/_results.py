"""What :func:`cuasync.bench.do_bench` and :func:`do_bench_paired` return.

>>> r = BenchResult.from_times([0.11, 0.10, 0.12])
>>> r.median_ms, r.p10_ms, r.p90_ms, r.mean_ms
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["BenchResult", "PairedResult"]

#: Bootstrap resamples behind a paired confidence interval (seeded: reproducible).
_RESAMPLES = 2000


@dataclass(frozen=True)
class BenchResult:
    """Device times of the timed repetitions, in milliseconds, and their summary.

    ``times_ms``: every timed repetition, in order; ``median_ms``, ``p10_ms``,
    ``p90_ms``: its 50th, 10th and 90th percentiles; ``mean_ms``: its mean.

    >>> r = cuasync.bench.do_bench(lambda: x.dup())
    >>> print(r)   # median 0.0123 ms (p10 ..., p90 ..., mean ...; 100 reps)
    """

    times_ms: tuple[float, ...]
    median_ms: float
    p10_ms: float
    p90_ms: float
    mean_ms: float

    @classmethod
    def from_times(cls, times_ms: list[float] | tuple[float, ...]) -> BenchResult:
        """The summary of ``times_ms`` (milliseconds, in the order measured).

        >>> cuasync.bench.BenchResult.from_times([1.0, 2.0, 3.0]).median_ms
        2.0
        """
        a = np.asarray(times_ms, dtype=np.float64)
        p10, median, p90 = np.percentile(a, [10, 50, 90])
        return cls(
            tuple(float(t) for t in a), float(median), float(p10), float(p90), float(a.mean())
        )

    def __str__(self) -> str:
        return (
            f"median {self.median_ms:.4f} ms (p10 {self.p10_ms:.4f}, p90 {self.p90_ms:.4f}, "
            f"mean {self.mean_ms:.4f}; {len(self.times_ms)} reps)"
        )


@dataclass(frozen=True)
class PairedResult:
    """Two candidates timed in interleaved pairs; ``ratio`` is ``a``'s time over ``b``'s.

    ``ratio`` is the median of the per-pair ratios ``a_i / b_i`` (above 1: ``a`` is
    slower), and ``[ci_low, ci_high]`` its ``confidence`` interval from a percentile
    bootstrap over the pairs (2000 resamples, seeded). Pairing cancels drift (clocks,
    temperature, other tenants) that separate runs would see as a difference.
    """

    a: BenchResult
    b: BenchResult
    ratio: float
    ci_low: float
    ci_high: float
    confidence: float

    @classmethod
    def from_times(
        cls, a_ms: list[float], b_ms: list[float], confidence: float = 0.95
    ) -> PairedResult:
        """From the times of the pairs, ``a_ms[i]`` and ``b_ms[i]`` measured together."""
        a, b = BenchResult.from_times(a_ms), BenchResult.from_times(b_ms)
        ratios = np.asarray(a_ms, np.float64) / np.maximum(np.asarray(b_ms, np.float64), 1e-12)
        rng = np.random.default_rng(0)
        picks = rng.integers(0, len(ratios), size=(_RESAMPLES, len(ratios)))
        medians = np.median(ratios[picks], axis=1)
        tail = (1 - confidence) / 2 * 100
        low, high = np.percentile(medians, [tail, 100 - tail])
        return cls(a, b, float(np.median(ratios)), float(low), float(high), confidence)

    @property
    def significant(self) -> bool:
        """Whether the interval excludes 1 (the candidates differ at ``confidence``)."""
        return not self.ci_low <= 1.0 <= self.ci_high

    def __str__(self) -> str:
        return (
            f"a/b = {self.ratio:.3f} ({self.confidence:.0%} CI {self.ci_low:.3f}-"
            f"{self.ci_high:.3f}); a: {self.a}; b: {self.b}"
        )
