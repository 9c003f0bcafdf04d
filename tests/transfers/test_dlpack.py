"""DLPack both ways: capsules, lifetimes, stream ordering, dtypes, layouts and errors.

The producer side is a cuasync tensor behind a thin wrapper, so a real capsule goes
through the importer (the round trip the emulator can run); the torch and CuPy round
trips need a GPU.
"""

from __future__ import annotations

import ctypes
import gc
import threading
from typing import Any, cast

import numpy as np
import pytest
from helpers import ON_EMULATOR, python_calls, run_script, settle, still_pending

import cuasync
import cuasync.testing as ct
from cuasync._core import block_cache
from cuasync._dtypes import SUPPORTED
from cuasync._interop import capsules
from cuasync._interop.foreign import foreign_extent
from cuasync._native import NATIVE
from cuasync.errors import ArgumentError, DTypeError, InvalidDeviceError, ShapeError

_api = ctypes.pythonapi


# -- the layouts of dlpack.h, to read what a capsule holds ------------------------------
class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [
        ("dl_tensor", _DLTensor),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
    ]


class _DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class _DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [
        ("version", _DLPackVersion),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", _DLTensor),
    ]


class Via:
    """A DLPack producer that hands out a cuasync tensor's capsules, noting the requests."""

    def __init__(self, tensor: cuasync.Tensor, patch=None) -> None:
        self.tensor = tensor
        self.patch = patch
        self.requests: list[dict[str, object]] = []

    def __dlpack__(self, **kwargs: object) -> object:
        self.requests.append(kwargs)
        capsule = self.tensor.__dlpack__(**cast(dict[str, Any], kwargs))
        if self.patch is not None:
            self.patch(struct_of(capsule))
        return capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.tensor.__dlpack_device__()


class LegacyVia(Via):
    """A producer of the pre-2023 protocol: ``__dlpack__(stream=None)`` only."""

    def __dlpack__(self, stream: object = None) -> object:  # type: ignore[override]
        return super().__dlpack__(stream=stream)


def name_of(capsule: object) -> str:
    return repr(capsule).split('"')[1]


def struct_of(capsule: object):
    name = name_of(capsule).encode()
    address = _api.PyCapsule_GetPointer(ctypes.c_void_p(id(capsule)), ctypes.c_char_p(name))
    if name == b"dltensor_versioned":
        return _DLManagedTensorVersioned.from_address(address)
    return _DLManagedTensor.from_address(address)


_api.PyCapsule_GetPointer.restype = ctypes.c_void_p


def host(shape=(3, 4), dtype="float32") -> np.ndarray:
    return np.arange(int(np.prod(shape))).reshape(shape).astype(SUPPORTED[dtype])


def used() -> int:
    settle()
    gc.collect()
    settle()
    return cuasync.Device(0).memory_info().used


def test_dlpack_device_is_cuda() -> None:
    t = cuasync.zeros((2,)).sync()
    assert t.__dlpack_device__() == (2, 0)  # kDLCUDA, also on the emulator


@pytest.mark.parametrize("dtype", list(SUPPORTED))
def test_round_trip_every_dtype(dtype: str) -> None:
    a = host((2, 3), dtype)
    t = cuasync.from_host(a).sync()
    u = cuasync.from_dlpack(Via(t))
    assert u is not t and u.dtype == t.dtype and u.shape == (2, 3) and u.ptr == t.ptr
    np.testing.assert_array_equal(u.to_host().sync(), a)


