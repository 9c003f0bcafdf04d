"""The CUDA Array Interface both ways, and ``cuasync.asarray``."""

from __future__ import annotations

import gc
from typing import Any

import numpy as np
import pytest
from helpers import ON_EMULATOR, settle, still_pending

import cuasync
import cuasync.testing as ct
from cuasync.errors import ArgumentError, DTypeError, InvalidDeviceError, ShapeError


class CAI:
    """A foreign array: only a ``__cuda_array_interface__`` dict (and its owner)."""

    def __init__(self, interface: dict[str, object], owner: object = None) -> None:
        self.__cuda_array_interface__ = interface
        self.owner = owner


def shared(t: cuasync.Tensor, **changes: object) -> CAI:
    return CAI({**t.__cuda_array_interface__, **changes}, owner=t)


def test_export_describes_the_memory() -> None:
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = cuasync.from_host(a).sync()
    d = t.__cuda_array_interface__
    assert d == {
        "shape": (3, 4),
        "typestr": "<f4",
        "data": (t.ptr, False),
        "version": 3,
        "strides": None,
        "descr": [("", "<f4")],
        "stream": None,  # nothing pending: no synchronization needed
    }
    view = t[1:, ::2]
    d = view.__cuda_array_interface__
    assert (d["shape"], d["strides"], d["data"][0]) == ((2, 2), (16, 8), view.ptr)
    assert t[1, 2].__cuda_array_interface__["shape"] == ()


def test_export_names_the_stream_of_pending_work() -> None:
    s1 = cuasync.Device(0).new_stream()
    t = cuasync.zeros((16,)).sync()
    with ct.gate(s1):
        filled = cuasync.fill(t, 1.0).submit_on(s1)
        assert t.__cuda_array_interface__["stream"] == s1.handle
    filled.wait()


def test_export_of_bfloat16_is_refused() -> None:
    t = cuasync.zeros((2,), dtype="bfloat16").sync()
    with pytest.raises(DTypeError, match="DLPack"):
        _ = t.__cuda_array_interface__


@pytest.mark.parametrize("index", [(), (slice(1, None), slice(None, None, 2)), (1, 2)])
def test_import_is_zero_copy(index: tuple[Any, ...]) -> None:
    a = np.arange(12, dtype=np.int32).reshape(3, 4)
    view = cuasync.from_host(a).sync()[index]
    u = cuasync.asarray(shared(view))
    assert (u.ptr, u.shape, u.strides, u.dtype) == (view.ptr, view.shape, view.strides, view.dtype)
    assert u.device is view.device  # found from the pointer
    np.testing.assert_array_equal(u.to_host().sync(), a[index])


def test_import_keeps_the_producer_alive() -> None:
    settle()
    before = cuasync.Device(0).memory_info().used
    t = cuasync.from_host(np.arange(64.0)).sync()
    u = cuasync.asarray(shared(t))
    assert isinstance(u.allocation.owner, CAI)  # type: ignore[attr-defined]
    del t
    gc.collect()
    np.testing.assert_array_equal(u.to_host().sync(), np.arange(64.0))
    del u
    gc.collect()
    settle()
    assert cuasync.Device(0).memory_info().used == before


def test_import_waits_for_the_producers_stream() -> None:
    s1 = cuasync.Device(0).new_stream()
    t = cuasync.zeros((16,)).sync()
    with ct.gate(s1):
        cuasync.fill(t, 3.0).submit_on(s1)
        u = cuasync.asarray(shared(t))  # its "stream" is s1
        read = u.to_host().submit()
        assert still_pending(read.done), "the import did not wait for the producer's stream"
    np.testing.assert_array_equal(read.wait(), np.full(16, 3.0, np.float32))


def test_import_from_the_legacy_stream_orders_ops_after_it() -> None:
    """CuPy names the legacy default stream (1): each op using the import waits for that
    stream's work up to then."""
    t = cuasync.zeros((16,)).sync()
    legacy = cuasync.Stream.from_handle(1, device=0)
    with ct.gate(legacy):  # the producer's work on its (default) stream is still to run
        u = cuasync.asarray(shared(t, stream=1))
        read = u.to_host().submit()
        assert still_pending(read.done), "the op did not wait for the producer's stream"
    read.wait()


def test_exports_of_strided_views_give_byte_strides() -> None:
    t = cuasync.zeros((4, 6)).sync()
    assert t[:, 1:3].__cuda_array_interface__["strides"] == (24, 4)
    assert t[1:3].__cuda_array_interface__["strides"] is None  # (rows: still contiguous)
    assert t[2:3, 1:4].__cuda_array_interface__["strides"] is None  # (one row: contiguous)


def test_asarray_of_a_tensor_is_that_tensor() -> None:
    t = cuasync.zeros((2,)).sync()
    assert cuasync.asarray(t) is t


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"stream": 0}, "0 is disallowed"),
        ({"mask": object()}, "mask"),
        ({"strides": (6,)}, "multiples"),
        ({"typestr": "<f2x"}, "typestr"),
    ],
    ids=["stream-0", "mask", "strides", "typestr"],
)
def test_bad_interfaces(changes: dict[str, object], match: str) -> None:
    t = cuasync.zeros((4,)).sync()
    with pytest.raises(ArgumentError, match=match):
        cuasync.asarray(shared(t, **changes))


