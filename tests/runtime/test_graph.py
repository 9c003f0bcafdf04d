"""CUDA graphs: capture, instantiate, replay, update; scopes; what cannot be recorded."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import ON_EMULATOR, still_pending

import cuasync
import cuasync.testing as ct
from cuasync.errors import ArgumentError, CaptureError, KernelError

pytestmark = pytest.mark.anyio

SRC = r"""
extern "C" __global__ void add_scaled(float* x, const float* y, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += a * y[i];
}
"""


def _emulate(x: np.ndarray, y: np.ndarray, a: np.float32, n: int) -> None:
    x[:n] += a * y[:n]


add_scaled = cuasync.Kernel(SRC, "add_scaled", emulate=_emulate)
N = 256


def host(value: float) -> np.ndarray:
    return np.full(N, value, np.float32)


async def test_capture_and_replay(anyio_backend) -> None:
    x = await cuasync.zeros((N,))
    y = await cuasync.from_host(host(1.0))
    graph = add_scaled[1, N](x, y, 2.0, N).graph()
    assert isinstance(graph, cuasync.CudaGraph)
    np.testing.assert_array_equal(await x.to_host(), host(0.0))  # capture ran nothing
    assert graph.take_output() is x
    assert graph.take_output() is None
    for _ in range(3):
        out = await graph.launch()
    assert out is x
    np.testing.assert_array_equal(await x.to_host(), host(6.0))


def test_launch_runs_on_the_graph_stream_and_sync_works() -> None:
    s = cuasync.Device(0).new_stream()
    x = cuasync.zeros((N,)).sync()
    y = cuasync.from_host(host(1.0)).sync()
    graph = add_scaled[1, N](x, y, 1.0, N).graph(s)
    assert graph.stream is s
    fut = graph.launch().submit()
    assert fut.stream is s
    fut.wait()
    graph.launch().sync()
    np.testing.assert_array_equal(x.to_host().sync(), host(2.0))


async def test_update_copies_new_inputs_before_the_next_launch(anyio_backend) -> None:
    x = await cuasync.zeros((N,))
    y = await cuasync.zeros((N,))
    graph = add_scaled[1, N](x, y, 1.0, N).graph()
    total = 0.0
    for token in (1.0, 2.0, 3.0):
        staging = await cuasync.from_host(host(token))
        graph.update(cuasync.memcpy(y, staging))
        await graph.launch()
        total += token
    np.testing.assert_array_equal(await x.to_host(), host(total))


async def test_update_takes_fill_as_docs_graphs_md_says(anyio_backend) -> None:
    x = await cuasync.zeros((N,))
    y = await cuasync.zeros((N,))
    graph = add_scaled[1, N](x, y, 1.0, N).graph()
    await graph.update(cuasync.fill(y, 2.0))  # refused before: "graph nodes only"
    await graph.launch()
    np.testing.assert_array_equal(await x.to_host(), host(2.0))


async def test_update_accepts_graph_nodes_only(anyio_backend) -> None:
    x = await cuasync.zeros((N,))
    graph = add_scaled[1, N](x, x, 1.0, N).graph()
    allocating, reading = cuasync.zeros((N,)), x.to_host()
    with pytest.raises(CaptureError, match="graph nodes only"):
        graph.update(allocating)
    with pytest.raises(CaptureError):
        graph.update(reading)
    await cuasync.zip(allocating, reading)  # refused, not consumed
    with pytest.raises(ArgumentError):
        graph.update("op")  # type: ignore[arg-type]
    await graph.update(cuasync.value(1))


async def test_scope_records_several_ops(anyio_backend) -> None:
    x = await cuasync.zeros((N,))
    y = await cuasync.from_host(host(1.0))
    start = await cuasync.from_host(host(10.0))
    with cuasync.CudaGraph.scope() as scope:
        scope.record(cuasync.memcpy(x, start))
        out = scope.record(add_scaled[1, N](x, y, 0.5, N))
    assert out is x
    graph = scope.graph
    assert graph is not None
    await graph.launch()
    await graph.launch()
    np.testing.assert_array_equal(await x.to_host(), host(10.5))
    assert cuasync.graph_scope is cuasync.CudaGraph.scope


@pytest.mark.parametrize(
    "make",
    [
        lambda: cuasync.zeros((4,)),
        lambda: cuasync.empty((4,)),
        lambda: cuasync.from_host(np.ones(4)),
        lambda: cuasync.ones((4,)),
        lambda: cuasync.full((4,), 2.0),
        lambda: cuasync.arange(4, dtype="float32"),
        lambda: cuasync.rand((4,), seed=1),
        lambda: cuasync.randn((4,), seed=1),
    ],
    ids=["zeros", "empty", "from_host", "ones", "full", "arange", "rand", "randn"],
)
def test_allocating_ops_are_rejected_with_an_explanation(make) -> None:
    with pytest.raises(CaptureError, match="Pre-allocate"), cuasync.CudaGraph.scope() as scope:
        scope.record(make())
    # the failed scope ended its capture: the stream works normally again
    assert scope.graph is None


def test_dup_is_rejected_too() -> None:
    t = cuasync.zeros((4,)).sync()
    with pytest.raises(CaptureError, match="Pre-allocate"):
        t.dup().graph()


def test_capture_ends_on_exceptions_and_the_stream_is_usable() -> None:
    s = cuasync.Device(0).new_stream()
    with pytest.raises(ZeroDivisionError), cuasync.CudaGraph.scope(s) as scope:
        scope.record(cuasync.value(1))
        1 / 0  # noqa: B018
    assert not s.is_capturing
    assert cuasync.zeros((2,)).sync_on(s).shape == (2,)


def test_sync_during_capture_is_rejected() -> None:
    s = cuasync.Device(0).new_stream()
    with cuasync.CudaGraph.scope(s) as scope:
        with pytest.raises(CaptureError, match="capturing"):
            cuasync.value(1).sync_on(s)
        scope.record(cuasync.value(1))


def test_bad_mode_and_stream() -> None:
    op = cuasync.value(1)
    with pytest.raises(ArgumentError, match="relaxed"):
        op.graph(mode="loose")
    with pytest.raises(ArgumentError, match="stream"):
        cuasync.CudaGraph.scope("s")  # type: ignore[arg-type]
    with pytest.raises(CaptureError, match="only valid inside"):
        cuasync.CudaGraph.scope().record(op)
    assert op.sync() == 1  # refused, not consumed


@pytest.mark.parametrize("mode", ["relaxed", "global", "thread_local"])
def test_capture_modes(mode: str) -> None:
    x = cuasync.zeros((N,)).sync()
    y = cuasync.from_host(host(1.0)).sync()
    graph = add_scaled[1, N](x, y, 1.0, N).graph(mode=mode)
    graph.launch().sync()
    np.testing.assert_array_equal(x.to_host().sync(), host(1.0))


def test_graph_keeps_recorded_tensors_alive(baseline) -> None:
    dev = cuasync.Device(0)
    before = dev.memory_info().used
    x = cuasync.zeros((N,)).sync()
    y = cuasync.from_host(host(3.0)).sync()
    graph = add_scaled[1, N](x, y, 1.0, N).graph()
    del x, y
    assert dev.memory_info().used == before + 2 * N * 4
    out = graph.launch().sync()
    np.testing.assert_array_equal(out.to_host().sync(), host(3.0))
    del graph, out


async def test_graph_launches_are_ordered_against_other_streams(anyio_backend) -> None:
    x = await cuasync.zeros((N,))
    y = await cuasync.from_host(host(1.0))
    graph = add_scaled[1, N](x, y, 1.0, N).graph()
    other = cuasync.Device(0).new_stream()
    with ct.gate(graph.stream):
        launched = graph.launch().submit_on(graph.stream)
        # a read on another stream right after a launch sees the launch's write
        read = x.to_host().submit_on(other)
        assert still_pending(read.done), "the read did not wait for the launch"
    await launched
    np.testing.assert_array_equal(await read, host(1.0))


@pytest.mark.skipif(not ON_EMULATOR, reason="emulator only: a numpy twin raises there")
async def test_each_replay_of_a_kernel_whose_twin_raises_fails_with_kernel_error(
    anyio_backend,
) -> None:
    """A graph launch replaying a kernel whose twin raises fails that launch, as the
    kernel's own launch does (the error is the replay's, not the capture's)."""

    def twin(y: object, n: object) -> None:
        raise ValueError("bug in twin")

    inc = cuasync.Kernel(
        'extern "C" __global__ void inc(float* y, int n) { if (threadIdx.x < n) y[threadIdx.x] += 1.0f; }',
        "inc",
        emulate=twin,
    )
    y = await cuasync.zeros(8)
    graph = inc[1, 32](y, 8).graph()
    for _ in range(2):  # (every replay: the box is each launch's own)
        with pytest.raises(KernelError, match="bug in twin"):
            await graph.launch()