@pytest.mark.parametrize(
    "index",
    [
        (slice(1, None), slice(None, None, 2)),
        (None, 0),
        (1, 2),  # 0-d
        (slice(0, 0),),  # 0-size
        (slice(None), slice(1, 3)),
    ],
    ids=["strided", "new-axis", "0-d", "0-size", "column-block"],
)
@pytest.mark.parametrize("versioned", [True, False], ids=["versioned", "legacy"])
def test_views_keep_shape_strides_and_offset(index: tuple[Any, ...], versioned: bool) -> None:
    a = host((3, 4))
    view = cuasync.from_host(a).sync()[index]
    producer = Via(view) if versioned else LegacyVia(view)
    u = cuasync.from_dlpack(producer)
    assert (u.shape, u.strides, u.ptr) == (view.shape, view.strides, view.ptr)
    np.testing.assert_array_equal(u.to_host().sync(), a[index])


def test_capsule_names_follow_max_version() -> None:
    t = cuasync.zeros((2,)).sync()
    assert name_of(t.__dlpack__()) == "dltensor"
    assert name_of(t.__dlpack__(max_version=(0, 8))) == "dltensor"
    assert name_of(t.__dlpack__(max_version=(1, 0))) == "dltensor_versioned"
    assert name_of(t.__dlpack__(max_version=(1, 3))) == "dltensor_versioned"
    capsule = t.__dlpack__(max_version=(1, 1))
    m = struct_of(capsule)
    assert (m.version.major, m.version.minor, m.flags) == (1, 0, 0)
    assert (m.dl_tensor.device.device_type, m.dl_tensor.device.device_id) == (2, 0)


def test_views_export_their_first_element_with_no_byte_offset() -> None:
    view = cuasync.zeros((4, 4)).sync()[1:, 2:]
    capsule = view.__dlpack__(max_version=(1, 0))
    dl = struct_of(capsule).dl_tensor
    assert (dl.data, dl.byte_offset, dl.ndim) == (view.ptr, 0, 2)  # torch ignores byte_offset
    assert (dl.shape[0], dl.shape[1], dl.strides[0], dl.strides[1]) == (3, 2, 4, 1)


def _offset_by_one_element(m: object) -> None:
    dl = m.dl_tensor  # type: ignore[attr-defined]
    dl.data -= 4  # the same element, expressed as base + byte_offset
    dl.byte_offset = 4


def test_imports_honour_byte_offset() -> None:
    a = host((8,))
    t = cuasync.from_host(a).sync()[1:]
    u = cuasync.from_dlpack(Via(t, patch=_offset_by_one_element))
    assert u.ptr == t.ptr
    np.testing.assert_array_equal(u.to_host().sync(), a[1:])


def _compact(m: object) -> None:
    m.dl_tensor.strides = None  # type: ignore[attr-defined]  # NULL: compact row-major


def _broadcast_rows(m: object) -> None:
    m.dl_tensor.strides[0] = 0  # type: ignore[attr-defined]  # every row the first one


def _backwards_unit_axis(m: object) -> None:
    m.dl_tensor.shape[0] = 1  # type: ignore[attr-defined]
    m.dl_tensor.strides[0] = -4  # type: ignore[attr-defined]  # (one element: never stepped)


@pytest.mark.parametrize(
    ("index", "patch"),
    [
        ((slice(None),), None),
        ((slice(None),), _compact),
        ((slice(None, None, 2), slice(1, 3)), None),
        ((1, 2), None),
        ((slice(0, 0),), None),
        ((slice(None),), _broadcast_rows),
        ((slice(None),), _backwards_unit_axis),
    ],
    ids=["contiguous", "null-strides", "strided", "0-d", "0-size", "stride-0", "unit-backwards"],
)
def test_imports_span_the_bytes_their_layout_covers(index: tuple[Any, ...], patch) -> None:
    """The bytes an import spans (what its allocation holds) are the layout's extent, as
    foreign_extent counts them; the C reader measures every nonempty one itself."""
    t = cuasync.zeros((3, 4)).sync()[index]
    u = cuasync.from_dlpack(Via(t, patch=patch))
    expected = foreign_extent(u.ptr, u.shape, u.strides, u.itemsize, "u")
    assert u.allocation.nbytes == expected
    capsule = Via(t, patch=patch).__dlpack__(stream=-1, max_version=(1, 0))
    measured = capsules.unpack(capsule)[15]  # type: ignore[index]
    assert measured == (expected if u.size else -1)


