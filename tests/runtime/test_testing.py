"""cuasync.testing: gates, the sleep op, the trap and the pytest plugin, on both backends."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest
from helpers import run_script

import cuasync
import cuasync.testing as ct
from cuasync.errors import ArgumentError, CaptureError

pytestmark = pytest.mark.anyio


async def test_gate_holds_work_submitted_after_it_until_opened(anyio_backend, baseline) -> None:
    s = cuasync.Device(0).new_stream()
    x = await cuasync.zeros((256,)).submit_on(s)
    with ct.gate(s) as g:
        fut = cuasync.fill(x, 7.0).submit_on(s)
        for _ in range(50):
            assert not fut.done()  # cannot run: the stream waits at the gate
        assert not g.is_open
        g.open()
        assert g.is_open
        await fut
    np.testing.assert_array_equal(await x.to_host(), np.full(256, 7.0))


async def test_gate_holds_the_policy_streams_by_default(anyio_backend, baseline) -> None:
    policy = cuasync.StreamPoolRoundRobin(num_streams=3)
    with cuasync.use_policy(policy), ct.gate() as g:
        futs = [cuasync.zeros((8,)).submit() for _ in range(6)]
        assert {f.stream for f in futs} == set(policy.streams) == set(g.streams)
        assert not any(f.done() for f in futs)
    outs = [await f for f in futs]
    assert all(o.shape == (8,) for o in outs)


async def test_work_on_other_streams_ordered_after_gated_work_waits_too(
    anyio_backend, baseline
) -> None:
    a, b = cuasync.Device(0).new_stream(), cuasync.Device(0).new_stream()
    x = await cuasync.zeros((1024,)).submit_on(a)
    with ct.gate(a) as g:
        writer = cuasync.fill(x, 3.0).submit_on(a)
        reader = x.to_host().submit_on(b)  # read after write: b waits for a's event
        assert not reader.done()
        g.open()
    np.testing.assert_array_equal(await reader, np.full(1024, 3.0))
    await writer


async def test_a_gate_left_closed_shows_in_the_leak_snapshot(anyio_backend) -> None:
    ct.settle()
    before = ct.snapshot()
    g = ct.gate(cuasync.Device(0).new_stream())
    assert ct.snapshot()[1] == before[1] + 1
    g.open()
    g.open()  # idempotent
    assert ct.snapshot() == before


def test_gate_rejects_what_is_not_a_stream() -> None:
    with pytest.raises(ArgumentError, match="argument 0 must be a cuasync.Stream"):
        ct.gate(3)  # type: ignore[arg-type]


def test_gate_cannot_hold_a_custom_policy_without_streams() -> None:
    class Mine(cuasync.SchedulingPolicy):
        def next_stream(self) -> cuasync.Stream:
            raise AssertionError

    with cuasync.use_policy(Mine()), pytest.raises(ArgumentError, match="pass the streams"):
        ct.gate()


async def test_gate_is_refused_on_a_capturing_stream(anyio_backend, baseline) -> None:
    x = await cuasync.zeros((4,))
    s = cuasync.Device(0).new_stream()
    with cuasync.graph_scope(s) as scope:
        with pytest.raises(CaptureError):
            ct.gate(s)
        scope.record(cuasync.fill(x, 1.0))


async def test_sleep_keeps_the_stream_busy_and_then_completes(anyio_backend, baseline) -> None:
    s = cuasync.Device(0).new_stream()
    slow = ct.sleep(200_000, stream=s).submit()  # 200 ms of device time
    after = cuasync.zeros((4,)).submit_on(s)
    assert slow.stream is s
    assert not slow.done() and not after.done()
    assert await slow is None  # type: ignore[func-returns-value]
    assert (await after).shape == (4,)


async def test_sleep_of_zero_runs(anyio_backend, baseline) -> None:
    assert await ct.sleep(0) is None  # type: ignore[func-returns-value]


@pytest.mark.parametrize("us", [-1, float("nan"), float("inf"), "10", True, 1e30])
def test_sleep_rejects_bad_durations(us: object) -> None:
    with pytest.raises(ArgumentError, match="us"):
        ct.sleep(us)  # type: ignore[arg-type]


TRAP = textwrap.dedent(
    """
    import asyncio, cuasync, cuasync.testing as ct
    from cuasync.errors import DeviceFaultError

    async def main():
        s = cuasync.Device(0).new_stream()
        x = await cuasync.zeros((16,))
        pending = ct.sleep(2_000_000, stream=s).submit()   # still running when the trap lands
        try:
            await ct.trap()
        except DeviceFaultError as exc:
            print("trap:", exc.name)
        try:
            await pending
        except DeviceFaultError:
            print("pending: failed")
        try:
            await cuasync.fill(x, 1.0)
        except DeviceFaultError:
            print("later: failed")

    asyncio.run(main())
    """
)


def test_trap_faults_the_device_for_the_process() -> None:
    r = run_script(TRAP)
    lines = r.stdout.splitlines()
    assert lines[0] in ("trap: CUDA_ERROR_LAUNCH_FAILED", "trap: CUDA_ERROR_ILLEGAL_INSTRUCTION")
    assert lines[1:] == ["pending: failed", "later: failed"]


PLUGIN_TEST = textwrap.dedent(
    """
    import pytest, cuasync, cuasync.testing as ct

    @pytest.mark.anyio
    @pytest.mark.cuasync_loops
    async def test_service(cuasync_no_leaks, cuasync_backend, anyio_backend):
        assert cuasync_backend in ("cuda", "emulator")
        with ct.gate() as g:
            fut = cuasync.zeros((4,)).submit()
            assert not fut.done()
        assert (await fut).shape == (4,)

    def test_leak_is_caught(cuasync_no_leaks):
        global kept
        kept = cuasync.zeros((1024,)).sync()
    """
)


def test_pytest_plugin_fixtures_and_loop_marker(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_plugin=PLUGIN_TEST)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rA")
    result.assert_outcomes(passed=4, errors=1)  # the leak fails at teardown
    result.stdout.fnmatch_lines(
        [
            "*cuasync leaked*",
            "PASSED *test_service?asyncio?",
            "PASSED *test_service?uvloop?",
            "PASSED *test_service?trio?",
        ]
    )


def test_pytest_plugin_fixtures_work_under_pytest_asyncio(pytester: pytest.Pytester) -> None:
    # Many services test with pytest-asyncio rather than anyio: the fixtures serve both.
    pytester.makepyfile(
        test_asyncio_service="""
        import pytest, cuasync, cuasync.testing as ct

        @pytest.mark.asyncio
        async def test_gated_work_waits(cuasync_no_leaks, cuasync_backend):
            with ct.gate():
                fut = cuasync.zeros((4,)).submit()
                assert not fut.done()
            assert (await fut).shape == (4,)

        @pytest.mark.asyncio
        async def test_a_leak_is_reported(cuasync_no_leaks):
            test_a_leak_is_reported.kept = await cuasync.zeros((4,))
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "asyncio", "-rA")
    result.assert_outcomes(passed=2, errors=1)  # the leak fails at teardown
    result.stdout.fnmatch_lines(["*cuasync leaked*"])
