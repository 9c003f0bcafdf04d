"""An async inference service: a torch MLP behind Starlette, awaited with cuasync.

Routes:

* ``POST /infer``: one forward pass of an MLP (``--layers`` Linear+ReLU blocks of
  ``--hidden`` units, random weights built in code, fp32) on a batch of ``--batch`` rows,
  on a torch stream taken from a pool. Answers ``{"mean": ...}``, the mean of the output.
  Needs torch with CUDA and cuasync's CUDA backend (503 otherwise).
* ``POST /compute`` with ``{"x": [numbers], "scale": 1.0, "shift": 0.0}``: a cuasync-only
  computation, ``tanh(x * scale + shift)`` (upload, one fused kernel, download), on any
  backend, the emulator included. Answers ``{"y": [numbers]}``.
* ``GET /health``: answers at once while the loop is free, with ``in_flight`` (requests
  being handled) and what this server runs; in ``cuasync`` mode also ``wake``, the
  counters of the loop's early wakes (``cuasync.stats()``: how often the loop woke
  itself for the GPU, and how long it spun on flags in all and at most).

How a handler waits for the device is the *mode* (``--mode`` or ``CUASYNC_SERVICE_MODE``):

* ``cuasync``: ``await cuasync.wait(stream)`` (``/compute``: ``await op``). The loop stays
  free while the GPU works;
* ``sync``: ``torch.cuda.synchronize()`` in the handler (``/compute``: ``op.sync()``).
  The loop blocks: ``/health`` and every other request wait for the GPU;
* ``executor``: forward and ``stream.synchronize()`` in ``loop.run_in_executor`` (a
  thread per request in flight; ``/compute``: ``op.sync()`` there);
* ``poll``: record a torch event and poll ``event.query()`` with ``asyncio.sleep``
  (``/compute``: poll ``future.done()``).

Run it (uvicorn, uvloop when installed), and drive it with ``examples/load.py``::

    python examples/torch_service.py --mode cuasync --port 8000
    curl -X POST localhost:8000/infer
    curl -X POST localhost:8000/compute -d '{"x": [0.5, 1, 2]}'

Requires ``pip install cuasync[web]`` (starlette, uvicorn); torch for ``/infer``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

import cuasync

MODES = ("cuasync", "sync", "executor", "poll")
#: The counters of ``cuasync.stats()`` that ``/health`` gives in ``cuasync`` mode.
WAKE_COUNTERS = (
    "early_wakes", "early_late", "early_misses", "early_prewakes", "early_spin_ns",
    "early_spin_max_ns",
)  # fmt: skip
MODE_VARIABLE = "CUASYNC_SERVICE_MODE"
#: How long ``poll`` mode sleeps between two checks (the loop's timers have 1 ms grain).
POLL_INTERVAL_S = 0.001
#: The longest ``x`` that ``/compute`` takes.
MAX_COMPUTE_LENGTH = 1 << 20


@dataclass(frozen=True)
class ModelSpec:
    """The MLP's shape: ``layers`` blocks of Linear(hidden, hidden) + ReLU, on ``batch`` rows."""

    hidden: int = 4096
    layers: int = 8
    batch: int = 512
    streams: int = 4

    def describe(self) -> str:
        return (
            f"MLP {self.layers} x {self.hidden}^2 fp32, batch {self.batch}, {self.streams} streams"
        )


@dataclass
class Lane:
    """One torch stream of the pool, with what a request on it needs.

    A request holds its lane until it has read the result, so ``host`` (pinned memory the
    result is copied to) and ``event`` are never shared by two requests at once.
    """

    stream: Any  # torch.cuda.Stream
    input: Any  # torch.Tensor (batch, hidden) on the device, random, written once
    host: Any  # torch.Tensor (1,) in pinned host memory
    event: Any  # torch.cuda.Event, for poll mode


