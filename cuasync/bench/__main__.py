"""``python -m cuasync.bench SUITE... [--json PATH] [--plot PATH]``.

Suites: completion, launch, graphs, transfers, peer, matmul, priority, ops, interop,
requests, cancel, all (``ops --only reductions,adds``: some parts of ops). On a terminal, with
tqdm installed (the ``bench`` extra), a progress bar on stderr counts the suites.
"""

from __future__ import annotations

import argparse
import gc
import sys

from . import (
    cancel,
    completion,
    graphs,
    interop,
    launch,
    matmul,
    ops,
    peer,
    priority,
    requests,
    transfers,
)
from ._plot import _pyplot, plot_latencies
from ._progress import Progress
from ._util import Report, machine_meta

SUITES = (
    "completion", "launch", "graphs", "transfers", "peer", "matmul", "priority", "ops", "interop",
    "requests", "cancel",
)  # fmt: skip


def _run(suite: str, report: Report, quick: bool, only: list[str] | None = None) -> None:
    if suite == "completion":
        completion.run(report, n=200 if quick else 2000, concurrent=512 if quick else 8192)
    elif suite == "launch":
        launch.run(report, count=500 if quick else 20000)
    elif suite == "graphs":
        graphs.run(report, reps=3 if quick else 50)
    elif suite == "transfers":
        transfers.run(report, quick=quick)
    elif suite == "peer":
        peer.run(report, quick=quick)
    elif suite == "matmul":
        matmul.run(report, quick=quick)
    elif suite == "priority":
        priority.run(report, n=50 if quick else 500)
    elif suite == "ops":
        ops.run(report, quick=quick, only=only or ops.PARTS)
    elif suite == "interop":
        interop.run(report, n=2000 if quick else 20000)
    elif suite == "requests":
        requests.run(report, quick=quick)
    elif suite == "cancel":
        cancel.run(report, quick=quick)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cuasync.bench", description=__doc__)
    parser.add_argument("suites", nargs="*", default=["all"], help=f"{', '.join(SUITES)} or all")
    parser.add_argument("--json", help="also write the results as JSON to this path")
    parser.add_argument("--quick", action="store_true", help="fewer iterations (smoke test)")
    parser.add_argument(
        "--plot", help="also draw the latency distributions into this image (needs matplotlib)"
    )
    parser.add_argument(
        "--no-freeze",
        action="store_true",
        help="leave the start-up heap to the cyclic GC (by default it is frozen: gc.freeze())",
    )
    parser.add_argument(
        "--only",
        help="ops: only these parts, comma-separated (reductions, adds, scatter, "
        "take_along_axis, fusion); e.g. --only reductions,adds prints the reduction and add "
        "rows and their targets",
    )
    args = parser.parse_args(argv)
    if args.plot:
        _pyplot()  # a missing matplotlib says so before anything is measured
    chosen = list(SUITES) if "all" in args.suites else args.suites
    unknown = [s for s in chosen if s not in SUITES]
    if unknown:
        parser.error(f"unknown suite(s) {unknown}; choose from {', '.join(SUITES)} or all")
    only = [p.strip() for p in args.only.split(",") if p.strip()] if args.only else None
    if only is not None:
        if chosen != ["ops"]:
            parser.error("--only selects parts of the ops suite: run it alone (ops --only ...)")
        if any(p not in ops.PARTS for p in only):
            parser.error(
                f"--only: unknown part(s) in {args.only!r}; choose from {', '.join(ops.PARTS)}"
            )
    report = Report(meta=machine_meta())  # (imports the libraries measured beside cuasync)
    if not args.no_freeze:
        # What a service does after its start-up: what is alive now (torch's and CuPy's
        # modules, imported for the baselines) goes to the collector's permanent
        # generation, so that its full passes, triggered by a gather's thousands of task
        # objects, do not traverse it (the completion suite measures the gather both ways).
        gc.collect()
        gc.freeze()
    report.meta["gc"] = "start-up heap frozen" if not args.no_freeze else "default"
    print("machine:", ", ".join(f"{k}={v}" for k, v in report.meta.items()), flush=True)
    with Progress(chosen) as progress:
        report.on_row = progress.row
        for suite in chosen:
            progress.start(suite)
            _run(suite, report, args.quick, only)
            progress.done()
    if args.json:
        report.dump(args.json)
    if args.plot:
        drawn = plot_latencies(report, args.plot)
        print(
            f"plot: {drawn} latency distributions in {args.plot}"
            if drawn
            else "plot: no latency rows to draw"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
