"""Stream priorities: the device's range, priority streams and policies, and (on the
emulator, where the order is deterministic) urgent work running ahead of batch work."""

from __future__ import annotations

import anyio
import pytest

import cuasync
import cuasync.testing
from cuasync.errors import ArgumentError


def _range() -> cuasync.StreamPriorityRange:
    return cuasync.Device(0).stream_priority_range


def test_the_range_runs_from_least_to_greatest_urgency() -> None:
    r = _range()
    assert isinstance(r, cuasync.StreamPriorityRange)
    assert r.greatest <= 0 <= r.least  # 0, the default, is always meaningful
    assert r.least in r and r.greatest in r and r.greatest - 1 not in r


def test_new_stream_gets_the_priority_it_asked_for() -> None:
    dev = cuasync.Device(0)
    r = dev.stream_priority_range
    assert dev.new_stream().priority == 0
    for p in {r.least, r.greatest, (r.least + r.greatest) // 2}:
        assert dev.new_stream(priority=p).priority == p


@pytest.mark.parametrize("offset", ["below", "above"])
def test_a_priority_outside_the_range_is_refused_with_the_range(offset: str) -> None:
    r = _range()
    bad = r.greatest - 1 if offset == "below" else r.least + 1
    with pytest.raises(ArgumentError, match=r"outside device 0's stream priority range") as info:
        cuasync.Device(0).new_stream(priority=bad)
    assert f"[{r.greatest} (most urgent), {r.least} (least urgent)]" in str(info.value)


@pytest.mark.parametrize("bad", ["high", 1.5, True])
def test_a_priority_that_is_not_an_int_is_refused(bad: object) -> None:
    with pytest.raises(ArgumentError, match="priority must be an int or None"):
        cuasync.Device(0).new_stream(priority=bad)  # type: ignore[arg-type]


def test_a_pool_with_a_priority_creates_its_streams_with_it() -> None:
    greatest = _range().greatest
    policy = cuasync.StreamPoolRoundRobin(num_streams=2, priority=greatest)
    assert policy.priority == greatest
    assert [s.priority for s in policy.streams] == [greatest, greatest]
    assert f"priority={greatest}" in repr(policy)
    assert cuasync.StreamPoolRoundRobin().priority is None
    with pytest.raises(ArgumentError, match="stream priority range"):
        cuasync.StreamPoolRoundRobin(priority=greatest - 1)


@pytest.mark.anyio
async def test_use_policy_sends_one_request_to_urgent_streams(anyio_backend) -> None:
    """Per request: ops in the task under ``use_policy`` go to the urgent pool, ops of
    a task running beside it stay on the device's default streams."""
    urgent = cuasync.StreamPoolRoundRobin(num_streams=2, priority=_range().greatest)
    seen: dict[str, cuasync.Stream] = {}

    async def request(name: str, critical: bool) -> None:
        if critical:
            with cuasync.use_policy(urgent):
                fut = cuasync.zeros((16,)).submit()
        else:
            fut = cuasync.zeros((16,)).submit()
        seen[name] = fut.stream
        await fut

    async with anyio.create_task_group() as tg:
        tg.start_soon(request, "critical", True)
        tg.start_soon(request, "batch", False)
    assert seen["critical"] in urgent.streams
    assert seen["critical"].priority == urgent.priority
    assert seen["batch"] not in urgent.streams
    assert seen["batch"].priority == 0


@pytest.mark.emulator_only(
    reason="the order is deterministic only in the emulator's model; on a GPU, priorities "
    "are a scheduling hint and two one-thread kernels may run side by side"
)
def test_ready_work_on_an_urgent_stream_runs_before_batch_work() -> None:
    """Batch work queued first on four default-priority streams and a request on an
    urgent stream are released together: the request finishes before any batch op."""
    dev = cuasync.Device(0)
    batch = [dev.new_stream() for _ in range(4)]
    urgent = dev.new_stream(priority=dev.stream_priority_range.greatest)
    with cuasync.testing.gate(*batch, urgent) as g:
        batch_ops, batch_done = [], []
        for s in batch:
            batch_ops.append(cuasync.testing.sleep(2000, stream=s).submit())
            batch_done.append(cuasync.Event(timing=True).record(s))
        request = cuasync.testing.sleep(2000, stream=urgent).submit()
        request_done = cuasync.Event(timing=True).record(urgent)
        g.open()
    request.wait()
    for event in batch_done:
        event.synchronize()
        assert request_done.elapsed_ms(event) > 0  # the batch op ended after the request
    for op in batch_ops:
        op.wait()
