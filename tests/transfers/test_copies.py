"""Copies are lazy device ops: from_host, to_host, dup, memcpy, empty, zeros."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import cuasync
from cuasync.errors import (
    AliasingError,
    ArgumentError,
    DTypeError,
    OutOfMemoryError,
    ShapeError,
)


def test_building_copies_enqueues_nothing(enqueued) -> None:
    dev = cuasync.Device(0)
    t = cuasync.from_host(np.arange(4.0)).sync()
    before = (len(enqueued), dev.memory_info().used)
    ops = [
        cuasync.from_host(np.ones(100)),
        t.to_host(),
        t.dup(),
        cuasync.memcpy(t, t),
        cuasync.zeros((100,)),
        cuasync.empty((100,)),
    ]
    assert (len(enqueued), dev.memory_info().used) == before
    with pytest.warns(RuntimeWarning, match="was never executed"):
        del ops


def test_from_host_reads_the_array_when_executed() -> None:
    data = np.zeros(4)
    op = cuasync.from_host(data)
    data[:] = 7
    np.testing.assert_array_equal(op.sync().to_host().sync(), np.full(4, 7.0))


def test_from_host_accepts_array_likes_and_scalars() -> None:
    np.testing.assert_array_equal(
        cuasync.from_host([[1, 2], [3, 4]]).sync().to_host().sync(), [[1, 2], [3, 4]]
    )
    zero_d = cuasync.from_host(np.float32(2.5)).sync()
    assert zero_d.shape == () and zero_d.to_host().sync() == np.float32(2.5)
    empty = cuasync.from_host(np.zeros((0, 3))).sync()
    assert empty.shape == (0, 3) and empty.to_host().sync().shape == (0, 3)


def test_a_byte_swapped_array_is_refused_with_the_conversion_that_fixes_it() -> None:
    data = np.arange(4, dtype=">f4")
    with pytest.raises(DTypeError, match=r"float32 in big-endian byte order.*astype\('<f4'\)"):
        cuasync.from_host(data)
    fixed = cuasync.from_host(data.astype("<f4")).sync()
    np.testing.assert_array_equal(fixed.to_host().sync(), data)


def test_a_shape_numpy_cannot_make_is_refused_by_to_host() -> None:
    huge = cuasync.zeros((0, 2**40, 2**40)).sync()  # (holds nothing; numpy refuses it)
    with pytest.raises(ShapeError, match=r"numpy cannot make an array of shape \(0, "):
        huge.to_host()
    fits = cuasync.zeros((0, 2**30, 2**30), dtype="int8").sync()
    assert fits.to_host().sync().shape == (0, 2**30, 2**30)
    many = cuasync.zeros((1,) * 65).sync()  # (numpy 2 makes 64 dimensions at most)
    with pytest.raises(ShapeError, match="an array of 65 dimensions"):
        many.to_host()
    assert many.reshape((1,) * 64).to_host().sync().shape == (1,) * 64


def test_from_host_refuses_a_tensor() -> None:
    t = cuasync.zeros((2,)).sync()
    with pytest.raises(ArgumentError, match="dup"):
        cuasync.from_host(t)


def test_dup_is_a_contiguous_copy() -> None:
    host = np.arange(60, dtype=np.int16).reshape(3, 4, 5)
    t = cuasync.from_host(host).sync()
    view = t[:, 1:3, ::2]
    d = view.dup().sync()
    assert d.is_contiguous and d.allocation is not t.allocation
    np.testing.assert_array_equal(d.to_host().sync(), host[:, 1:3, ::2])


def test_dup_and_to_host_leave_the_copy_engines_only_one_call_of_wide_rows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A transposed view took a driver call per column, each copying one element a row;
    # it is now one kernel launch (to host: then one copy), as are narrow rows and several
    # calls. A block, or one call of wide rows, stays a copy-engine copy.
    from cuasync._backends import get_backend
    from cuasync._transfers import copies

    host = np.arange(64 * 64, dtype=np.float32).reshape(64, 64)
    t = cuasync.from_host(host).sync()
    t3 = cuasync.from_host(host.reshape(4, 32, 32)).sync()
    backend = get_backend()
    copied: list[Any] = []
    gathered: list[Any] = []
    memcpy_2d, kernel_copy = backend.memcpy_2d_async, copies.kernel_copy

    def copy_spy(*args: Any) -> None:
        copied.append(args)
        memcpy_2d(*args)

    def kernel_spy(*args: Any) -> None:
        gathered.append(args)
        kernel_copy(*args)

    monkeypatch.setattr(backend, "memcpy_2d_async", copy_spy)
    monkeypatch.setattr(copies, "kernel_copy", kernel_spy)
    kernel, rows, block = (1, 0), (0, 1), (0, 0)  # (kernel copies, 2D copy calls)
    cases = [
        (t.T, host.T, kernel),  # one element a row, a call per column
        (t[:, :4], host[:, :4], kernel),  # rows of 16 bytes
        (t3[:, :, :16], host.reshape(4, 32, 32)[:, :, :16], kernel),  # a call per batch
        (t[:, :48], host[:, :48], rows),  # one call, rows of 192 bytes
        (t[8:40], host[8:40], block),  # one contiguous block (a 1D copy)
    ]
    for view, want, way in cases:
        copied.clear()
        gathered.clear()
        got = view.dup().sync()
        assert (len(gathered), len(copied)) == way, (view.shape, view.strides)
        assert got.is_contiguous
        np.testing.assert_array_equal(got.to_host().sync(), want)
        copied.clear()
        gathered.clear()
        np.testing.assert_array_equal(view.to_host().sync(), want)  # (the same way to host)
        assert (len(gathered), len(copied)) == way, (view.shape, view.strides)


def test_memcpy_checks_and_copies() -> None:
    a = cuasync.from_host(np.arange(6, dtype=np.float32)).sync()
    b = cuasync.zeros((2, 3), "float32").sync()
    out = cuasync.memcpy(b, a).sync()
    assert out is b
    np.testing.assert_array_equal(b.to_host().sync(), np.arange(6, dtype=np.float32).reshape(2, 3))
    c = cuasync.zeros((4, 4), "float32").sync()
    cuasync.memcpy(c[1:3, 1:4], b).sync()
    expected = np.zeros((4, 4), np.float32)
    expected[1:3, 1:4] = np.arange(6).reshape(2, 3)
    np.testing.assert_array_equal(c.to_host().sync(), expected)
    with pytest.raises(ShapeError, match="equal element counts: dst has 16"):
        cuasync.memcpy(c, a)
    with pytest.raises(DTypeError, match="dst is float32, src is float64"):
        cuasync.memcpy(b, cuasync.zeros((6,), "float64").sync())
    with pytest.raises(ArgumentError, match="src must be a cuasync.Tensor"):
        cuasync.memcpy(b, np.zeros(6))  # type: ignore[arg-type]


def test_zeros_and_empty() -> None:
    z = cuasync.zeros((3, 5), "complex64").sync()
    np.testing.assert_array_equal(z.to_host().sync(), np.zeros((3, 5), np.complex64))
    e = cuasync.empty(7, "uint8").sync()
    assert e.shape == (7,) and e.dtype == np.uint8


def test_out_of_memory_names_the_size() -> None:
    total = cuasync.Device(0).memory_info().total
    with pytest.raises(OutOfMemoryError, match=str(total * 2)):
        cuasync.empty((total * 2,), "uint8").sync()
    # nothing leaked by the failed submission
    assert cuasync.zeros((4,)).sync().to_host().sync().sum() == 0


def test_sizes_no_device_can_address_are_out_of_memory() -> None:
    # more than 2**64 bytes: the driver's size_t cannot even hold the request
    with pytest.raises(OutOfMemoryError, match=r"shape \(1099511627776, 1099511627776\)"):
        cuasync.zeros((2**40, 2**40)).sync()
    with pytest.raises(OutOfMemoryError):
        cuasync.from_host(np.zeros(1)).then(lambda t: cuasync.empty((2**62, 8))).sync()


def test_empty_and_zeros_refuse_what_is_not_a_shape() -> None:
    # a dict or set went through tuple() and became a shape ({} the 0-d one)
    for shape in ({}, {3: 1}, {2, 3}, "3", (2, True), np.float64(3), (np.float32(2),)):
        for make in (cuasync.empty, cuasync.zeros):
            with pytest.raises(ShapeError, match="shape"):
                make(shape)  # type: ignore[arg-type]


def test_tensors_on_several_devices_live_apart() -> None:
    if cuasync.device_count() < 2:
        pytest.skip("needs 2 devices")
    a = cuasync.from_host(np.ones(3), device=1).sync()
    assert a.device.ordinal == 1
    np.testing.assert_array_equal(a.to_host().sync(), np.ones(3))


def test_memcpy_refuses_partly_overlapping_ranges() -> None:
    x = cuasync.from_host(np.arange(8, dtype=np.float32)).sync()
    with pytest.raises(AliasingError, match="memcpy: dst"):
        cuasync.memcpy(x[1:], x[:-1])
    with pytest.raises(AliasingError):
        cuasync.memcpy(x[:4].reinterpret("int32"), x[2:6].reinterpret("int32"))
    cuasync.memcpy(x, x).sync()  # the very same view: allowed
    cuasync.memcpy(x.reshape((2, 4)), x).sync()  # the very same bytes, reshaped: allowed
    cuasync.memcpy(x[::2], x[1::2]).sync()  # interleaved, disjoint
    np.testing.assert_array_equal(x.to_host().sync(), [1, 1, 3, 3, 5, 5, 7, 7])


@pytest.mark.parametrize("strides", [(0, 1), (1, 0), (0, 0), (2, 1)])
def test_views_with_repeated_or_overlapping_rows_copy_like_numpy(strides) -> None:
    # Stride 0 (a broadcast) and rows that overlap cannot go to cuMemcpy2D as pitches
    # (it needs pitch >= row width); the copy still gives numpy's values, both ways.
    host = np.arange(40, dtype=np.float32)
    x = cuasync.from_host(host).sync()
    view = cuasync.Tensor(x.allocation, (6, 5), x.dtype, strides)
    want = np.lib.stride_tricks.as_strided(host, (6, 5), tuple(4 * s for s in strides))
    np.testing.assert_array_equal(view.dup().sync().to_host().sync(), want)
    np.testing.assert_array_equal(view.to_host().sync(), want)


def test_memcpy_writes_a_reversed_view() -> None:
    # issue 34: fill wrote a reversed view, memcpy refused it (ShapeError). Both tensors
    # are flipped along dst's reversed axes: the copy engines write forward.
    a = np.arange(24, dtype=np.float32).reshape(4, 6)
    src = cuasync.from_host(a).sync()
    dst = cuasync.zeros((4, 6)).sync()
    out = cuasync.memcpy(dst[::-1], src).sync()
    assert out.strides == (-6, 1)  # the op outputs the view it was given
    np.testing.assert_array_equal(dst.to_host().sync(), a[::-1])
    cuasync.memcpy(dst[::-1, ::-2], src[:, ::-2]).sync()  # both reversed: forward copies
    want = a[::-1].copy()
    want[::-1, ::-2] = a[:, ::-2]
    np.testing.assert_array_equal(dst.to_host().sync(), want)
    cuasync.memcpy(dst[:, ::-1], src[::-1]).sync()  # reversed on different axes: gathered
    np.testing.assert_array_equal(dst.to_host().sync(), a[::-1, ::-1])
    last = cuasync.device_count() - 1  # another device where there are two
    other = cuasync.zeros((4, 6), device=last).sync()
    cuasync.memcpy(other[::-1], src).sync()
    np.testing.assert_array_equal(other.to_host().sync(), a[::-1])