def test_importer_passes_its_stream_and_max_version() -> None:
    t = cuasync.zeros((2,)).sync()
    producer = Via(t)
    stream = cuasync.Device(0).new_stream()
    cuasync.from_dlpack(producer, stream=stream)
    assert producer.requests == [{"stream": stream.handle, "max_version": (1, 0)}]


def test_from_dlpack_of_a_tensor_is_that_tensor() -> None:
    t = cuasync.zeros((2,)).sync()
    assert cuasync.from_dlpack(t) is t


def test_exported_memory_lives_until_the_consumer_releases_it() -> None:
    before = used()
    t = cuasync.from_host(host((256,))).sync()
    u = cuasync.from_dlpack(Via(t))
    del t
    assert used() > before  # the import keeps the allocation
    np.testing.assert_array_equal(u.to_host().sync(), host((256,)))
    del u
    assert used() == before


def test_an_unconsumed_capsule_releases_the_tensor() -> None:
    before = used()
    t = cuasync.zeros((256,)).sync()
    capsules = [t.__dlpack__(), t.__dlpack__(max_version=(1, 0))]
    del t
    assert used() > before
    del capsules
    assert used() == before


def test_a_consumed_capsule_is_left_to_its_consumer() -> None:
    before = used()
    t = cuasync.zeros((256,)).sync()
    capsule = t.__dlpack__(max_version=(1, 0))
    address = _api.PyCapsule_GetPointer(ctypes.c_void_p(id(capsule)), b"dltensor_versioned")
    assert _api.PyCapsule_SetName(ctypes.py_object(capsule), b"used_dltensor_versioned") == 0
    del t, capsule  # the consumer owns it now: dropping the capsule releases nothing
    assert used() > before
    deleter = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(struct_of_address(address).deleter)
    # The consumer may call the deleter from any thread.
    worker = threading.Thread(target=deleter, args=(address,))
    worker.start()
    worker.join()
    assert used() == before


def live() -> int:
    settle()
    gc.collect()
    settle()
    return cuasync.Device(0).memory_stats().live_bytes


@pytest.mark.skipif(NATIVE is None, reason="a Python capsule destructor cannot keep the error")
@pytest.mark.parametrize("versioned", [True, False], ids=["versioned", "legacy"])
def test_a_refused_capsule_keeps_the_consumers_error_and_gives_the_tensor_back(
    versioned: bool,
) -> None:
    # numpy reads only host memory: it takes the capsule, sets its error and drops the
    # capsule, so the capsule's destructor runs with that error set.
    before = live()
    t = cuasync.from_host(host((65536,))).sync()
    producer = t if versioned else LegacyVia(t)
    with pytest.raises((RuntimeError, BufferError), match="Unsupported device") as refused:
        np.from_dlpack(producer)  # type: ignore[arg-type]
    assert type(refused.value) in (RuntimeError, BufferError)  # numpy's own (by version)
    del t, producer, refused
    assert live() == before


def test_capsules_alive_at_exit_let_the_process_exit() -> None:
    # Their release ordered the free after the legacy stream, whose (emulated) thread
    # never starts at exit: the process hung.
    run_script(
        """
        import numpy as np, cuasync
        t = cuasync.from_host(np.arange(4, dtype=np.float32)).sync()
        kept = [t.__dlpack__(), t.__dlpack__(max_version=(1, 0))]  # dropped at exit
        cycle = {"capsule": t.__dlpack__()}
        cycle["self"] = cycle  # collected by the last collection at exit
    """,
        timeout=60,
    )


def struct_of_address(address: int):
    return _DLManagedTensorVersioned.from_address(address)


