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
    assert_type(cuasync.from_dlpack(x), Tensor)
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
