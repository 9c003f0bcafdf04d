"""What mypy infers for user code of the public API: checked by mypy, never run.

Not collected by pytest (the name does not start with ``test_``); ``mypy`` checks it with
the rest of ``tests`` (``files`` in pyproject), and ``test_packaging`` runs mypy on it.
"""

from __future__ import annotations

import types
from typing import Any, assert_type

import numpy as np

import cuasync
from cuasync import (
    CudaGraph,
    DeviceFuture,
    DeviceOp,
    DeviceProperties,
    Kernel,
    PendingTransfer,
    PinnedHostBuffer,
    SharedOp,
    Tensor,
    TensorOp,
)

Array = np.ndarray


class Producer:
    """A DLPack producer as torch's and CuPy's are typed: the protocol's keywords."""

    def __dlpack__(
        self, *, stream: int | None = None, max_version: tuple[int, int] | None = None
    ) -> object:
        return None

    def __dlpack_device__(self) -> tuple[int, int]:
        return (2, 0)


async def creation_and_copies(host: Array) -> None:
    x = await cuasync.from_host(host)
    assert_type(x, Tensor)
    assert_type(cuasync.zeros((4,)), TensorOp)
    assert_type(cuasync.arange(8, dtype="float32").reshape((2, -1)), TensorOp)
    assert_type(cuasync.arange(8, dtype="float32").reshape((2, -1)).to_host(), DeviceOp[Array])
    assert_type(await cuasync.from_host(host).reshape(-1), Tensor)
    assert_type(x.dup(), TensorOp)
    assert_type(x.astype("int8", casting="checked"), TensorOp)
    assert_type(cuasync.conj(x), TensorOp)
    assert_type(cuasync.real(x) + cuasync.imag(x) * cuasync.angle(x), TensorOp)
    assert_type(cuasync.convert(x, "float16", casting="same_kind"), TensorOp)
    assert_type((x * 2.0).astype("int8", casting="safe"), TensorOp)
    assert_type(cuasync.errors.CastOverflowError("x"), cuasync.errors.CastOverflowError)
    k: Kernel[Tensor] = Kernel("__global__ void f(float* x) {}", "f")
    assert_type(k.specialize(N=4), Kernel[Tensor])
    assert_type(k.with_options(cuasync.CompileOptions(opt_level=2)), Kernel[Tensor])
    assert_type(x.device_pointer(), cuasync.lowlevel.DevicePointer)
    assert_type(x.device_pointer().tensor, Tensor | None)
    assert_type(x.to_host(), DeviceOp[Array])
    assert_type(await cuasync.to_host(x), Array)
    assert_type(await cuasync.memcpy(x, x), Tensor)
    assert_type(await x.dup(), Tensor)
    assert_type(await x.to(0), Tensor)
    assert_type(cuasync.zeros((4,)).sync(), Tensor)
    assert_type(cuasync.asarray(x), Tensor)
    assert_type(cuasync.asarray(x, dtype="float16"), TensorOp)
    assert_type(cuasync.asarray([[1.0, 2.0]]), TensorOp)
    assert_type(cuasync.asarray(host, dtype=cuasync.int8, copy=None), TensorOp)
    assert_type(cuasync.from_dlpack(x), Tensor)
    # precise parameter types (#34): host data, DLPack producers, basic indices
    rows: list[list[float]] = [[1.0, 2.0]]
    assert_type(cuasync.asarray(rows), TensorOp)
    assert_type(cuasync.asarray((True, 1, 2.5j)), TensorOp)
    assert_type(cuasync.asarray(np.float32(1.5)), TensorOp)
    assert_type(cuasync.asarray(bytearray(b"ab")), TensorOp)  # the buffer protocol
    assert_type(cuasync.asarray(Producer()), Tensor)
    assert_type(cuasync.asarray(Producer(), dtype="int8"), TensorOp)
    assert_type(cuasync.from_dlpack(Producer()), Tensor)
    cuasync.from_dlpack([1.0])  # type: ignore[arg-type]
    assert_type(x[0, 1:, None, ...], Tensor)
    assert_type(x[np.int64(1)], Tensor)
    assert_type(x[()], Tensor)
    x[[0, 1]]  # type: ignore[index]
    (x + 1.0)[0]  # type: ignore[index]  # (a TensorOp: the await forgotten)
    assert_type(cuasync.Partition(x, (2, 2)), cuasync.Partition)
    assert_type(PinnedHostBuffer(16, np.float32).dtype, np.dtype[Any] | None)
    await cuasync.warmup(x.dup(), devices=(0, cuasync.Device(0)))
    await cuasync.warmup(cuasync.add)  # type: ignore[arg-type]
    assert_type(await cuasync.wait(cuasync.Device(0).new_stream()), None)
    # the indexing family (#33): TensorOps; starts may be device tensors
    assert_type(cuasync.take_along_axis(x, x, axis=1, mode="clip"), TensorOp)
    assert_type(cuasync.gather(x, x, 1, batch_dims=1, out=x), TensorOp)
    assert_type(cuasync.scatter(x, x, 1.0, 0, mode="add", index_mode="drop"), TensorOp)
    assert_type(await cuasync.scatter(x, x, x, out=x), Tensor)
    assert_type(cuasync.dynamic_slice(x, (0, 1), (2, 2)), TensorOp)
    assert_type(cuasync.dynamic_slice(x, x, [2, 2]), TensorOp)
    assert_type(await cuasync.dynamic_update_slice(x, x, x, out=x), Tensor)
    assert_type(cuasync.pad(x, ((1, 1), (0, 2)), "reflect", constant_values=0), TensorOp)


