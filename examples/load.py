"""Load the inference service (examples/torch_service.py) in each mode and compare.

For each mode (``cuasync``, ``sync``, ``executor``, ``poll``) this starts the service
under uvicorn (uvloop when installed) on a free port of the loopback interface, drives
requests at a fixed concurrency while probing ``/health``, stops it, and prints one table:
requests/s, request latency p50 and p99, ``/health`` p99 (how long the loop takes to
answer a trivial route while it serves inference), and the server process's CPU seconds
per 1000 requests (user + system, from ``/proc/<pid>/stat``; the probes are included).

Three cases:

* ``anchor``: the MLP 8 x 4096^2 fp32, batch 512, 32 requests at a time;
* ``latency``: the same model, one request at a time;
* ``small``: a small MLP (2 x 512^2, batch 32), 64 at a time: a high request rate,
  where what the server spends per request shows.

Each case runs until ``--requests`` requests or ``--duration`` seconds, whichever comes
first; the defaults take about 4 minutes on an H200 (server starts included).
``--rounds N`` repeats every mode N times, the modes alternated in each round, and the
table gives each figure's median over the rounds. Below the table, issue 32's targets
as ratios: ``latency`` cuasync p50 / sync p50 (<= 1.02); ``anchor`` cuasync req/s over
the best other mode's (>= 0.98; with both modes' lowest and highest round, how far
apart a round can be) and its ``/health`` p99 over theirs. With several rounds each
ratio is also given round by round (the median and range of the rounds' ratios: the
modes of one round ran on the same host state, so a host that drifts moves both)::

    python examples/load.py                       # torch + CUDA: POST /infer (else as below)
    python examples/load.py --backend emulator    # no GPU: POST /compute on the emulator
    python examples/load.py --modes cuasync,sync --cases anchor --duration 20
    python examples/load.py --cases anchor,latency --rounds 3   # issue 32's rows
    python examples/load.py --cases anchor --rate 300 --rounds 3   # every mode at 300 req/s

By default the load is a closed loop: each of a case's clients sends its next request when
its last one answers, so a faster mode serves more requests, and the modes' ``/health``
p99 are measured at unequal load. ``--rate R`` makes it an open loop instead: a case's
requests are due on a fixed schedule, ``R`` per second (request ``i`` at ``i / R`` s from
the start), and each starts at its due time (at once if that has passed), unless the
case's concurrency are in flight: then it waits for one to answer, so a mode that cannot
keep up queues requests rather than the client piling them up. Every mode then serves the
same rate (the same ``R`` in each case: choose ``--cases`` to suit), and each latency
counts from the request's due time, so the time it queued behind schedule is part of it.
A request is *behind schedule* if it started more than one interval (``1 / R``, at least
1 ms: the loop's timer resolution) after its due time, or not before the run's end; the
table gives the count, and req/s counts the requests served over the schedule's span (the
requests due / ``R``): ``R`` for a mode that keeps up. The targets then give each mode's
rate and count behind instead of the throughput ratio.

With ``--backend emulator`` the cases drive the cuasync-only route ``/compute`` instead,
and each emulated device command takes ``--emu-delay-us`` (``anchor``, ``latency``) or
nothing (``small``), standing in for GPU time. This is for trying the script anywhere;
its numbers say nothing about a GPU.

The script talks to the loopback interface only: it refuses any other ``--host``.
Requires ``pip install cuasync[web]`` (starlette, uvicorn, httpx).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import ipaddress
import itertools
import json
import math
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

SERVICE = Path(__file__).resolve().parent / "torch_service.py"
MODES = ("cuasync", "sync", "executor", "poll")
CASES = ("anchor", "latency", "small")
JSON_HEADERS = {"content-type": "application/json"}
REQUEST_TIMEOUT_S = 120.0
STARTUP_TIMEOUT_S = 300.0
#: Under ``--rate``, the least lateness that counts as behind schedule: the event loop's
#: timer resolution (uvloop's timers, and asyncio's epoll timeouts, count whole ms).
LATE_FLOOR_S = 0.001


@dataclass(frozen=True)
class ServerSpec:
    """What one server process runs: extra arguments and environment for the service."""

    args: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    description: str


@dataclass(frozen=True)
class Case:
    """One measurement: a server, a route and body, and how many requests at a time."""

    name: str
    server: ServerSpec
    path: str
    body: bytes
    concurrency: int


@dataclass
class Result:
    """What one (case, mode) run measured."""

    completed: int
    elapsed_s: float
    latencies_s: list[float]
    health_s: list[float]
    cpu_s: float
    errors: int
    first_error: str | None
    #: Under ``--rate``: the requests due before the run's end, those of them that started
    #: behind schedule (or not at all), and the schedule's span (due / rate), over which
    #: ``per_second`` counts instead of ``elapsed_s``.
    due: int = 0
    behind: int = 0
    schedule_s: float | None = None
    #: In ``cuasync`` mode: the server's early-wake counters over the run (``/health``'s
    #: ``wake``: each the difference, but the longest spin, which is the server's so far).
    wake: dict[str, int] | None = None

    @property
    def per_second(self) -> float:
        span = self.elapsed_s if self.schedule_s is None else self.schedule_s
        return self.completed / span if span > 0 else math.nan

    @property
    def cpu_per_1000(self) -> float:
        return 1000 * self.cpu_s / self.completed if self.completed else math.nan


@dataclass
class Requests:
    """The outcome of a batch of requests."""

    latencies_s: list[float] = field(default_factory=list)
    errors: int = 0
    first_error: str | None = None
    #: Open loop only (``open_loop``): the requests due, and those behind schedule.
    due: int = 0
    behind: int = 0

    def add(self, error: str | None, latency_s: float) -> None:
        """One request's outcome: its latency if it succeeded (``error`` None)."""
        if error is None:
            self.latencies_s.append(latency_s)
        else:
            self.errors += 1
            self.first_error = self.first_error or error