class TorchModel:
    """The MLP on the GPU and a pool of lanes (streams) that requests take turns on."""

    def __init__(self, spec: ModelSpec) -> None:
        import torch

        self.torch = torch
        self.spec = spec
        self.device = torch.device("cuda", cuasync.get_default_device().ordinal)
        torch.manual_seed(0)
        blocks: list[Any] = []
        for _ in range(spec.layers):
            linear = torch.nn.Linear(spec.hidden, spec.hidden, device=self.device)  # init there
            blocks += [linear, torch.nn.ReLU()]
        self.net = torch.nn.Sequential(*blocks).eval()
        lanes = [
            Lane(
                stream=torch.cuda.Stream(self.device),
                input=torch.randn(spec.batch, spec.hidden, device=self.device),
                host=torch.empty(1, pin_memory=True),
                event=torch.cuda.Event(),
            )
            for _ in range(spec.streams)
        ]
        # The weights and inputs were written on the current stream, which the lanes'
        # streams are not ordered after: wait for them once, here, before serving.
        torch.cuda.synchronize(self.device)
        self.lanes: asyncio.Queue[Lane] = asyncio.Queue()
        for lane in lanes:
            self.enqueue_forward(lane)  # warm-up: cuBLAS sets up each stream at its first use
            self.lanes.put_nowait(lane)
        torch.cuda.synchronize(self.device)

    def enqueue_forward(self, lane: Lane) -> None:
        """Enqueue the forward pass and the copy of its result to ``lane.host``; never waits."""
        torch = self.torch
        with torch.cuda.stream(lane.stream), torch.inference_mode():
            out = self.net(lane.input)
            lane.host.copy_(out.mean().reshape(1), non_blocking=True)

    def forward_and_synchronize(self, lane: Lane) -> float:
        """The executor mode's job, run on a worker thread: enqueue, then block the thread."""
        self.enqueue_forward(lane)
        lane.stream.synchronize()
        return float(lane.host[0])

    async def infer(self, mode: str) -> float:
        """One request: take a lane, run the forward pass, wait for it as ``mode`` says."""
        lane = await self.lanes.get()
        if mode == "executor":
            # The thread keeps using the lane until it returns, even if this request is
            # cancelled: give the lane back only then.
            job = asyncio.get_running_loop().run_in_executor(
                None, self.forward_and_synchronize, lane
            )
            job.add_done_callback(lambda _: self.lanes.put_nowait(lane))
            return await asyncio.shield(job)
        try:
            self.enqueue_forward(lane)
            if mode == "cuasync":
                await cuasync.wait(lane.stream)  # a flag on that stream; the loop runs on
            elif mode == "sync":
                self.torch.cuda.synchronize(self.device)  # blocks the loop
            elif mode == "poll":
                lane.event.record(lane.stream)
                while not lane.event.query():
                    await asyncio.sleep(POLL_INTERVAL_S)
            else:
                raise ValueError(f"unknown mode {mode!r}")
            return float(lane.host[0])
        finally:
            # Work a cancelled request left on the stream runs before the next request's
            # (stream order), so the lane can be reused at once.
            self.lanes.put_nowait(lane)


async def compute(x: np.ndarray, scale: float, shift: float, mode: str) -> np.ndarray:
    """``tanh(x * scale + shift)`` with cuasync ops, waited for as ``mode`` says."""
    op = cuasync.tanh(cuasync.from_host(x) * scale + shift).to_host()  # lazy: nothing runs yet
    if mode == "cuasync":
        return await op
    if mode == "sync":
        return op.sync(allow_in_loop=True)  # blocks the loop until the device is done
    if mode == "executor":
        return await asyncio.get_running_loop().run_in_executor(None, op.sync)
    if mode == "poll":
        future = op.submit()
        while not future.done():
            await asyncio.sleep(POLL_INTERVAL_S)
        return future.result()
    raise ValueError(f"unknown mode {mode!r}")


def _bad_request(message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=400)