def devices() -> None:
    dev = cuasync.Device(0)
    assert_type(dev.properties, DeviceProperties)
    assert_type(dev.properties.multiprocessor_count, int)
    assert_type(dev.properties.peak_memory_bandwidth, int)
    assert_type(dev.properties.max_shared_memory_per_block_optin, int)
    assert_type(dev.properties.memory_pools_supported, bool)
    assert_type(dev.supports("peer:1"), bool)


async def zip_and_combinators(x: Tensor) -> None:
    a, h = await cuasync.zip(x.dup(), x.to_host())
    assert_type(a, Tensor)
    assert_type(h, Array)
    assert_type(cuasync.zip(x.dup()), DeviceOp[tuple[Tensor]])
    three = cuasync.zip(x.dup(), cuasync.value(1), cuasync.value("s"))
    assert_type(three, DeviceOp[tuple[Tensor, int, str]])
    six = cuasync.zip(*(cuasync.value(i) for i in range(6)))
    assert_type(six, DeviceOp[tuple[Any, ...]])
    v = cuasync.value(1)
    assert_type(cuasync.zip(v, v, v, v, v, v), DeviceOp[tuple[int, int, int, int, int, int]])
    assert_type(cuasync.zip(v, v, v, v, v, v, v), DeviceOp[tuple[Any, ...]])

    assert_type(three.first(), DeviceOp[Tensor])
    assert_type(three.last(), DeviceOp[str])
    assert_type(cuasync.value(3).first(), DeviceOp[Any])
    t_op, i_op, s_op = three.unzip()
    assert_type(t_op, DeviceOp[Tensor])
    assert_type(i_op, DeviceOp[int])
    assert_type(s_op, DeviceOp[str])
    assert_type(six.unzip(6), tuple[DeviceOp[Any], ...])
    assert_type(six.unzip(), tuple[DeviceOp[Any], ...])
    assert_type(cuasync.zip(v, v, v, v, v, v, v).unzip(), tuple[DeviceOp[Any], ...])

    assert_type(cuasync.value(2).map(str), DeviceOp[str])
    assert_type(cuasync.shared(x.dup()), SharedOp[Tensor])
    assert_type(cuasync.shared(3), SharedOp[int])
    assert_type(x.to_host().map(lambda arr: arr.shape), DeviceOp[tuple[Any, ...]])
    assert_type(cuasync.zeros((4,)).then(lambda t: cuasync.fill(t, 1.0)), DeviceOp[Tensor])
    assert_type(cuasync.zeros((4,)).inspect(print), DeviceOp[Tensor])
    assert_type(cuasync.zeros((4,)).shared(), SharedOp[Tensor])


async def futures(x: Tensor) -> None:
    fut = x.to_host().submit()
    assert_type(fut, DeviceFuture[Array])
    assert_type(await fut, Array)
    assert_type(fut.result(), Array)
    assert_type(fut.wait(), Array)
    s = cuasync.Device(0).new_stream()
    assert_type(x.dup().submit_on(s), DeviceFuture[Tensor])
    assert_type(x.dup().schedule(cuasync.SingleStream(s)), DeviceFuture[Tensor])