def test_a_capsule_cannot_be_imported_twice() -> None:
    t = cuasync.zeros((2,)).sync()
    capsule = t.__dlpack__(max_version=(1, 0))

    class Once:
        def __dlpack__(self, **kwargs: object) -> object:
            return capsule

        def __dlpack_device__(self) -> tuple[int, int]:
            return (2, 0)

    cuasync.from_dlpack(Once())
    with pytest.raises(BufferError, match="already consumed"):
        cuasync.from_dlpack(Once())


# -- ordering ------------------------------------------------------------------------------
def test_consumer_stream_waits_for_pending_writes() -> None:
    s1, consumer = cuasync.Device(0).new_stream(), cuasync.Device(0).new_stream()
    t = cuasync.zeros((64,)).sync()
    with ct.gate(s1):
        filled = cuasync.fill(t, 5.0).submit_on(s1)
        t.__dlpack__(stream=consumer.handle)
        after = cuasync.wait(consumer).submit()
        assert still_pending(after.done), "the consumer's stream did not wait for the write"
    after.wait()
    filled.wait()


@pytest.mark.parametrize("read_before", [False, True], ids=["fresh", "read-before"])
def test_an_export_to_the_legacy_stream_waits_for_pending_reads(read_before: bool) -> None:
    """The consumer may write: its stream waits for cuasync's pending reads too (reads
    that completed, as those of an earlier op, owe nothing)."""
    s1 = cuasync.Device(0).new_stream()
    (cuasync.zeros((64,)) + 2.0).sync()  # (the kernel loaded before the gate closes)
    t = cuasync.zeros((64,)).sync()
    if read_before:
        (t + 1.0).sync()
    with ct.gate(s1):
        read = (t + 2.0).submit_on(s1)
        t.__dlpack__(stream=1, max_version=(1, 0))
        after = cuasync.wait(1).submit()
        assert still_pending(after.done), "the legacy stream did not wait for the read"
    after.wait()
    read.wait()


def test_stream_minus_one_means_no_synchronization() -> None:
    s1, consumer = cuasync.Device(0).new_stream(), cuasync.Device(0).new_stream()
    t = cuasync.zeros((64,)).sync()
    with ct.gate(s1):
        filled = cuasync.fill(t, 5.0).submit_on(s1)
        t.__dlpack__(stream=-1)
        cuasync.wait(consumer).sync()  # not held by the gate: returns while it is closed
    filled.wait()


@pytest.mark.parametrize("stream", [None, 1, 2], ids=["none", "legacy", "per-thread"])
def test_default_streams_wait_and_order_the_free(stream: int | None) -> None:
    s1 = cuasync.Device(0).new_stream()
    before = used()
    t = cuasync.zeros((64,)).sync()
    with ct.gate(s1):
        filled = cuasync.fill(t, 5.0).submit_on(s1)
        capsule = t.__dlpack__(stream=stream, max_version=(1, 0))
        after = cuasync.wait(1 if stream is None else stream).submit()
        assert still_pending(after.done), "the default stream did not wait for the write"
    after.wait()
    filled.wait()
    del t, capsule, filled  # the fill's future holds its output, the tensor
    assert used() == before


def test_imported_memory_is_ordered_after_the_producers_work() -> None:
    s1 = cuasync.Device(0).new_stream()
    t = cuasync.zeros((64,)).sync()
    with ct.gate(s1):
        cuasync.fill(t, 7.0).submit_on(s1)
        u = cuasync.from_dlpack(Via(t))  # the producer makes cuasync's stream wait
        read = u.to_host().submit()
        assert still_pending(read.done), "the import did not wait for the producer's write"
    np.testing.assert_array_equal(read.wait(), np.full(64, 7.0, np.float32))