def check_loopback(host: str) -> None:
    """Refuse any host that is not (or does not resolve only to) a loopback address."""
    try:
        addresses = {info[4][0] for info in socket.getaddrinfo(host, None)}
    except socket.gaierror as exc:
        raise ValueError(f"cannot resolve {host!r}: {exc}") from exc
    for address in addresses:
        if not ipaddress.ip_address(address.split("%")[0]).is_loopback:
            raise ValueError(
                f"{host!r} is not a loopback address ({address}): this script only loads a local server"
            )


def free_port(host: str) -> int:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (all its threads) so far."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()  # the name may hold spaces
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime
    except OSError:
        pass
    try:
        import psutil  # type: ignore[import-not-found]
    except ImportError:
        return math.nan
    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


def percentile(values: list[float], q: float) -> float:
    """The nearest-rank ``q``-th percentile (0 < q <= 100) of ``values``."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def server_environment(spec: ServerSpec) -> dict[str, str]:
    """This environment, the spec's variables, and a PYTHONPATH that finds the cuasync this
    script finds (the service runs from examples/, not from the repository root)."""
    env = dict(os.environ)
    env.update(spec.env)
    found = importlib.util.find_spec("cuasync")
    if found is None or found.origin is None:
        raise SystemExit("cuasync is not importable: install it or set PYTHONPATH")
    package_parent = str(Path(found.origin).parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_parent, env.get("PYTHONPATH")]))
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


class Server:
    """One service process on ``host``, in ``mode``; stopped (SIGTERM) on exit."""

    def __init__(self, spec: ServerSpec, mode: str, host: str) -> None:
        self.spec = spec
        self.port = free_port(host)
        self.url = (
            f"http://{host}:{self.port}" if ":" not in host else f"http://[{host}]:{self.port}"
        )
        self.log = tempfile.TemporaryFile()  # noqa: SIM115 (closed by stop())
        argv = [
            sys.executable,
            str(SERVICE),
            f"--mode={mode}",
            f"--host={host}",
            f"--port={self.port}",
        ]
        self.process = subprocess.Popen(
            [*argv, *spec.args],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env=server_environment(spec),
        )

    @property
    def pid(self) -> int:
        return self.process.pid

    def output(self) -> str:
        self.log.seek(0)
        return self.log.read().decode(errors="replace")

    async def ready(self) -> dict[str, Any]:
        """Wait until ``/health`` answers; its answer."""
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        async with httpx.AsyncClient(base_url=self.url, timeout=5.0) as client:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    break
                try:
                    response = await client.get("/health")
                    if response.status_code == 200:
                        return dict(response.json())
                except httpx.TransportError:
                    pass
                await asyncio.sleep(0.1)
        raise SystemExit(f"the service did not start:\n{self.output()}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()


async def post(client: httpx.AsyncClient, case: Case) -> str | None:
    """One of ``case``'s requests: None if it answered 200, else what went wrong."""
    try:
        response = await client.post(case.path, content=case.body, headers=JSON_HEADERS)
        return (
            None
            if response.status_code == 200
            else f"{response.status_code}: {response.text[:200]}"
        )
    except httpx.HTTPError as exc:
        return f"{type(exc).__name__}: {exc}"