async def transfers(buf: PinnedHostBuffer, x: Tensor) -> None:
    up = cuasync.upload_pending(buf, x)
    assert_type(up, PendingTransfer)
    assert_type(await up, tuple[Tensor, PinnedHostBuffer])
    assert_type(up.wait(), tuple[Tensor, PinnedHostBuffer])
    assert_type(cuasync.download_pending(x, buf).tensor, Tensor)


async def kernels(x: Tensor, y: Tensor) -> None:
    untyped = Kernel("__global__ void k(float* y, int n) {}", "k")
    assert_type(untyped, Kernel[Any])
    assert_type(untyped[1, 128](y, 4), DeviceOp[Any])

    # A launch produces the argument(s) bound to non-const pointers; state it to use it.
    scale: Kernel[Tensor] = Kernel("__global__ void scale(float* y, float a) {}", "scale")
    assert_type(scale[1, 128](y, 2.0), DeviceOp[Tensor])
    assert_type(await scale.launch(y, 2.0, grid=1, shared_mem=np.int64(0)), Tensor)
    axpy: Kernel[tuple[Tensor, Tensor]] = Kernel(
        "__global__ void two(float* x, float* y) {}", "two"
    )
    assert_type(await axpy[1, 128](x, y), tuple[Tensor, Tensor])
    # A launch takes lazy ops where it takes tensors; any op producing a tensor has
    # .to_host() and .reshape() (a launch, a then() chain), and others do not.
    assert_type(scale[1, 128](cuasync.zeros(4), 2.0).to_host(), DeviceOp[Array])
    assert_type(scale[1, 128](y, 2.0).reshape((2, -1)), DeviceOp[Tensor])
    assert_type(untyped[1, 128](y, 4).to_host(), DeviceOp[Array])
    chain = cuasync.zeros((4,)).then(lambda t: cuasync.fill(t, 1.0))
    assert_type(chain.reshape((2, 2)).to_host(), DeviceOp[Array])
    cuasync.value(3).to_host()  # type: ignore[misc]
    cuasync.CompileOptions(opt_level=np.int64(2), max_registers=np.uint8(64), defines={"N": 4})
    cuasync.CompileOptions(defines=(("TILE", 64), ("NAME", "x")))


async def graphs(y: Tensor) -> None:
    scale: Kernel[Tensor] = Kernel("__global__ void scale(float* y) {}", "scale")
    graph = scale[1, 128](y).graph()
    assert_type(graph, CudaGraph[Tensor])
    assert_type(graph.take_output(), Tensor | None)
    assert_type(await graph.launch(), Tensor)
    assert_type(await graph.update(cuasync.memcpy(y, y)), Tensor)
    with cuasync.graph_scope() as scope:
        assert_type(scope.record(cuasync.fill(y, 0.0)), Tensor)
    assert_type(scope.graph, CudaGraph[Any] | None)