def _misaligned(t: cuasync.Tensor) -> dict[str, object]:
    return {"data": (t.ptr + 2, False)}  # half a float32 in


def _past_the_address_space(t: cuasync.Tensor) -> dict[str, object]:
    return {"data": ((1 << 64) - 8, False)}  # 16 bytes from 8 below the top


@pytest.mark.parametrize(
    ("changes", "error", "match"),
    [
        ({"shape": (-1, 4)}, ShapeError, "negative dimension"),
        ({"shape": "4"}, ShapeError, "tuple of ints"),
        ({"shape": (4.0,)}, ShapeError, "tuple of ints"),
        ({"strides": (4, 4)}, ShapeError, "one stride per dimension"),
        ({"strides": "4"}, ShapeError, "tuple of ints"),
        ({"typestr": ">f4"}, DTypeError, "byte order"),
        ({"typestr": "f4"}, DTypeError, "typestr such as"),
        ({"typestr": np.float32}, DTypeError, "typestr such as"),
        ({"version": 4}, ArgumentError, "versions 0 to 3"),
        ({"version": "3"}, ArgumentError, "versions 0 to 3"),
        ({"version": None}, ArgumentError, "versions 0 to 3"),
        ({"data": (0, False)}, ArgumentError, "NULL"),
        ({"data": ("0x1000", False)}, ArgumentError, "pointer, read_only"),
        ({"data": (4096, "no")}, ArgumentError, "pointer, read_only"),
        (_misaligned, ArgumentError, "not aligned"),
        ({"shape": (1 << 62, 4), "strides": (16, 4)}, ShapeError, "address space"),
        ({"shape": (1 << 62, 4), "strides": (0, 4)}, ShapeError, "int64"),
        (_past_the_address_space, ShapeError, "address space"),
    ],
    ids=[
        "negative-shape", "str-shape", "float-shape", "strides-count", "str-strides",
        "big-endian", "no-byte-order", "dtype-not-typestr", "version-4", "str-version",
        "no-version", "null-data", "str-pointer", "non-bool-readonly", "misaligned",
        "extent-overflow", "size-overflow", "past-the-address-space",
    ],
)  # fmt: skip
def test_broken_interfaces_are_refused_at_import(changes, error, match) -> None:
    t = cuasync.zeros((4,)).sync()
    if callable(changes):
        changes = changes(t)
    with pytest.raises(error, match=match):
        cuasync.asarray(shared(t, **changes))
    np.testing.assert_array_equal(t.to_host().sync(), np.zeros(4, np.float32))  # device fine


def test_a_missing_version_is_refused() -> None:
    t = cuasync.zeros((4,)).sync()
    interface = {k: v for k, v in t.__cuda_array_interface__.items() if k != "version"}
    with pytest.raises(ArgumentError, match="no 'version' entry"):
        cuasync.asarray(CAI(interface))


def test_empty_arrays_need_no_memory() -> None:
    u = cuasync.asarray(CAI({"shape": (0, 3), "typestr": "<f4", "data": (0, False), "version": 3}))
    assert u.shape == (0, 3)
    assert u.to_host().sync().shape == (0, 3)


def test_asarray_refuses_what_is_no_array() -> None:
    # (host data is uploaded: tests/tensors/test_creation_api.py)
    with pytest.raises(ArgumentError, match="neither"):
        cuasync.asarray(object())  # type: ignore[call-overload]
    t = cuasync.zeros((4,)).sync()
    with pytest.raises(ArgumentError, match="copy"):
        cuasync.asarray(shared(t), copy=True)


@pytest.mark.skipif(cuasync.device_count() < 2, reason="needs two devices")
def test_import_finds_the_device_from_the_pointer() -> None:
    t = cuasync.zeros((4,), device=1).sync()
    assert cuasync.asarray(shared(t)).device is cuasync.Device(1)
    with pytest.raises(InvalidDeviceError, match="device 1"):
        cuasync.asarray(shared(t), device=0)


@pytest.mark.skipif(ON_EMULATOR, reason="needs a GPU: the emulator's memory is not CUDA's")
def test_cupy_round_trip() -> None:
    cupy = pytest.importorskip("cupy", reason="cupy is not installed")
    t = cuasync.from_host(np.arange(6, dtype=np.float32)).sync()
    y = cupy.asarray(t)  # through __cuda_array_interface__, zero-copy
    assert int(y.data.ptr) == t.ptr and y.tolist() == list(range(6))
    x = cupy.arange(4, dtype=cupy.int64)
    u = cuasync.asarray(x)
    assert u.ptr == int(x.data.ptr)
    np.testing.assert_array_equal(u.to_host().sync(), np.arange(4))