def test_an_import_waits_for_the_legacy_stream_by_default() -> None:
    """With no stream given, the producer is asked for the legacy default stream (as
    CuPy asks: torch and CuPy working there have nothing to do), and every cuasync op
    using the tensor waits for that stream's work up to the import."""
    t = cuasync.zeros((64,)).sync()
    via = Via(t)
    legacy = cuasync.Stream.from_handle(1, device=0)
    with ct.gate(legacy):  # the producer's work on its (default) stream is still to run
        u = cuasync.from_dlpack(via)
        read = u.to_host().submit()
        assert still_pending(read.done), "the op did not wait for the producer's stream"
    assert via.requests[-1]["stream"] == 1
    read.wait()


def test_a_write_after_an_export_waits_for_the_consumers_reads() -> None:
    """A consumer done with an export to the legacy stream may still be reading there:
    a later cuasync write to the memory waits for that stream's work."""
    t = cuasync.zeros((64,)).sync()
    legacy = cuasync.Stream.from_handle(1, device=0)
    with ct.gate(legacy):  # the consumer's reads on its stream are still to run
        capsule = t.__dlpack__(stream=1)
        del capsule  # (released: the consumer is done submitting)
        gc.collect()
        write = cuasync.fill(t, 3.0).submit()
        assert still_pending(write.done), "the write did not wait for the consumer's reads"
    write.wait()
    np.testing.assert_array_equal(t.to_host().sync(), np.full(64, 3.0, np.float32))


# -- read-only, devices, errors ------------------------------------------------------------
def _read_only(m: object) -> None:
    m.flags |= 1  # type: ignore[attr-defined]


def test_read_only_imports_refuse_writes() -> None:
    t = cuasync.from_host(host((4,))).sync()
    u = cuasync.from_dlpack(Via(t, patch=_read_only))
    assert u.allocation.readonly
    np.testing.assert_array_equal(u.to_host().sync(), host((4,)))
    with pytest.raises(ArgumentError, match="read-only"):
        cuasync.fill(u, 1.0).sync()
    assert struct_of(u.__dlpack__(max_version=(1, 0))).flags & 1  # and re-exported so


@pytest.mark.skipif(cuasync.device_count() < 2, reason="needs two devices")
def test_memory_of_another_device_is_adopted_there() -> None:
    t = cuasync.from_host(host((4,)), device=1).sync()
    u = cuasync.from_dlpack(Via(t))
    assert u.device is cuasync.Device(1)
    np.testing.assert_array_equal(u.to_host().sync(), host((4,)))
    with pytest.raises(InvalidDeviceError, match="device 1"):
        cuasync.from_dlpack(Via(t), device=0)


def _bad_dtype(m: object) -> None:
    m.dl_tensor.dtype.bits = 8  # type: ignore[attr-defined]  # an 8-bit float


def _negative(m: object) -> None:
    m.dl_tensor.strides[0] = -1  # type: ignore[attr-defined]


def _negative_shape(m: object) -> None:
    m.dl_tensor.shape[0] = -4  # type: ignore[attr-defined]


def _negative_ndim(m: object) -> None:
    m.dl_tensor.ndim = -1  # type: ignore[attr-defined]


def _no_shape_array(m: object) -> None:
    m.dl_tensor.shape = None  # type: ignore[attr-defined]


def _misaligned(m: object) -> None:
    m.dl_tensor.byte_offset = 2  # type: ignore[attr-defined]  # half a float32 in


def _null(m: object) -> None:
    m.dl_tensor.data = None  # type: ignore[attr-defined]


def _huge(m: object) -> None:
    m.dl_tensor.shape[0] = 1 << 62  # type: ignore[attr-defined]  # 2**64 bytes of float32


