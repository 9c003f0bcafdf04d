"""Benchmarks: ``python -m cuasync.bench SUITE... [--json PATH] [--quick]``.

Suites: completion, launch, graphs, transfers, peer, all.

Every figure is measured side by side with its alternatives in one process, so ratios
are meaningful on the machine they ran on. See docs/performance.md for recorded runs.
"""