async def send_requests(
    client: httpx.AsyncClient, case: Case, count: int, deadline: float
) -> Requests:
    """``count`` requests (or as many as fit before ``deadline``), ``case.concurrency`` at a
    time (a closed loop); the latency of each one that answered 200."""
    outcome = Requests()
    issued = 0

    async def worker() -> None:
        nonlocal issued
        while issued < count and time.perf_counter() < deadline:
            issued += 1
            start = time.perf_counter()
            error = await post(client, case)
            outcome.add(error, time.perf_counter() - start)

    await asyncio.gather(*(worker() for _ in range(case.concurrency)))
    return outcome


def behind_after(rate: float) -> float:
    """How late a request may start at ``rate`` per second and still be on schedule: one
    interval, but at least the loop's timer resolution (``LATE_FLOOR_S``)."""
    return max(1 / rate, LATE_FLOOR_S)


async def open_loop(
    send: Callable[[], Awaitable[str | None]],
    count: int,
    rate: float,
    concurrency: int,
    start: float,
    deadline: float,
    clock: Callable[[], float] = time.perf_counter,
) -> Requests:
    """``send()`` on a schedule: request ``i`` is due at ``start + i / rate`` (``count`` of
    them at most, those due before ``deadline``) and starts then, at once if that has
    passed, or when one of the ``concurrency`` in flight answers (a server that cannot keep
    up queues them). Each latency counts from the due time (or the start, if a timer woke
    early), the time queued included. A request that has no slot by ``deadline`` and would
    start behind schedule does not start; ``behind`` counts it and those that started more
    than ``behind_after(rate)`` late. ``send`` gives None for a success, else the error."""
    outcome = Requests()
    slots = asyncio.Semaphore(concurrency)
    late_s = behind_after(rate)

    async def one(begin: float) -> None:
        try:
            error = await send()
            outcome.add(error, clock() - begin)
        finally:
            slots.release()

    dues = itertools.takewhile(lambda t: t < deadline, (start + i / rate for i in range(count)))
    async with asyncio.TaskGroup() as requests:  # (cancelled or failed: none outlives it)
        for due in dues:
            outcome.due += 1
            if (wait := due - clock()) > 0:
                await asyncio.sleep(wait)
            await slots.acquire()  # (at once, unless `concurrency` are in flight)
            now = clock()
            late = now - due > late_s
            if late and now >= deadline:  # the run is over: this one and the rest never start
                slots.release()
                rest = sum(1 for _ in dues)
                outcome.due += rest
                outcome.behind += 1 + rest
                break
            outcome.behind += late
            requests.create_task(one(min(due, now)))
    return outcome


async def probe_health(
    client: httpx.AsyncClient, stop: asyncio.Event, interval_s: float
) -> list[float]:
    """GET /health every ``interval_s`` until ``stop``; the latency of each probe."""
    latencies: list[float] = []
    while not stop.is_set():
        start = time.perf_counter()
        response = await client.get("/health")
        response.raise_for_status()
        latencies.append(time.perf_counter() - start)
        await asyncio.sleep(interval_s)
    return latencies