@pytest.mark.parametrize(
    ("patch", "error", "match"),
    [
        (_bad_dtype, DTypeError, "no cuasync counterpart"),
        (_negative, ArgumentError, "negative strides"),
        (_negative_shape, ShapeError, "negative dimension"),
        (_negative_ndim, ShapeError, "ndim -1"),
        (_no_shape_array, ShapeError, "no shape array"),
        (_misaligned, ArgumentError, "not aligned"),
        (_null, ArgumentError, "NULL"),
        (_huge, ShapeError, "address space"),
    ],
    ids=[
        "dtype", "negative-strides", "negative-shape", "negative-ndim", "no-shape-array",
        "misaligned", "null-data", "extent-overflow",
    ],
)  # fmt: skip
def test_refused_imports_release_the_capsule(patch, error, match) -> None:
    before = used()
    t = cuasync.zeros((4,)).sync()
    with pytest.raises(error, match=match):
        cuasync.from_dlpack(Via(t, patch=patch))
    np.testing.assert_array_equal(t.to_host().sync(), np.zeros(4, np.float32))  # device fine
    del t
    assert used() == before  # the unconsumed capsule gave the tensor back


class Elsewhere:
    def __init__(self, kind: int) -> None:
        self.kind = kind

    def __dlpack__(self, **kwargs: object) -> object:
        raise AssertionError("not asked for a capsule")

    def __dlpack_device__(self) -> tuple[int, int]:
        return (self.kind, 0)


def test_host_and_other_devices_are_refused() -> None:
    with pytest.raises(InvalidDeviceError, match="from_host"):
        cuasync.from_dlpack(np.arange(3.0))
    with pytest.raises(InvalidDeviceError, match="OpenCL"):
        cuasync.from_dlpack(Elsewhere(4))
    with pytest.raises(ArgumentError, match="DLPack"):
        cuasync.from_dlpack(object())  # type: ignore[arg-type]


def test_export_arguments_are_checked() -> None:
    t = cuasync.zeros((4,)).sync()
    with pytest.raises(ArgumentError, match="stream=0"):
        t.__dlpack__(stream=0)
    with pytest.raises(ArgumentError, match="stream"):
        t.__dlpack__(stream="1")  # type: ignore[arg-type]
    with pytest.raises(BufferError, match="to_host"):
        t.__dlpack__(dl_device=(1, 0))
    with pytest.raises(BufferError, match="dup"):
        t.__dlpack__(copy=True)
    assert name_of(t.__dlpack__(dl_device=(2, 0), copy=False)) == "dltensor"

    with pytest.raises(TypeError, match="keyword arguments only"):
        t.__dlpack__(1)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="unexpected keyword argument 'streams'"):
        t.__dlpack__(streams=1)  # type: ignore[call-arg]


# -- the common export in C ---------------------------------------------------------------
@pytest.mark.parametrize("stream", [None, 1, -1])
@pytest.mark.parametrize("max_version", [None, (1, 0), (1, 3)])
def test_the_exports_torch_and_cupy_ask_for_run_no_python(stream: Any, max_version: Any) -> None:
    """The export torch and CuPy make (the legacy default stream or -1), and its release,
    run no Python code: the capsule is built, and the consumer recorded as a reader, in
    C (issue #32: DLPack at CuPy's cost)."""
    t = cuasync.zeros((64,)).sync()
    t.__dlpack__(stream=1)  # (the first on a device makes its legacy stream, in Python)

    def export_and_release() -> None:
        capsule = t.__dlpack__(stream=stream, max_version=max_version)
        del capsule

    assert python_calls(export_and_release) == []


def test_the_release_records_the_consumer_as_a_reader() -> None:
    from cuasync._interop.foreign import legacy_stream

    t = cuasync.zeros((64,)).sync()
    legacy = legacy_stream(t.device)
    before = legacy._submitted
    capsule = t.__dlpack__(stream=1, max_version=(1, 0))
    assert legacy not in t.allocation._reads  # (recorded when the consumer is done)
    del capsule
    assert t.allocation._reads[legacy] == legacy._submitted == before + 1
    capsule = t.__dlpack__(stream=-1)  # (no synchronization: nothing owed)
    del capsule
    assert t.allocation._reads[legacy] == legacy._submitted == before + 1