async def array_api_names(x: Tensor, op: TensorOp) -> None:
    # statistics and scans
    assert_type(cuasync.all(x, axis=0, keepdims=True), TensorOp)
    assert_type(cuasync.any(x, axis=(0, 1)), TensorOp)
    assert_type(cuasync.count_nonzero(x, keepdims=True), TensorOp)
    assert_type(cuasync.std(x, axis=0, keepdims=True), TensorOp)
    assert_type(cuasync.var(x, correction=1), TensorOp)
    assert_type(cuasync.diff(x, axis=-1, n=2), TensorOp)
    assert_type(cuasync.cumulative_sum(x, axis=0, include_initial=True), TensorOp)
    assert_type(cuasync.cumulative_prod(x, axis=0), TensorOp)
    assert_type(cuasync.cumsum(x), TensorOp)
    assert_type(cuasync.cumprod(x, axis=1), TensorOp)
    # sorting and searching
    assert_type(cuasync.sort(x, descending=True), TensorOp)
    assert_type(cuasync.argsort(x, axis=0, stable=True), TensorOp)
    assert_type(cuasync.searchsorted(x, x, side="right"), TensorOp)
    assert_type(cuasync.isin(x, op, invert=True), TensorOp)
    # data-dependent shapes: coroutine functions
    assert_type(await cuasync.nonzero(x), tuple[Tensor, ...])
    assert_type(await cuasync.where(x), tuple[Tensor, ...])
    assert_type(await cuasync.where(x > 0), tuple[Tensor, ...])
    assert_type(await cuasync.unique_values(x), Tensor)
    assert_type((await cuasync.unique_counts(x)).counts, Tensor)
    assert_type((await cuasync.unique_inverse(x)).inverse_indices, Tensor)
    assert_type((await cuasync.unique_all(x)).indices, Tensor)
    # manipulation
    assert_type(cuasync.broadcast_arrays(x, x), list[Tensor])
    assert_type(cuasync.broadcast_shapes((2, 1), (3,)), tuple[int, ...])
    assert_type(cuasync.moveaxis(x, 0, -1), Tensor)
    assert_type(cuasync.matrix_transpose(x), Tensor)
    assert_type(cuasync.unstack(x, axis=0), tuple[Tensor, ...])
    assert_type(cuasync.meshgrid(x, x, indexing="ij"), list[Tensor])
    assert_type(cuasync.reshape(x, (2, -1), copy=False), TensorOp)
    assert_type(cuasync.repeat(x, 2, axis=0), TensorOp)
    assert_type(cuasync.tile(x, (2, 1)), TensorOp)
    assert_type(cuasync.roll(x, 1, axis=0), TensorOp)
    assert_type(cuasync.concat([x, x], axis=None), TensorOp)
    # products
    assert_type(cuasync.vecdot(x, x), TensorOp)
    assert_type(cuasync.dot(x, op), TensorOp)
    assert_type(cuasync.inner(x, x), TensorOp)
    assert_type(cuasync.outer(x, x), TensorOp)
    assert_type(cuasync.einsum("bij,bjk->bik", x, op), TensorOp)
    # methods (numpy's names), on tensors and ops alike
    for v in (x, op):
        assert_type(v.sum(axis=0), TensorOp)
        assert_type(v.mean(), TensorOp)
        assert_type(v.max(keepdims=True), TensorOp)
        assert_type(v.std(ddof=1), TensorOp)
        assert_type(v.cumsum(), TensorOp)
        assert_type(v.copy(), TensorOp)
        assert_type(v.flatten(), TensorOp)
        assert_type(v.tolist(), DeviceOp[Any])
    assert_type(x.squeeze(), Tensor)
    assert_type(op.squeeze(), TensorOp)
    assert_type(await x.argmax(), Tensor)