async def measure(server: Server, case: Case, args: argparse.Namespace) -> Result:
    """Warm up, then drive ``case`` against ``server`` while probing ``/health``."""
    limits = httpx.Limits(
        max_connections=case.concurrency, max_keepalive_connections=case.concurrency
    )
    async with (
        httpx.AsyncClient(base_url=server.url, limits=limits, timeout=REQUEST_TIMEOUT_S) as client,
        httpx.AsyncClient(base_url=server.url, timeout=REQUEST_TIMEOUT_S) as probe_client,
    ):
        await send_requests(client, case, args.warmup, math.inf)
        wake_before = await wake_counters(probe_client)
        stop = asyncio.Event()
        probes = asyncio.create_task(
            probe_health(probe_client, stop, args.health_interval_ms / 1000)
        )
        cpu_before = cpu_seconds(server.pid)
        start = time.perf_counter()
        deadline = start + args.duration
        if args.rate is None:
            outcome = await send_requests(client, case, args.requests, deadline)
        else:
            outcome = await open_loop(
                lambda: post(client, case),
                args.requests,
                args.rate,
                case.concurrency,
                start,
                deadline,
            )
        elapsed = time.perf_counter() - start
        cpu = cpu_seconds(server.pid) - cpu_before
        stop.set()
        health = await probes
        wake_after = await wake_counters(probe_client)
    return Result(
        completed=len(outcome.latencies_s),
        elapsed_s=elapsed,
        latencies_s=outcome.latencies_s,
        health_s=health,
        cpu_s=cpu,
        errors=outcome.errors,
        first_error=outcome.first_error,
        due=outcome.due,
        behind=outcome.behind,
        schedule_s=None if args.rate is None else outcome.due / args.rate,
        wake=wake_change(wake_before, wake_after),
    )


async def wake_counters(client: httpx.AsyncClient) -> dict[str, int] | None:
    """The server's early-wake counters (``/health``'s ``wake``; None: not cuasync mode)."""
    response = await client.get("/health")
    response.raise_for_status()
    wake = response.json().get("wake")
    return None if wake is None else {name: int(value) for name, value in wake.items()}


def wake_change(
    before: dict[str, int] | None, after: dict[str, int] | None
) -> dict[str, int] | None:
    """What the counters counted between two reads (the longest spin: as of the second)."""
    if before is None or after is None:
        return None
    return {
        name: value if name == "early_spin_max_ns" else value - before.get(name, 0)
        for name, value in after.items()
    }


def format_wake(case: str, runs: list[Result]) -> str | None:
    """What the loop's early wake did in ``case``'s ``cuasync`` runs (None: no counters):
    its wakes (those that looked only after the landing: late) and missed windows per
    request, the time it spun per request, and the
    server's longest spin so far (how long a ``/health`` probe could wait behind one; the
    server's counter, warm-ups and earlier cases on the same server included)."""
    wakes = [r.wake for r in runs if r.wake is not None]
    requests = sum(r.completed for r in runs)
    if not wakes or not requests:
        return None

    def total(name: str) -> int:
        return sum(w.get(name, 0) for w in wakes)

    longest = max(w.get("early_spin_max_ns", 0) for w in wakes)
    return (
        f"{case}, cuasync's early wake (the server's counters, every round):"
        f" {total('early_wakes') / requests:.2f} wakes ({total('early_late') / requests:.2f}"
        f" late) and {total('early_misses') / requests:.2f} missed windows a request,"
        f" {total('early_spin_ns') / requests / 1e3:.1f} us spun a request,"
        f" the server's longest spin so far {longest / 1e3:.0f} us"
    )