def test_a_release_inside_then_records_the_read_without_waiting_for_itself() -> None:
    """A capsule released while this thread holds the execution lock (inside a then()
    function) is recorded without waiting for the lock: the thread holds it already."""
    from cuasync._interop.foreign import legacy_stream

    t = cuasync.zeros((64,)).sync()
    legacy = legacy_stream(t.device)
    held = [t.__dlpack__(stream=1)]
    before = legacy._submitted

    def drop(_: Any) -> Any:
        held.clear()  # the capsule's release runs here
        return cuasync.zeros((1,))

    cuasync.zeros((1,)).then(drop).sync()
    assert t.allocation._reads[legacy] == before + 1


def test_an_export_with_work_pending_elsewhere_is_ordered_in_python() -> None:
    """An export whose tensor another stream is still writing takes the Python path,
    which makes the consumer's stream wait (the C path answers only when nothing is
    owed)."""
    s1 = cuasync.Device(0).new_stream()
    t = cuasync.zeros((64,)).sync()
    t.__dlpack__(stream=1)
    with ct.gate(s1):
        cuasync.fill(t, 5.0).submit_on(s1)
        called = python_calls(lambda: t.__dlpack__(stream=1, max_version=(1, 0)))
        assert "export" in called and "order_foreign_after" in called


# -- GPU round trips (run with CUASYNC_BACKEND=cuda) --------------------------------------
gpu = pytest.mark.skipif(ON_EMULATOR, reason="needs a GPU: the emulator's memory is not CUDA's")


@gpu
def test_torch_round_trip() -> None:
    torch = pytest.importorskip("torch", reason="torch is not installed")
    x = torch.arange(12, dtype=torch.float32, device="cuda:0").reshape(3, 4)
    t = cuasync.from_dlpack(x)
    assert t.ptr == x.data_ptr() and t.shape == (3, 4)
    np.testing.assert_array_equal(t.to_host().sync(), np.arange(12.0).reshape(3, 4))
    y = torch.from_dlpack(cuasync.fill(cuasync.empty((5,)).sync(), 3.0).sync())
    assert y.device.type == "cuda" and y.cpu().tolist() == [3.0] * 5
    col = torch.from_dlpack(t[:, 1])
    assert col.data_ptr() == x[:, 1].data_ptr() and col.stride() == (4,)


@gpu
def test_cupy_round_trip() -> None:
    cupy = pytest.importorskip("cupy", reason="cupy is not installed")
    x = cupy.arange(6, dtype=cupy.int32)
    t = cuasync.from_dlpack(x)
    assert t.ptr == x.data.ptr
    np.testing.assert_array_equal(t.to_host().sync(), np.arange(6, dtype=np.int32))
    y = cupy.from_dlpack(t)
    assert int(y.data.ptr) == t.ptr and y.tolist() == list(range(6))


@pytest.mark.emulator_only(reason="looks at the emulator's live allocations")
def test_the_free_waits_for_the_legacy_stream_of_the_consumer() -> None:
    from cuasync._backends import get_backend

    buffers = get_backend()._devices[0].buffers  # type: ignore[attr-defined]
    t = cuasync.zeros((64,)).sync()
    ptr = t.ptr
    capsule = t.__dlpack__(stream=1)
    legacy = cuasync.Stream.from_handle(1, device=0)
    with ct.gate(legacy):  # the consumer's work on its stream is still to run
        del t, capsule
        gc.collect()
        assert still_pending(lambda: ptr not in buffers), "freed before the consumer's work"
    cuasync.wait(legacy).sync()
    settle()
    # (its free waited for the legacy stream on a stream of cuasync's own, whose block
    # cache may keep it for the next allocation there: flushed, it is freed)
    block_cache.flush(cuasync.Device(0))
    cuasync.Device(0).synchronize()  # (the flush's free is stream-ordered: done once it ran)
    assert ptr not in buffers
