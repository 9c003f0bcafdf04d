"""A kernel that traps on a real GPU: every waiting future resolves, later work fails fast.

The fault is sticky for the whole process, so it runs in a subprocess.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.gpu

SCRIPT = textwrap.dedent(
    r'''
    import asyncio, time, cuasync
    SRC = r"""
    extern "C" __global__ void spin_then(unsigned long long ns, int trap) {
        unsigned long long t0, t;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
        do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < ns);
        if (trap) __trap();
    }
    """
    k = cuasync.Kernel(SRC, "spin_then")
    k.compile()

    async def main():
        policy = cuasync.StreamPoolRoundRobin(num_streams=4)
        slow = [k[1, 1](200_000_000, 0).schedule(policy) for _ in range(8)]
        t0 = time.monotonic()
        trap = k[1, 1](5_000_000, 1).submit_on(cuasync.Device(0).new_stream())
        results = await asyncio.gather(trap, *slow, return_exceptions=True)
        took = time.monotonic() - t0
        print("kinds=" + ",".join(sorted({type(r).__name__ for r in results})))
        print(f"within_100ms_of_trap={took < 0.005 + 0.100}:{took * 1000:.1f}ms")
        t1 = time.monotonic()
        try:
            await cuasync.zeros((4,))
        except cuasync.errors.DeviceFaultError as e:
            print(f"fail_fast={time.monotonic() - t1 < 0.01}:{e.name}")
        print(f"faults={cuasync.stats().faults}")

    asyncio.run(main())
    '''
)


def test_trap_kernel_resolves_every_waiter_and_fails_later_work_fast() -> None:
    env = {**os.environ, "CUASYNC_BACKEND": "cuda"}
    r = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=120
    )
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    assert "kinds=DeviceFaultError\n" in out, out + r.stderr
    assert "within_100ms_of_trap=True:" in out, out
    assert "fail_fast=True:CUDA_ERROR_" in out, out
    assert "faults=0" not in out and "faults=" in out, out