def torch_cases(args: argparse.Namespace) -> list[Case]:
    """The cases on a GPU: POST /infer to the torch MLP."""

    def model(hidden: int, layers: int, batch: int) -> ServerSpec:
        return ServerSpec(
            args=(
                f"--hidden={hidden}",
                f"--layers={layers}",
                f"--batch={batch}",
                f"--streams={args.streams}",
            ),
            env=(("CUASYNC_BACKEND", "cuda"),),
            description=f"MLP {layers} x {hidden}^2 fp32, batch {batch}",
        )

    big = model(args.hidden, args.layers, args.batch)
    small = model(args.small_hidden, args.small_layers, args.small_batch)
    return [
        Case("anchor", big, "/infer", b"{}", args.concurrency),
        Case("latency", big, "/infer", b"{}", 1),
        Case("small", small, "/infer", b"{}", args.small_concurrency),
    ]


def emulator_cases(args: argparse.Namespace) -> list[Case]:
    """The cases without a GPU: POST /compute (tanh of a vector) on the emulator."""

    def server(delay_us: int) -> ServerSpec:
        return ServerSpec(
            args=(),
            env=(("CUASYNC_BACKEND", "emulator"), ("CUASYNC_EMU_DELAY_US", str(delay_us))),
            description=f"/compute on the emulator, {delay_us} us per device command",
        )

    def body(width: int) -> bytes:
        return json.dumps({"x": [i / width for i in range(width)], "scale": 2.0}).encode()

    slow = server(args.emu_delay_us)
    return [
        Case("anchor", slow, "/compute", body(args.width), args.concurrency),
        Case("latency", slow, "/compute", body(args.width), 1),
        Case("small", server(0), "/compute", body(args.small_width), args.small_concurrency),
    ]


#: The table's columns: title and alignment (its width is the title's).
COLUMNS = (
    ("case", "<8"),
    ("mode", "<9"),
    ("conc", ">4"),
    ("requests", ">8"),
    ("req/s", ">8"),
    ("p50 ms", ">8"),
    ("p99 ms", ">8"),
    ("health p99 ms", ">13"),
    ("CPU s/1k req", ">12"),
    ("errors", ">6"),
)
#: Under ``--rate``: the same, and the requests behind schedule before the errors.
OPEN_LOOP_COLUMNS = (*COLUMNS[:-1], ("behind", ">6"), COLUMNS[-1])


def format_row(values: list[str], columns: tuple[tuple[str, str], ...] = COLUMNS) -> str:
    return " ".join(f"{value:{align}}" for value, (_, align) in zip(values, columns, strict=True))


def median(values: list[float]) -> float:
    """The median of ``values`` (NaN for none)."""
    return statistics.median(values) if values else math.nan


@dataclass
class Summary:
    """One (case, mode)'s figures: the median over its rounds of each round's figure."""

    completed: int
    per_second: float
    #: Each round's rate, in the order the rounds ran (modes alternate in each round, so
    #: two modes' round ``i`` ran on the same host state: their ratio is paired).
    per_second_rounds: tuple[float, ...]
    #: Each round's p50 and ``/health`` p99, in the same order.
    p50_rounds: tuple[float, ...]
    health_p99_rounds: tuple[float, ...]
    p50_s: float
    p99_s: float
    health_p99_s: float
    cpu_per_1000: float
    errors: int
    #: Under ``--rate``: the requests due and those behind schedule, summed over the rounds.
    due: int = 0
    behind: int = 0
    #: The ``/health`` p99 of every round's probes together (one round's p99 rests on its
    #: few slowest probes), and how many rounds they came from.
    health_p99_pooled_s: float = math.nan
    rounds: int = 1

    @property
    def per_second_range(self) -> tuple[float, float]:
        """The lowest and highest rate of its rounds (how far one round from another)."""
        rates = self.per_second_rounds
        return (min(rates), max(rates)) if rates else (math.nan, math.nan)

    @classmethod
    def of(cls, rounds: list[Result]) -> Summary:
        def each(f: Callable[[Result], float]) -> float:
            return median([f(r) for r in rounds])

        p50s = tuple(percentile(r.latencies_s, 50) for r in rounds)
        healths = tuple(percentile(r.health_s, 99) for r in rounds)
        return cls(
            completed=sum(r.completed for r in rounds),
            per_second=each(lambda r: r.per_second),
            per_second_rounds=tuple(r.per_second for r in rounds),
            p50_rounds=p50s,
            p50_s=median(list(p50s)),
            p99_s=each(lambda r: percentile(r.latencies_s, 99)),
            health_p99_rounds=healths,
            health_p99_s=median(list(healths)),
            cpu_per_1000=each(lambda r: r.cpu_per_1000),
            errors=sum(r.errors for r in rounds),
            due=sum(r.due for r in rounds),
            behind=sum(r.behind for r in rounds),
            health_p99_pooled_s=percentile([t for r in rounds for t in r.health_s], 99),
            rounds=len(rounds),
        )


