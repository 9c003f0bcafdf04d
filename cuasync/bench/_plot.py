"""``python -m cuasync.bench ... --plot PATH``: the latency distributions as one figure.

One panel per suite, one box per latency row (whiskers at p1 and p99, the samples a
row's p50 and p99 were computed from), on a log scale. Needs matplotlib (the ``plot``
extra); nothing else in the package imports it.
"""

from __future__ import annotations

from typing import Any

from ..errors import MissingDependencyError
from ._util import Report


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only: no display needed
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise MissingDependencyError(
            "--plot needs matplotlib: pip install 'cuasync[plot]'"
        ) from exc
    return plt


def plot_latencies(report: Report, path: str) -> int:
    """Write the latency rows of ``report`` to the image ``path``; returns the number of
    rows drawn (0: nothing was measured as a distribution, and no file is written).

    >>> plot_latencies(report, "bench.png")
    """
    plt = _pyplot()
    suites: dict[str, list[str]] = {}
    for row in report.rows:
        if row.name in report.samples:
            suites.setdefault(row.suite, []).append(row.name)
    if not suites:
        return 0
    heights = [max(2.0, 0.35 * len(names) + 1.0) for names in suites.values()]
    fig, axes = plt.subplots(
        len(suites), 1, figsize=(11, sum(heights)), squeeze=False,
        gridspec_kw={"height_ratios": heights},
    )  # fmt: skip
    for ax, (suite, names) in zip(axes[:, 0], suites.items(), strict=True):
        data = [report.samples[name] for name in names]
        try:  # matplotlib >= 3.10 says orientation=; older ones vert=
            ax.boxplot(data, orientation="horizontal", whis=(1, 99), showfliers=False)
        except TypeError:
            ax.boxplot(data, vert=False, whis=(1, 99), showfliers=False)
        ax.set_yticks(range(1, len(names) + 1), names)
        ax.set_xscale("log")
        ax.set_xlabel("µs")
        ax.set_title(suite, loc="left")
        ax.invert_yaxis()  # in the order measured, top to bottom
    meta = report.meta
    fig.suptitle(f"cuasync.bench on {meta.get('device', '?')} ({meta.get('backend', '?')})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return sum(len(names) for names in suites.values())