def create_app(mode: str = "cuasync", model: TorchModel | None = None) -> Starlette:
    """The service: ``/infer`` runs ``model`` (503 without one), ``/compute`` and
    ``/health`` work on any backend."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    in_flight = 0

    async def health(request: Request) -> JSONResponse:
        answer: dict[str, Any] = {
            "ok": True,
            "mode": mode,
            "in_flight": in_flight,
            "backend": cuasync.backend_name(),
            "model": model.spec.describe() if model is not None else None,
        }
        if mode == "cuasync":
            stats = cuasync.stats()
            answer["wake"] = {name: getattr(stats, name) for name in WAKE_COUNTERS}
        return JSONResponse(answer)

    async def infer(request: Request) -> JSONResponse:
        nonlocal in_flight
        if model is None:
            return JSONResponse(
                {
                    "error": "no torch model here: /infer needs torch with CUDA and cuasync's "
                    "CUDA backend; /compute runs on any backend"
                },
                status_code=503,
            )
        in_flight += 1
        try:
            mean = await model.infer(mode)
        finally:
            in_flight -= 1
        return JSONResponse({"mean": mean})

    async def compute_route(request: Request) -> JSONResponse:
        nonlocal in_flight
        try:
            body = await request.json()
        except ValueError:
            return _bad_request("the body is not JSON")
        if not isinstance(body, dict) or "x" not in body:
            return _bad_request('expected JSON {"x": [numbers], "scale": 1.0, "shift": 0.0}')
        try:
            x = np.asarray(body["x"], dtype=np.float32)
            scale = float(body.get("scale", 1.0))
            shift = float(body.get("shift", 0.0))
        except (ValueError, TypeError):
            return _bad_request("x must be a list of numbers; scale and shift numbers")
        if x.ndim != 1 or not 0 < x.size <= MAX_COMPUTE_LENGTH:
            return _bad_request(f"x must be a list of 1 to {MAX_COMPUTE_LENGTH} numbers")
        in_flight += 1
        try:
            y = await compute(x, scale, shift, mode)
        finally:
            in_flight -= 1
        return JSONResponse({"y": y.tolist()})

    return Starlette(
        routes=[
            Route("/health", health, methods=["GET"]),
            Route("/infer", infer, methods=["POST"]),
            Route("/compute", compute_route, methods=["POST"]),
        ]
    )


def _torch_model(spec: ModelSpec) -> TorchModel | None:
    """The MLP when torch can run it on the GPU cuasync uses; None (and why) otherwise."""
    if cuasync.backend_name() != "cuda":
        print(f"/infer is off: cuasync runs on the {cuasync.backend_name()} backend", flush=True)
        return None
    try:
        import torch
    except ImportError:
        print("/infer is off: torch is not installed", flush=True)
        return None
    if not torch.cuda.is_available():
        print("/infer is off: torch sees no CUDA device", flush=True)
        return None
    return TorchModel(spec)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--mode",
        choices=MODES,
        default=os.environ.get(MODE_VARIABLE, "cuasync"),
        help=f"how handlers wait for the GPU (default: ${MODE_VARIABLE} or cuasync)",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--hidden", type=int, default=ModelSpec.hidden)
    parser.add_argument("--layers", type=int, default=ModelSpec.layers)
    parser.add_argument("--batch", type=int, default=ModelSpec.batch)
    parser.add_argument("--streams", type=int, default=ModelSpec.streams, help="torch streams")
    args = parser.parse_args(argv)

    import uvicorn

    try:
        import uvloop  # noqa: F401

        loop = "uvloop"
    except ImportError:
        loop = "asyncio"
    spec = ModelSpec(args.hidden, args.layers, args.batch, args.streams)
    app = create_app(args.mode, _torch_model(spec))
    print(f"serving on http://{args.host}:{args.port} (mode {args.mode}, {loop})", flush=True)
    uvicorn.run(
        app,
        host=args.host,
        port=args.port,
        loop=loop,
        log_level="warning",
        access_log=False,
        # A pooled client's connection can sit idle for seconds under heavy load; past
        # uvicorn's default 5 s, the server closes it as the client sends on it.
        timeout_keep_alive=60,
    )


if __name__ == "__main__":
    sys.exit(main())