def format_table(
    cases: list[Case],
    modes: list[str],
    results: dict[tuple[str, str], Summary],
    rate: float | None = None,
) -> str:
    """One row per (case, mode), the modes of a case next to each other; under ``rate``
    (an open loop) with the requests behind schedule."""
    columns = COLUMNS if rate is None else OPEN_LOOP_COLUMNS
    header = format_row([title for title, _ in columns], columns)
    lines = [header, "-" * len(header)]
    for case in cases:
        for mode in modes:
            r = results[case.name, mode]
            values = [case.name, mode, str(case.concurrency), str(r.completed)]
            values += [f"{r.per_second:.1f}", f"{1000 * r.p50_s:.2f}", f"{1000 * r.p99_s:.2f}"]
            values += [f"{1000 * r.health_p99_s:.2f}", f"{r.cpu_per_1000:.3f}"]
            values += [str(r.errors)] if rate is None else [str(r.behind), str(r.errors)]
            lines.append(format_row(values, columns))
    return "\n".join(lines)


def paired(mine: tuple[float, ...], theirs: tuple[float, ...]) -> str:
    """The ratio of two modes' figures round by round (the same round ran both on the same
    host state, so a host that drifts between rounds moves both): the median and range of
    the rounds' ratios, as a suffix of a target line; empty for fewer than two rounds.

    >>> paired((2.0, 3.0, 4.0), (2.0, 2.0, 2.0))
    '; round by round: median 1.500, 1.000-2.000'
    """
    ratios = [m / t for m, t in zip(mine, theirs, strict=False) if t]
    if len(ratios) < 2:
        return ""
    return f"; round by round: median {median(ratios):.3f}, {min(ratios):.3f}-{max(ratios):.3f}"


def pooled(mine: Summary, theirs: Summary) -> str:
    """The ratio of two modes' ``/health`` p99 over all their rounds' probes together, as a
    suffix of a target line (steadier than one round's p99); empty for fewer than two
    rounds."""
    if min(mine.rounds, theirs.rounds) < 2 or not theirs.health_p99_pooled_s > 0:
        return ""
    ratio = mine.health_p99_pooled_s / theirs.health_p99_pooled_s
    return f"; the rounds' probes pooled: {ratio:.3f}"