async def array_api_namespace(x: Tensor) -> None:
    # the array API's elementwise functions (#34): TensorOps, like the existing ones
    assert_type(cuasync.acos(x), TensorOp)
    assert_type(cuasync.acosh(x), TensorOp)
    assert_type(cuasync.asin(x), TensorOp)
    assert_type(cuasync.asinh(x), TensorOp)
    assert_type(cuasync.atan(x), TensorOp)
    assert_type(cuasync.atanh(x), TensorOp)
    assert_type(cuasync.cosh(x), TensorOp)
    assert_type(cuasync.sinh(x), TensorOp)
    assert_type(cuasync.tan(x), TensorOp)
    assert_type(cuasync.log2(x), TensorOp)
    assert_type(cuasync.log10(x), TensorOp)
    assert_type(cuasync.ceil(x), TensorOp)
    assert_type(cuasync.floor(x), TensorOp)
    assert_type(cuasync.trunc(x), TensorOp)
    assert_type(cuasync.round(x), TensorOp)
    assert_type(cuasync.isfinite(x), TensorOp)
    assert_type(cuasync.isinf(x), TensorOp)
    assert_type(cuasync.isnan(x), TensorOp)
    assert_type(cuasync.signbit(x), TensorOp)
    assert_type(cuasync.positive(x), TensorOp)
    assert_type(cuasync.square(x), TensorOp)
    assert_type(cuasync.reciprocal(x), TensorOp)
    assert_type(cuasync.bitwise_invert(x), TensorOp)
    assert_type(cuasync.logical_not(x), TensorOp)
    assert_type(cuasync.arccos(x), TensorOp)
    assert_type(cuasync.arccosh(x), TensorOp)
    assert_type(cuasync.arcsin(x), TensorOp)
    assert_type(cuasync.arcsinh(x), TensorOp)
    assert_type(cuasync.arctan(x), TensorOp)
    assert_type(cuasync.arctanh(x), TensorOp)
    assert_type(cuasync.invert(x), TensorOp)
    assert_type(cuasync.atan2(x, 2), TensorOp)
    assert_type(cuasync.copysign(x, 2), TensorOp)
    assert_type(cuasync.hypot(x, 2), TensorOp)
    assert_type(cuasync.logaddexp(x, 2), TensorOp)
    assert_type(cuasync.nextafter(x, 2), TensorOp)
    assert_type(cuasync.floor_divide(x, 2), TensorOp)
    assert_type(cuasync.bitwise_and(x, 2), TensorOp)
    assert_type(cuasync.bitwise_or(x, 2), TensorOp)
    assert_type(cuasync.bitwise_xor(x, 2), TensorOp)
    assert_type(cuasync.bitwise_left_shift(x, 2), TensorOp)
    assert_type(cuasync.bitwise_right_shift(x, 2), TensorOp)
    assert_type(cuasync.logical_and(x, 2), TensorOp)
    assert_type(cuasync.logical_or(x, 2), TensorOp)
    assert_type(cuasync.logical_xor(x, 2), TensorOp)
    assert_type(cuasync.arctan2(x, 2), TensorOp)
    assert_type(cuasync.left_shift(x, 2), TensorOp)
    assert_type(cuasync.right_shift(x, 2), TensorOp)
    assert_type(cuasync.pow(x, 2), TensorOp)
    assert_type(cuasync.floor(x, out=x), TensorOp)
    assert_type(x & 1 | x ^ x, TensorOp)
    assert_type(~x << 2 >> 1, TensorOp)
    assert_type(+x // 2, TensorOp)
    assert_type((x * 2) & 1, TensorOp)
    # the namespace, its constants, dtypes and data-type functions
    assert_type(x.__array_namespace__(), types.ModuleType)
    assert_type(cuasync.__array_api_version__, str)
    info = cuasync.__array_namespace_info__()
    assert_type(info.capabilities(), dict[str, Any])
    assert_type(info.default_device(), cuasync.Device)
    assert_type(info.devices(), list[cuasync.Device])
    assert_type(info.default_dtypes(), dict[str, np.dtype[Any]])
    assert_type(info.dtypes(kind="integral"), dict[str, np.dtype[Any]])
    assert_type(cuasync.e + cuasync.pi + cuasync.inf + cuasync.nan, float)
    assert_type(cuasync.newaxis, None)
    assert_type(cuasync.float32, np.dtype[Any])
    assert_type(cuasync.bool, np.dtype[Any])
    assert_type(cuasync.finfo(x), cuasync.finfo_object)
    assert_type(cuasync.finfo(cuasync.float32).eps, float)
    assert_type(cuasync.iinfo("int8"), cuasync.iinfo_object)
    assert_type(cuasync.iinfo(cuasync.int8).max, int)
    assert_type(cuasync.isdtype(x.dtype, ("integral", "real floating")), bool)
    assert_type(cuasync.can_cast(x, cuasync.float64), bool)
    assert_type(cuasync.result_type(x, 1.0), np.dtype[Any])
    assert_type(cuasync.astype(x, cuasync.int8), TensorOp)
    assert_type(x.mT, Tensor)
    assert_type(x.to_device(0), DeviceOp[Tensor])
    assert_type(await x.to_device(0), Tensor)


async def every_public_name(x: Tensor, op: TensorOp, buf: PinnedHostBuffer) -> None:
    """The names the sections above do not reach: each public name of ``cuasync`` has an
    ``assert_type`` line here or above (``tests/project/test_packaging.py`` checks)."""
    # the elementwise functions (#34: these were Any, so a forgotten await type-checked)
    assert_type(cuasync.abs(op), TensorOp)
    assert_type(cuasync.abs(2.0), TensorOp)
    assert_type(cuasync.add(x, 1), TensorOp)
    assert_type(cuasync.subtract(x, op), TensorOp)
    assert_type(cuasync.multiply(x, np.float32(2)), TensorOp)
    assert_type(cuasync.divide(x, 2, out=x), TensorOp)
    assert_type(cuasync.remainder(x, 3), TensorOp)
    assert_type(cuasync.power(x, 2.0), TensorOp)
    assert_type(cuasync.maximum(x, 0.0), TensorOp)
    assert_type(cuasync.minimum(x, True), TensorOp)
    assert_type(cuasync.equal(x, op), TensorOp)
    assert_type(cuasync.not_equal(x, 1j), TensorOp)
    assert_type(cuasync.less(x, 1), TensorOp)
    assert_type(cuasync.less_equal(x, 1), TensorOp)
    assert_type(cuasync.greater(x, 1), TensorOp)
    assert_type(cuasync.greater_equal(x, 1), TensorOp)
    assert_type(cuasync.negative(x), TensorOp)
    assert_type(cuasync.sign(x), TensorOp)
    assert_type(cuasync.exp(x), TensorOp)
    assert_type(cuasync.expm1(x), TensorOp)
    assert_type(cuasync.log(x), TensorOp)
    assert_type(cuasync.log1p(x), TensorOp)
    assert_type(cuasync.sin(x), TensorOp)
    assert_type(cuasync.cos(x), TensorOp)
    assert_type(cuasync.tanh(x), TensorOp)
    assert_type(cuasync.sqrt(x), TensorOp)
    assert_type(cuasync.rsqrt(x), TensorOp)
    assert_type(cuasync.where(x > 0, x, 0.0), TensorOp)
    assert_type(cuasync.clip(x, None, 6.0), TensorOp)
    cuasync.exp(x, x)  # type: ignore[call-arg]
    # the reductions (#34: these were Any too)
    assert_type(cuasync.sum(x, axis=(0, 1), dtype="float64", keepdims=True), TensorOp)
    assert_type(cuasync.prod(op, dtype=cuasync.float64), TensorOp)
    assert_type(cuasync.mean(x, axis=-1), TensorOp)
    assert_type(cuasync.max(x, axis=0, out=x), TensorOp)
    assert_type(cuasync.min(op), TensorOp)
    assert_type(cuasync.argmax(x, axis=0), TensorOp)
    assert_type(cuasync.argmin(op), TensorOp)
    assert_type(cuasync.vdot(x, op), TensorOp)
    assert_type(await cuasync.sum(x), Tensor)
    assert_type(await cuasync.sum(x).item(), Any)
    # the await forgotten: an op is no number
    total: float = cuasync.sum(x).item()  # type: ignore[assignment]  # noqa: F841
    # creation
    assert_type(cuasync.empty((2, 3), "int8"), TensorOp)
    assert_type(cuasync.ones(4, cuasync.float16), TensorOp)
    assert_type(cuasync.full((2,), 7), TensorOp)
    assert_type(cuasync.eye(3, 4, k=1), TensorOp)
    assert_type(cuasync.eye_rect(3, 4), TensorOp)
    assert_type(cuasync.linspace(0.0, 1.0, 5, endpoint=False), TensorOp)
    assert_type(cuasync.rand((4,), seed=1), TensorOp)
    assert_type(cuasync.randn((4,), seed=1), TensorOp)
    assert_type(cuasync.zeros_like(x), TensorOp)
    assert_type(cuasync.ones_like(x, dtype="int8"), TensorOp)
    assert_type(cuasync.empty_like(x), TensorOp)
    assert_type(cuasync.full_like(x, 1.5), TensorOp)
    assert_type(cuasync.dup(x), TensorOp)
    # views, joins, products
    assert_type(cuasync.broadcast_to(x, (4, 3)), Tensor)
    assert_type(cuasync.expand_dims(x, 0), Tensor)
    assert_type(cuasync.squeeze(x, 0), Tensor)
    assert_type(cuasync.flip(x), Tensor)
    assert_type(cuasync.permute_dims(x, (1, 0)), Tensor)
    assert_type(cuasync.diagonal(x), Tensor)
    assert_type(cuasync.concatenate([x, x], axis=0), TensorOp)
    assert_type(cuasync.stack([x, x]), TensorOp)
    assert_type(cuasync.take(x, x, axis=0), TensorOp)
    assert_type(cuasync.tril(x), TensorOp)
    assert_type(cuasync.triu(x, 1), TensorOp)
    assert_type(cuasync.matmul(x, op), TensorOp)
    assert_type(cuasync.tensordot(x, x, axes=1), TensorOp)
    assert_type(cuasync.dot_general(x, x, contracting=((1,), (0,))), TensorOp)
    # copies, devices, streams, the runtime's objects
    assert_type(cuasync.download_into(x, np.empty(3)), Array)
    assert_type(cuasync.upload_pending(buf, x), PendingTransfer)
    assert_type(cuasync.PinnedHostBuffer(64), PinnedHostBuffer)
    assert_type(cuasync.PinnedPool(idle_timeout=5.0), cuasync.PinnedPool)
    assert_type(cuasync.Tensor, type[Tensor])
    assert_type(cuasync.TensorOp, type[TensorOp])
    assert_type(x.to_host(), cuasync.DeviceOp[Array])
    assert_type(x.dup().submit(), cuasync.DeviceFuture[Tensor])
    assert_type(cuasync.SharedOp(x.dup()), cuasync.SharedOp[Tensor])
    assert_type(x.dup().graph(), cuasync.CudaGraph[Tensor])
    assert_type(cuasync.Kernel("__global__ void k() {}", "k"), cuasync.Kernel[Any])
    assert_type(cuasync.PendingTransfer, type[PendingTransfer])
    assert_type(cuasync.DeviceProperties, type[DeviceProperties])
    assert_type(cuasync.DeviceError("x"), cuasync.DeviceError)
    assert_type(cuasync.get_default_device(), cuasync.Device)
    dev = cuasync.Device(0)
    assert_type(cuasync.device_count(), int)
    assert_type(cuasync.set_default_device(0), None)
    assert_type(cuasync.use_device(0).__enter__(), cuasync.Device)
    assert_type(cuasync.Event(dev, timing=True), cuasync.Event)
    assert_type(dev.new_stream(), cuasync.Stream)
    assert_type(cuasync.Stream, type[cuasync.Stream])
    assert_type(dev.stream_priority_range, cuasync.StreamPriorityRange)
    assert_type(cuasync.StreamPriorityRange(0, -5).greatest, int)
    assert_type(dev.memory_info(), cuasync.MemoryInfo)
    assert_type(cuasync.MemoryInfo(0, 1).total, int)
    assert_type(dev.memory_stats(), cuasync.MemoryStats)
    assert_type(cuasync.MemoryStats(0, 0, 0, 0, 0, 0, 0, None).limit, int | None)
    assert_type(cuasync.Module, type[cuasync.Module])
    assert_type(x.partition((2, 2)), cuasync.Partition)
    assert_type(x.partition((2, 2)).map((2,), 1), cuasync.MappedPartition)
    assert_type(cuasync.MappedPartition, type[cuasync.MappedPartition])
    policy = cuasync.StreamPoolRoundRobin(dev, 2)
    assert_type(policy, cuasync.StreamPoolRoundRobin)
    assert_type(cuasync.SchedulingPolicy, type[cuasync.SchedulingPolicy])
    assert_type(cuasync.use_policy(policy).__enter__(), cuasync.SchedulingPolicy)
    assert_type(cuasync.graph_scope(), cuasync.GraphScope)
    assert_type(cuasync.cancel_scope(), cuasync.CancelScope)
    assert_type(cuasync.CancelScope, type[cuasync.CancelScope])
    assert_type(cuasync.cancel_scope().cancelled, bool)
    assert_type(cuasync.GraphScope, type[cuasync.GraphScope])
    assert_type(cuasync.stats(), cuasync.Stats)
    assert_type(cuasync.Stats().completed_inline, int)
    assert_type(cuasync.trace(False), None)
    assert_type(cuasync.tracing(), bool)
    assert_type(cuasync.backend_name(), str)
    assert_type(await cuasync.warmup(x * 2.0, devices=[0]), None)
    assert_type(cuasync.__version__, str)
    # modules, dtypes, info objects
    assert_type(cuasync.errors, types.ModuleType)
    assert_type(cuasync.kernel_cache, types.ModuleType)
    assert_type(cuasync.linalg, types.ModuleType)
    assert_type(cuasync.lowlevel, types.ModuleType)
    assert_type(cuasync.linalg.norm(x), TensorOp)
    assert_type(cuasync.__array_namespace_info__().default_device(), cuasync.Device)
    assert_type(cuasync.bfloat16, np.dtype[Any])
    assert_type(cuasync.float16, np.dtype[Any])
    assert_type(cuasync.float64, np.dtype[Any])
    assert_type(cuasync.complex64, np.dtype[Any])
    assert_type(cuasync.complex128, np.dtype[Any])
    assert_type(cuasync.int16, np.dtype[Any])
    assert_type(cuasync.int32, np.dtype[Any])
    assert_type(cuasync.int64, np.dtype[Any])
    assert_type(cuasync.uint8, np.dtype[Any])
    assert_type(cuasync.uint16, np.dtype[Any])
    assert_type(cuasync.uint32, np.dtype[Any])
    assert_type(cuasync.uint64, np.dtype[Any])
    assert_type(cuasync.finfo_object, type[cuasync.finfo_object])
    assert_type(cuasync.iinfo_object, type[cuasync.iinfo_object])
