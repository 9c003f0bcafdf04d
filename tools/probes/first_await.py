"""Which driver call blocks the first await of a fresh process (spin 0)?"""

import asyncio
import os
import time

import numpy as np

os.environ["CUASYNC_SPIN_BUDGET_US"] = "0"
import cuasync
import cuasync.testing as ct
from cuasync._backends import get_backend
from cuasync._launch.builtin import builtin_kernels

for k in builtin_kernels():
    k.compile()
ct._device_ops.load()
be = get_backend()
slow = []
for name in dir(be):
    if name.startswith("_") or not callable(getattr(be, name)):
        continue
    f = getattr(be, name)

    def timed(*a, _f=f, _n=name, **k):
        t = time.perf_counter()
        r = _f(*a, **k)
        dt = time.perf_counter() - t
        if dt > 0.0005:
            slow.append((_n, round(dt * 1e3, 2)))
        return r

    setattr(be, name, timed)


async def main():
    for i in range(3):
        slow.clear()
        before = cuasync.stats()
        out = (
            await ct.sleep(5000)
            .then(lambda _: cuasync.from_host(np.arange(4.0)))
            .then(lambda t: t.to_host())
        )
        after = cuasync.stats()
        assert out.tolist() == [0.0, 1.0, 2.0, 3.0]
        print(
            i,
            "inline",
            after.completed_inline - before.completed_inline,
            "reactor",
            after.completed_reactor - before.completed_reactor,
            "slow calls:",
            slow,
        )


asyncio.run(main())