def format_targets(
    results: dict[tuple[str, str], Summary], modes: list[str], rate: float | None = None
) -> list[str]:
    """Issue 32's targets for the service, as ratios of this run's figures (the cases and
    modes it ran: none without cuasync and another mode), after a line that says the load's
    shape. Under ``rate`` (an open loop: every mode serves the same rate) the throughput
    ratio gives way to each mode's rate and requests behind schedule."""
    lines = []

    def served(case: str) -> str:
        """Each mode's rate in ``case`` and its requests behind schedule."""
        rows = [(m, results[case, m]) for m in modes if (case, m) in results]
        each = [f"{m} {r.per_second:.1f} req/s ({r.behind} of {r.due} behind)" for m, r in rows]
        return f"{case}, served: " + ", ".join(each)

    latency, sync = results.get(("latency", "cuasync")), results.get(("latency", "sync"))
    if latency is not None and sync is not None:
        ratio = latency.p50_s / sync.p50_s
        at_a_time = "1 at a time" if rate is None else "at most 1 at a time"
        lines.append(
            f"latency, {at_a_time}: cuasync p50 / sync p50 = {ratio:.3f} (target <= 1.02)"
            + paired(latency.p50_rounds, sync.p50_rounds)
        )
        if rate is not None:
            lines.append(served("latency"))
    anchor = results.get(("anchor", "cuasync"))
    others = {
        m: results[("anchor", m)] for m in modes if m != "cuasync" and ("anchor", m) in results
    }
    if anchor is not None and others:
        if rate is not None:  # every mode served the same rate: no throughput ratio
            lines.append(served("anchor"))
        else:
            best = max(others, key=lambda m: others[m].per_second)
            ratio = anchor.per_second / others[best].per_second
            lo, hi = anchor.per_second_range
            blo, bhi = others[best].per_second_range
            lines.append(
                f"anchor: cuasync req/s / the best other mode's ({best}) = {ratio:.3f}"
                f" (target >= 0.98; rounds: cuasync {lo:.1f}-{hi:.1f},"
                f" {best} {blo:.1f}-{bhi:.1f} req/s)"
                + paired(anchor.per_second_rounds, others[best].per_second_rounds)
            )
        calm = min(others, key=lambda m: others[m].health_p99_s)
        ratio = anchor.health_p99_s / others[calm].health_p99_s
        lines.append(
            f"anchor: cuasync /health p99 / the best other mode's ({calm}) = {ratio:.3f}"
            " (target: unaffected, <= 1.0)"
            + paired(anchor.health_p99_rounds, others[calm].health_p99_rounds)
            + pooled(anchor, others[calm])
        )
    if not lines:
        return lines
    shape = (
        "closed loop (each client sends its next request when its last one answers)"
        if rate is None
        else f"open loop at {rate:g} req/s (requests start on schedule, at most the case's"
        " concurrency in flight; latency from each one's due time; behind schedule:"
        f" started over {1000 * behind_after(rate):.2f} ms late, or not at all)"
    )
    return [f"load: {shape}", *lines]


async def run(args: argparse.Namespace) -> int:
    modes = args.modes
    cases = [
        c
        for c in (emulator_cases(args) if args.backend == "emulator" else torch_cases(args))
        if c.name in args.cases
    ]
    shape = "" if args.rate is None else f"; open loop at {args.rate:g} req/s"
    print(
        f"backend: {args.backend}; modes: {', '.join(modes)}; each case: up to {args.requests} requests or {args.duration:g} s{shape}"
    )
    at_most = "" if args.rate is None else "at most "
    for case in cases:
        print(f"  {case.name:<8} {case.server.description}; {at_most}{case.concurrency} at a time")
    rounds: dict[tuple[str, str], list[Result]] = {}
    servers = list(dict.fromkeys(case.server for case in cases))  # in order, each once
    for turn in range(args.rounds):
        for spec in servers:
            for mode in modes:  # (alternated: each round runs every mode once)
                server = Server(spec, mode, args.host)
                try:
                    health = await server.ready()
                    if args.backend == "torch" and health.get("model") is None:
                        raise SystemExit(f"the service runs no torch model:\n{server.output()}")
                    for case in (c for c in cases if c.server == spec):
                        result = await measure(server, case, args)
                        rounds.setdefault((case.name, mode), []).append(result)
                        behind = (
                            ""
                            if args.rate is None
                            else f", {result.behind} of {result.due} behind schedule"
                        )
                        print(
                            f"  done: {case.name} {mode}, round {turn + 1} of {args.rounds}"
                            f" ({result.completed} requests, {result.elapsed_s:.1f} s{behind})",
                            flush=True,
                        )
                finally:
                    server.stop()
    results = {key: Summary.of(runs) for key, runs in rounds.items()}
    print()
    if args.rounds > 1:
        sums = "requests, errors" if args.rate is None else "requests, behind, errors"
        print(f"(each figure: the median over {args.rounds} rounds; {sums}: their sum)")
    print(format_table(cases, modes, results, args.rate))
    targets = format_targets(results, modes, args.rate)
    if targets:
        print("\n-- targets (issue 32)")
        print("\n".join(targets))
    wakes = [format_wake(case.name, rounds.get((case.name, "cuasync"), [])) for case in cases]
    if any(wakes):
        print("\n-- the loop's early wake in cuasync mode")
        print("\n".join(line for line in wakes if line))
    failures = [(key, r.first_error) for key, runs in rounds.items() for r in runs if r.errors]
    for (case_name, mode), error in failures:
        print(f"{case_name} {mode}: first error: {error}")
    return 1 if failures else 0


