"""A kernel that traps: every waiting future resolves, later work fails fast.

The fault is sticky for the whole process, so it runs in a subprocess, on this suite's
backend (``cuasync.testing.trap`` is a real ``__trap()`` on a GPU). On the H200 the
driver itself reports a trap about 350 ms after it happens (measured by polling
``cuStreamQuery`` every 0.5 ms); the contract is that cuasync resolves every waiter
within 100 ms of the driver reporting the fault, so the script measures from there.
"""

from __future__ import annotations

import textwrap

from helpers import run_script

SCRIPT = textwrap.dedent(
    r"""
    import asyncio, threading, time, cuasync, cuasync.testing as ct
    from cuasync._backends import get_backend

    async def main():
        policy = cuasync.StreamPoolRoundRobin(num_streams=4)
        slow = [ct.sleep(200_000).schedule(policy) for _ in range(8)]  # running kernels
        trap_stream = cuasync.Device(0).new_stream()
        ct.sleep(5_000, stream=trap_stream).submit()
        trap = ct.trap(stream=trap_stream).submit()
        reported = []

        def watch():  # when does the driver first report the fault?
            while True:
                try:
                    get_backend().stream_query(trap_stream.handle)
                except Exception:
                    reported.append(time.monotonic())
                    return
                time.sleep(0.0005)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        results = await asyncio.gather(trap, *slow, return_exceptions=True)
        resolved = time.monotonic()
        watcher.join(5)
        print("kinds=" + ",".join(sorted({type(r).__name__ for r in results})))
        delay = (resolved - reported[0]) * 1000
        print(f"within_100ms_of_report={delay < 100}:{delay:.1f}ms")
        t1 = time.monotonic()
        try:
            await cuasync.zeros((4,))
        except cuasync.errors.DeviceFaultError as e:
            print(f"fail_fast={time.monotonic() - t1 < 0.01}:{e.name}")
        print(f"faults={cuasync.stats().faults}")

    asyncio.run(main())
    """
)


def test_trap_kernel_resolves_every_waiter_and_fails_later_work_fast() -> None:
    r = run_script(SCRIPT)
    out = r.stdout
    print("\n" + out)
    assert "kinds=DeviceFaultError\n" in out, out + r.stderr
    assert "within_100ms_of_report=True:" in out, out
    assert "fail_fast=True:CUDA_ERROR_" in out, out
    assert "faults=0" not in out and "faults=" in out, out
