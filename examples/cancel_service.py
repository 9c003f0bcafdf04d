"""A GPU service whose disconnected clients give the GPU its time back (cancel scopes).

``Service.handle`` serves one request: a chain of reductions over the model's weights
(``sum(w * x + b, axis=1)``, ``--steps`` kernels), inside ``cuasync.cancel_scope()``.
The load below sends ``--requests`` requests at once, all queued on one stream; a
fraction of the clients (``--disconnect``) give up after ``--patience`` seconds, as a
client that disconnects or times out does. Their task is cancelled, which cancels the
scope: the kernels they still had queued return at once on the device.

The load runs twice, without scopes and with them, and prints the stream's busy time
(device events: its first kernel to its last) of each, and the GPU time the
disconnected clients gave back::

    python examples/cancel_service.py                   # a GPU: ~0.5 ms kernels
    CUASYNC_BACKEND=emulator python examples/cancel_service.py --requests 16

On the emulator the kernels are tiny and the timings say nothing about a GPU.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
from typing import Any

import cuasync


class Service:
    """The model's weights on one stream; ``handle`` is a request's handler."""

    def __init__(self, shape: tuple[int, int], steps: int, stream: cuasync.Stream) -> None:
        self.shape, self.steps, self.stream = shape, steps, stream
        self.scoped = True  # requests inside cancel scopes (the point of the example)
        self.queued = 0  # requests whose chain is on the stream
        self.w: Any = None
        self.b: Any = None

    async def load_weights(self) -> None:
        self.w = await cuasync.full(self.shape, 0.5, "float32")
        self.b = await cuasync.full(self.shape, 0.25, "float32")

    def _step(self, x: float) -> Any:
        return cuasync.sum(self.w * x + self.b, axis=1)

    async def handle(self, x: float) -> float:
        scope = cuasync.cancel_scope() if self.scoped else contextlib.nullcontext()
        with scope:
            op = self._step(x)
            for _ in range(self.steps - 1):
                op = op.then(lambda _: self._step(x))
            self.queued += 1  # (the await below enqueues the whole chain, then waits)
            out = await op
            host = await out.to_host()
        return float(host[0])


async def run_load(service: Service, requests: int, disconnect: float, patience: float) -> float:
    """Send ``requests`` at once; every client in ``1 / disconnect`` leaves after
    ``patience`` s. Returns the stream's busy time (ms)."""
    every = round(1 / disconnect) if disconnect > 0 else 0
    service.queued = 0

    async def client(i: int) -> float | None:
        if every and i % every == 0:  # an impatient client: it disconnects
            try:
                return await asyncio.wait_for(service.handle(float(i)), patience)
            except TimeoutError:
                return None
        return await service.handle(float(i))

    stream = service.stream
    start = cuasync.Event(stream.device, timing=True).record(stream)
    tasks = [asyncio.create_task(client(i)) for i in range(requests)]
    while service.queued < requests:  # every chain on the stream
        await asyncio.sleep(0)
    end = cuasync.Event(stream.device, timing=True).record(stream)
    results = await asyncio.gather(*tasks)
    await cuasync.wait(end)
    left = sum(r is None for r in results)
    busy = start.elapsed_ms(end)
    print(f"  {'scopes' if service.scoped else 'no scopes':<10} {busy:10.2f} ms busy, "
          f"{requests - left} served, {left} disconnected")  # fmt: skip
    return busy


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--steps", type=int, default=20, help="kernels a request")
    parser.add_argument("--disconnect", type=float, default=0.5, help="fraction that leaves")
    parser.add_argument("--patience", type=float, default=0.005, help="their patience (s)")
    args = parser.parse_args()
    emulated = cuasync.backend_name() == "emulator"
    # 2 GiB read a kernel on a GPU (~0.5 ms on an H200): the host enqueues a request's
    # chain faster than the GPU runs it, so a queue builds up for the cancels to skip
    # (with ~0.1 ms kernels the GPU keeps pace with the enqueues and nothing is queued)
    shape = (8, 128) if emulated else (1 << 16, 1 << 12)
    device = cuasync.get_default_device()
    stream = device.new_stream()
    service = Service(shape, args.steps, stream)
    with cuasync.use_policy(cuasync.SingleStream(stream)):
        await service.load_weights()
        await service.handle(0.0)  # (the kernels compiled and loaded, the scopes' words made)
        print(f"{args.requests} requests x {args.steps} kernels, 1 in "
              f"{round(1 / args.disconnect) if args.disconnect else 0} disconnects "
              f"after {args.patience * 1e3:g} ms")  # fmt: skip
        service.scoped = False
        without = await run_load(service, args.requests, args.disconnect, args.patience)
        service.scoped = True
        with_scopes = await run_load(service, args.requests, args.disconnect, args.patience)
    freed = without - with_scopes
    print(f"GPU time freed by the disconnected clients: {freed:.2f} ms "
          f"({100 * freed / without if without else 0:.0f} % of the stream's time)"
          + (" (emulator: host threads, not a GPU's time)" if emulated else ""))  # fmt: skip


if __name__ == "__main__":
    asyncio.run(main())