def default_backend() -> str:
    """``torch`` where torch is installed and sees a GPU, else ``emulator`` (said so)."""
    try:
        import torch
    except ImportError:
        why = "torch is not installed"
    else:
        if torch.cuda.is_available():
            return "torch"
        why = "torch sees no GPU"
    print(f"({why}: the emulator's /compute; --backend torch to insist)")
    return "emulator"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add = parser.add_argument
    add(
        "--backend",
        choices=("torch", "emulator"),
        default=None,
        help="torch: /infer on a GPU; emulator: /compute (default: torch where torch sees "
        "a GPU, else emulator)",
    )
    add("--modes", default=",".join(MODES), help="comma-separated, from " + ",".join(MODES))
    add("--cases", default=",".join(CASES), help="comma-separated, from " + ",".join(CASES))
    add("--requests", type=int, default=20000, help="requests per case at most (default 20000)")
    add("--duration", type=float, default=8.0, help="seconds per case at most (default 8)")
    add("--warmup", type=int, default=64, help="requests before measuring (default 64)")
    add("--rounds", type=int, default=1, help="runs of every mode, alternated (default 1)")
    add("--concurrency", type=int, default=32, help="anchor: requests at a time (default 32)")
    add("--small-concurrency", type=int, default=64, help="small: requests at a time (default 64)")
    add(
        "--rate",
        type=float,
        default=None,
        metavar="R",
        help="an open loop: start R requests per second in each case, on a fixed schedule"
        " (at most its concurrency in flight; latency counts from each request's due time,"
        " queueing included); default: a closed loop",
    )
    add("--hidden", type=int, default=4096)
    add("--layers", type=int, default=8)
    add("--batch", type=int, default=512)
    add("--small-hidden", type=int, default=512)
    add("--small-layers", type=int, default=2)
    add("--small-batch", type=int, default=32)
    add("--streams", type=int, default=4, help="torch streams in the server's pool (default 4)")
    add("--width", type=int, default=256, help="emulator: length of x for anchor and latency")
    add("--small-width", type=int, default=16, help="emulator: length of x for small")
    add(
        "--emu-delay-us",
        type=int,
        default=1000,
        help="emulator: time per device command (anchor, latency)",
    )
    add("--health-interval-ms", type=float, default=10.0, help="between two /health probes")
    add("--host", default="127.0.0.1", help="a loopback address (anything else is refused)")
    add(
        "--quick",
        action="store_true",
        help="a smoke run: 1 s and 300 requests per case, 8 warm-up requests",
    )
    args = parser.parse_args(argv)
    if args.quick:  # shorter defaults; options given explicitly still win
        parser.set_defaults(duration=1.0, requests=300, warmup=8)
        args = parser.parse_args(argv)
    if args.backend is None:
        args.backend = default_backend()
    try:
        check_loopback(args.host)
    except ValueError as exc:
        parser.error(str(exc))
    if args.rounds < 1:
        parser.error(f"--rounds must be 1 or more; got {args.rounds}")
    if args.rate is not None and not 0 < args.rate < math.inf:
        parser.error(f"--rate must be a positive number of requests per second; got {args.rate}")
    args.modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    args.cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    for value, allowed, option in ((args.modes, MODES, "--modes"), (args.cases, CASES, "--cases")):
        unknown = sorted(set(value) - set(allowed))
        if unknown or not value:
            parser.error(
                f"{option} takes names from {','.join(allowed)}; got {','.join(value) or 'none'}"
            )
    return args


def run_on_uvloop(main: Callable[[], Coroutine[Any, Any, int]]) -> int:
    """Run the client on uvloop when installed (as the server), else asyncio."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main())
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main())


if __name__ == "__main__":
    arguments = parse_args(None)
    sys.exit(run_on_uvloop(lambda: run(arguments)))
