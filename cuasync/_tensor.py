"""``Tensor``: a typed, strided view of a device allocation.

Views (slicing, ``reshape``, ``view``, ``reinterpret``) share the allocation and never
copy; the allocation is freed, stream-ordered, when the last view goes away.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from types import EllipsisType
from typing import TYPE_CHECKING, Any, SupportsIndex, TypeGuard

import numpy as np

from ._core.context import read_only_message
from ._core.device import Device
from ._core.memory import Allocation
from ._core.process_local import ProcessLocal
from ._dtypes import DTypeLike, as_dtype, dtype_name
from ._native import TensorCore
from ._ops.operators import TensorOperators
from .errors import (
    ArgumentError,
    HostArrayError,
    IndexOutOfRangeError,
    ShapeError,
    UnsupportedIndexError,
)

if TYPE_CHECKING:
    from ._core.op import DeviceOp
    from ._launch.kernel import DevicePointer
    from ._launch.partition import Partition
    from ._ops.tensorop import ShapeLike, TensorOp

__all__ = ["Tensor", "check_shape", "is_size"]

Shape = tuple[int, ...]
#: One item of a basic index: an int (or any ``__index__`` object: a numpy integer), a
#: slice, ``...``, or None (``numpy.newaxis``, a new axis of length 1).
IndexItem = SupportsIndex | slice | EllipsisType | None
#: What ``Tensor.__getitem__`` takes: a basic index item or a tuple of them.
Index = IndexItem | tuple[IndexItem, ...]


class Methods:
    """The ops behind :class:`Tensor`'s methods, owned by the layers above this module.

    Every op builds on ``Tensor``, so this module cannot import the ops that view, copy,
    convert or export one. Each owner fills its entries when it is imported, and
    ``cuasync/__init__.py`` imports them all before any tensor can exist.
    """

    permute: Callable[[Tensor, Any, str], Tensor]  # cuasync/_ops/views.py
    partition: Callable[..., Partition]  # cuasync/_launch/partition.py
    device_pointer: Callable[[Tensor], DevicePointer]  # cuasync/_launch/kernel.py
    convert: Callable[..., TensorOp]  # cuasync/_ops/creation.py
    check_casting: Callable[[np.dtype[Any], np.dtype[Any], Any], None]  # (same)
    convert_kernels: Callable[[np.dtype[Any], bool], tuple[Any, ...]]  # (same)
    to_host: Callable[[Tensor], DeviceOp[np.ndarray]]  # cuasync/_transfers/copies.py
    dup: Callable[[Tensor], TensorOp]  # (same)
    to_device: Callable[[Tensor, Any], DeviceOp[Tensor]]  # (same)
    cai_export: Callable[[Tensor], dict[str, Any]]  # cuasync/_interop/cai.py


methods = Methods()


def is_size(value: Any) -> TypeGuard[int | np.integer[Any]]:
    """Whether ``value`` is an integer a size or index may be: an int or numpy integer.

    Bools are not (``True`` as a size is almost always a bug), nor are floats, even
    integral ones.
    """
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _given(value: Any) -> str:
    """``value`` for an error message: its type and (a bounded) repr."""
    return f"{type(value).__name__} {value!r}"[:120]


def _dimensions(shape: Any, argument: str) -> tuple[Any, ...]:
    """``shape`` as a tuple of sizes (not yet range-checked), or :class:`ShapeError`."""
    if is_size(shape):
        return (shape,)
    # Only real sequences: a dict, set, str or generator is not a shape, even though
    # tuple() would accept it (tuple({}) is the 0-d shape).
    if isinstance(shape, np.ndarray) and shape.ndim == 1:
        shape = shape.tolist()
    if not isinstance(shape, (tuple, list)):
        raise ShapeError(f"{argument} must be an int or a tuple of ints, got {_given(shape)}")
    for d in shape:
        if not is_size(d):
            raise ShapeError(
                f"{argument}={tuple(shape)!r}: every dimension must be an int, got {_given(d)}"
            )
    return tuple(shape)


def check_shape(shape: Any, argument: str = "shape") -> Shape:
    """Normalize an int or a sequence of ints >= 0, or raise :class:`ShapeError`.

    Numpy integers are accepted; bools, floats and anything that is not a tuple, list
    or 1-d array of ints are not.

    >>> check_shape((np.int64(2), 3))
    (2, 3)
    """
    dims = tuple(int(d) for d in _dimensions(shape, argument))
    for d in dims:
        if d < 0:
            raise ShapeError(f"{argument}={dims}: dimensions must be >= 0, got {d}")
    return dims


def resolve_shape(size: int, shape: Any) -> Shape:
    """``shape`` for ``size`` elements, its one -1 inferred; ``ShapeError`` if it cannot be."""
    dims = [int(d) for d in _dimensions(shape, "shape")]
    if any(d < -1 for d in dims) or dims.count(-1) > 1:
        raise ShapeError(
            f"shape={tuple(dims)}: dimensions must be >= 0, and one of them may be -1 "
            "(inferred from the element count)"
        )
    if -1 in dims:
        known = math.prod(d for d in dims if d != -1)
        if known == 0 or size % known:
            raise ShapeError(f"shape={tuple(dims)} cannot hold the tensor's {size} elements")
        dims[dims.index(-1)] = size // known
    new = check_shape(dims)
    if math.prod(new) != size:
        raise ShapeError(
            f"shape={new} holds {math.prod(new)} elements but the tensor has {size}; "
            "the element count must stay the same"
        )
    return new


class _Bytes:
    """A tensor's bytes described to numpy at their device address (numpy never reads them)."""

    def __init__(self, t: Tensor) -> None:
        self.__array_interface__ = {
            "data": (t.ptr, True),
            "shape": (*t.shape, t.itemsize),
            "strides": (*(s * t.itemsize for s in t.strides), 1),
            "typestr": "|u1",
            "version": 3,
        }


def check_writable(t: Tensor, argument: str, name: str) -> Tensor:
    """``t`` if an op may write it (``out=``, ``fill``'s tensor, ``memcpy``'s dst), else a
    ShapeError: the one check every op writing a tensor given to it makes.

    A view whose elements alias one another is refused, a ShapeError: a broadcast view
    (stride 0 along an axis longer than 1), or strides that step onto elements already
    seen (``(3, 4)`` with strides ``(1, 1)``, as torch's ``unfold`` makes); what lands
    would depend on the order in which threads or copy engines write. So is read-only
    memory (imported so), an ArgumentError. An empty view writes nothing and is accepted.

    >>> check_writable(cuasync.broadcast_to(row, (3, 4)), "out", "add")
    Traceback (most recent call last):
    cuasync.errors.ShapeError: add: out is a broadcast view ...
    """
    if t.allocation.readonly:
        raise ArgumentError(f"{name}: " + read_only_message(argument))
    if not t.size:
        return t
    if 0 in t.strides:
        for axis, (d, s) in enumerate(zip(t.shape, t.strides, strict=True)):
            if s == 0 and d > 1:
                raise ShapeError(
                    f"{name}: {argument} is a broadcast view (shape {t.shape}, strides "
                    f"{t.strides}: stride 0 along axis {axis} of length {d}), whose elements "
                    "alias one another, so what would land is undefined; write into a tensor "
                    "of its own (cuasync.empty(shape)) and broadcast that where it is read"
                )
    if not elements_distinct(t.shape, t.strides):
        raise ShapeError(
            f"{name}: {argument} (shape {t.shape}, strides {t.strides}) has elements that "
            "overlap one another, so what would land is undefined; write into a tensor of "
            "its own (cuasync.empty(shape))"
        )
    return t


def elements_distinct(shape: Shape, strides: Shape) -> bool:
    """Whether a view's elements are provably distinct: its axes longer than 1, by
    stride, each step past all the elements of those below (False may be a layout too
    tangled to tell; the native ``out=`` check uses the same rule).

    >>> elements_distinct((3, 4), (4, 1)), elements_distinct((3, 4), (1, 1))
    (True, False)
    """
    if _spans_apart(zip(strides[::-1], shape[::-1], strict=True)):  # (C order: no sort)
        return True
    return _spans_apart(sorted((abs(s), d) for s, d in zip(strides, shape, strict=True)))


def _spans_apart(axes: Iterable[tuple[int, int]]) -> bool:
    """Whether each (stride, length) of ``axes`` longer than 1 steps past all the
    elements of those before it."""
    spanned = 1  # (elements the axes before span, plus one)
    for s, d in axes:
        if d > 1:
            if abs(s) < spanned:
                return False
            spanned += abs(s) * (d - 1)
    return True


def partly_overlap(a: Tensor, b: Tensor) -> bool:
    """Whether views of one allocation share a byte without being the very same view
    (the same elements in the same places: a stride along an axis of length 1 moves to
    no other element, so it may differ).

    >>> partly_overlap(x[1:], x[:-1]), partly_overlap(x, x), partly_overlap(x[::2], x[1::2])
    (True, False, False)
    """
    if a.allocation is not b.allocation or a.size == 0 or b.size == 0 or _same_view(a, b):
        return False
    return _share_bytes(a, b)


def _share_bytes(a: Tensor, b: Tensor) -> bool:
    """Whether two views of one allocation share a byte (as numpy tells, bounded)."""
    try:
        # bounded work (numpy's stubs only name -1 and 0, but any bound is accepted)
        limit: Any = 1 << 16
        return bool(np.shares_memory(np.asarray(_Bytes(a)), np.asarray(_Bytes(b)), limit))
    except np.exceptions.TooHardError:  # cannot tell cheaply: refuse, as for an overlap
        return True


def overlap(a: Tensor, b: Tensor) -> bool:
    """Whether views of one allocation share a byte, the very same view included.

    >>> overlap(x, x), overlap(x[1:], x[:-1]), overlap(x[::2], x[1::2])
    (True, True, False)
    """
    if a.allocation is not b.allocation or a.size == 0 or b.size == 0:
        return False
    return _same_view(a, b) or _share_bytes(a, b)


def _same_view(a: Tensor, b: Tensor) -> bool:
    """The same elements in the same places (a stride along an axis of length 1 moves to
    no other element, so it may differ)."""
    return (a.ptr, a.shape, a.itemsize) == (b.ptr, b.shape, b.itemsize) and all(
        s == t or d == 1 for d, s, t in zip(a.shape, a.strides, b.strides, strict=True)
    )


def viewing_strides(shape: Shape, strides: Shape, new: Shape) -> Shape | None:
    """The strides that see the elements of ``shape``/``strides`` in C order in the
    shape ``new`` (the same size), or None where no strides can (a copy is needed).

    Each run of old axes whose lengths multiply to those of a run of new axes must join
    its elements without a gap (each axis's stride its inner neighbour's times its
    length); the new axes of the run then step from the run's innermost stride.

    >>> viewing_strides((4, 3), (6, 2), (12,))      # (x[:, ::2] of a (4, 6) x)
    (2,)
    >>> viewing_strides((3, 4), (1, 3), (12,)) is None     # (x.T of a (4, 3) x)
    True
    >>> viewing_strides((4, 3), (6, 1), (2, 2, 3))
    (12, 6, 1)
    """
    if math.prod(shape) == 0:
        return contiguous_strides(new)  # (no element to address)
    old = [(d, s) for d, s in zip(shape, strides, strict=True) if d != 1]
    found: list[int | None] = [None] * len(new)
    i = j = 0
    while j < len(new):
        if new[j] == 1:
            j += 1  # (given a stride below)
            continue
        last_old, last_new = i, j
        have, want = old[i][0], new[j]
        while have != want:  # (the shortest runs of equal size: both end together)
            if have < want:
                last_old += 1
                have *= old[last_old][0]
            else:
                last_new += 1
                want *= new[last_new]
        if any(old[k][1] != old[k + 1][1] * old[k + 1][0] for k in range(i, last_old)):
            return None
        step = old[last_old][1]
        for k in range(last_new, j - 1, -1):
            found[k] = step
            step *= new[k]
        i, j = last_old + 1, last_new + 1
    inner = 1  # (a length-1 axis: the stride a contiguous tensor would give it)
    for k in range(len(new) - 1, -1, -1):
        if found[k] is None:
            found[k] = inner
        inner = found[k] * new[k]  # type: ignore[operator]
    return tuple(found)  # type: ignore[arg-type]


def contiguous_strides(shape: Shape) -> Shape:
    if len(shape) == 1:
        return _ONE  # (the most common shape)
    strides = []
    step = 1
    for d in reversed(shape):
        strides.append(step)
        step *= max(d, 1)
    return tuple(reversed(strides))


_ONE: Shape = (1,)


def _unsupported_index(item: Any) -> str:
    """Why ``item`` is not a basic index, and what to do instead."""
    given = f"cannot index a tensor with {_given(item)}"
    if isinstance(item, (np.ndarray, list, tuple)) or hasattr(item, "__array__"):
        return (
            f"{given}: tensor[...] only makes zero-copy views (ints, slices, '...', None); "
            "gathering by an integer array copies data: use cuasync.take(tensor, indices, axis); "
            "masking by a boolean array: cuasync.where(mask, tensor, fill); or index the host "
            "copy (await tensor.to_host())"
        )
    return f"{given}: use ints, slices, '...' or None"


def derived_view(base: Tensor, shape: Shape, strides: Shape, offset: int) -> Tensor:
    """A view of ``base``'s allocation starting at ``offset``; an empty one keeps
    ``base.offset``.

    Moving along the axes of an empty view (``t[::-1]`` where another axis is 0) could put
    its offset past the end of the allocation: the view touches nothing, but its pointer,
    passed to a kernel or copy, would not be inside device memory. Keeping ``base``'s
    offset, valid by the same rule, keeps every view's pointer inside its allocation.
    """
    if 0 in shape:
        offset = base.offset
    return Tensor(base.allocation, shape, base.dtype, strides, offset)


class _NoMatrixAxes(ShapeError, AttributeError):
    """``mT`` of a tensor of fewer than two dimensions: a ``ShapeError``, and an
    ``AttributeError`` too, so that ``hasattr`` and ``inspect.getmembers`` (Ray's
    serializability check walks a tensor's attributes) see no such attribute."""


class Tensor(TensorOperators, ProcessLocal, TensorCore):
    """An n-dimensional array in device memory.

    ``shape`` and ``dtype`` are numpy's; ``strides`` and ``offset`` (where the view starts
    in its allocation) are in elements. Create tensors with :func:`cuasync.from_host`,
    :func:`cuasync.empty` or :func:`cuasync.zeros`; they are outputs of ops.

    >>> t = await cuasync.from_host(np.arange(12, dtype=np.float32).reshape(3, 4))
    >>> t[1:3, 2:4].shape, t.reshape((4, 3)).strides
    ((2, 2), (3, 1))
    """

    _local_hint = (
        "send host data (await t.to_host(), a numpy array) and upload it there with "
        "cuasync.from_host; for a copy on the device, use t.dup()"
    )

    # _alloc, shape, dtype, strides and offset are the native base's fields (``TensorCore``:
    # the native core reads them)
    __slots__ = ("__weakref__",)

    def __init__(
        self,
        alloc: Allocation,
        shape: Shape,
        dtype: np.dtype[Any],
        strides: Shape | None = None,
        offset: int = 0,
    ) -> None:
        self._alloc = alloc
        self.shape = shape
        self.dtype = dtype
        self.strides = contiguous_strides(shape) if strides is None else strides
        self.offset = offset  # in elements from the start of the allocation

    # -- properties ----------------------------------------------------------------------
    @property
    def device(self) -> Device:
        """The device whose memory holds the data."""
        return self._alloc.device

    @property
    def ndim(self) -> int:
        """The number of axes: ``len(t.shape)``."""
        return len(self.shape)

    @property
    def size(self) -> int:
        """The number of elements (1 for a 0-d tensor)."""
        return math.prod(self.shape)

    @property
    def itemsize(self) -> int:
        """Bytes per element."""
        return self.dtype.itemsize

    @property
    def nbytes(self) -> int:
        """Bytes of the elements this view covers (``size * itemsize``)."""
        return self.size * self.dtype.itemsize

    @property
    def ptr(self) -> int:
        """Device address of the first element."""
        return self._alloc.ptr + self.offset * self.dtype.itemsize

    @property
    def is_contiguous(self) -> bool:
        """Whether the elements are dense and in row-major (C) order."""
        return self.size <= 1 or all(
            s == c or d == 1
            for s, c, d in zip(
                self.strides, contiguous_strides(self.shape), self.shape, strict=True
            )
        )

    @property
    def allocation(self) -> Allocation:
        """The device allocation this view belongs to (shared by all its views)."""
        return self._alloc

    def __repr__(self) -> str:
        return (
            f"<cuasync.Tensor shape={self.shape} dtype={dtype_name(self.dtype)} "
            f"device={self.device.ordinal} strides={self.strides}>"
        )

    def __len__(self) -> int:
        """The length of the first axis (``TypeError`` for a 0-d tensor, as in numpy)."""
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __iter__(self) -> Iterator[Tensor]:
        """Zero-copy views along the first axis: ``list(t)`` has ``len(t)`` tensors.

        >>> rows = list(t)            # t[0], t[1], ...
        """
        if not self.shape:
            raise TypeError("iteration over a 0-d tensor")
        return map(self.__getitem__, range(self.shape[0]))

    def __contains__(self, value: Any) -> bool:
        # Without this, `in` would iterate views and compare them by identity: always False.
        raise TypeError(
            "`value in tensor` would need the tensor's data on the host; use "
            "`value in await tensor.to_host()`"
        )

    def __bool__(self) -> bool:
        # Without this, `if t:` would be len(t) != 0: truthy whatever the data is.
        raise TypeError(
            "the truth value of a device tensor is not known without copying it to the host; "
            "compare `t is not None`, or test the data: `(await t.to_host()).any()`"
        )

    def __setitem__(self, index: object, value: object) -> None:
        raise TypeError(
            "tensors do not support item assignment (it would enqueue work outside an op); "
            "write with ops: `await cuasync.fill(t[index], value)` for a scalar, "
            "`await cuasync.memcpy(t[index], src)` for a tensor"
        )

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        raise HostArrayError(
            "a device tensor is not a numpy array, and converting it would block on the "
            "device; copy it explicitly: `array = await t.to_host()`"
        )

    def span(self) -> tuple[int, int]:
        """The element offsets ``[lo, hi)`` of the allocation this view can touch."""
        if self.size == 0:
            return (self.offset, self.offset)
        lo = self.offset + sum(
            s * (d - 1) for s, d in zip(self.strides, self.shape, strict=True) if s < 0
        )
        hi = self.offset + sum(
            s * (d - 1) for s, d in zip(self.strides, self.shape, strict=True) if s > 0
        )
        return (lo, hi + 1)

    # -- views -----------------------------------------------------------------------------
    def _resolve_shape(self, shape: Any) -> Shape:
        return resolve_shape(self.size, shape)

    def reshape(self, shape: ShapeLike) -> Tensor:
        """The same elements in another shape (-1 infers one length), zero-copy: a
        contiguous tensor, or a view whose axes split or merge without gaps between the
        elements they join (as numpy's views: ``x[:, ::2]`` flattens, ``x.T`` does not).

        >>> m = t.reshape((2, -1))
        """
        new = self._resolve_shape(shape)
        if self.is_contiguous:
            return Tensor(self._alloc, new, self.dtype, None, self.offset)
        strides = viewing_strides(self.shape, self.strides, new)
        if strides is None:
            raise ShapeError(
                f"reshape of a view (shape {self.shape}, strides {self.strides}) to {new} "
                "cannot be zero-copy; make a contiguous copy first with .dup()"
            )
        return Tensor(self._alloc, new, self.dtype, strides, self.offset)

    def view(self, shape: ShapeLike) -> Tensor:
        """Alias of :meth:`reshape`: a zero-copy view in another shape."""
        return self.reshape(shape)

    def reinterpret(self, dtype: DTypeLike, shape: ShapeLike | None = None) -> Tensor:
        """The same bytes seen as ``dtype`` (and ``shape``); sizes and alignment are checked.

        >>> bits = t.reinterpret("uint32")      # float32 -> its bit patterns
        """
        dt = as_dtype(dtype)
        if not self.is_contiguous:
            raise ShapeError("reinterpret needs a contiguous tensor; make a copy with .dup() first")
        if shape is None:
            if self.nbytes % dt.itemsize:
                raise ShapeError(
                    f"{self.nbytes} bytes cannot be reinterpreted as {dtype_name(dt)} "
                    f"(itemsize {dt.itemsize}); pass a shape"
                )
            last = self.shape[-1] if self.shape else 1
            if (last * self.itemsize) % dt.itemsize:
                new: Shape = (self.nbytes // dt.itemsize,)
            else:
                new = (*self.shape[:-1], last * self.itemsize // dt.itemsize)
        else:
            new = check_shape(shape)
        if math.prod(new) * dt.itemsize != self.nbytes:
            raise ShapeError(
                f"reinterpret as {dtype_name(dt)}{new} needs {math.prod(new) * dt.itemsize} bytes, "
                f"the tensor has {self.nbytes}"
            )
        byte_offset = self.offset * self.itemsize
        if byte_offset % dt.itemsize:
            raise ShapeError(
                f"the view starts at byte {byte_offset} of its allocation, which is not aligned "
                f"to {dtype_name(dt)}'s {dt.itemsize} bytes"
            )
        return Tensor(self._alloc, new, dt, None, byte_offset // dt.itemsize)

    def transpose(self, *axes: int | Sequence[int]) -> Tensor:
        """The axes permuted, zero-copy: reversed without arguments (numpy's rules).

        >>> t.transpose().shape, t.transpose(1, 0, 2).shape, t.transpose((2, 0, 1)).shape
        ((4, 3, 2), (3, 2, 4), (4, 2, 3))
        """
        if len(axes) == 1 and (axes[0] is None or isinstance(axes[0], (tuple, list))):
            axes = () if axes[0] is None else tuple(axes[0])
        return methods.permute(self, axes or tuple(reversed(range(self.ndim))), "transpose")

    @property
    def T(self) -> Tensor:
        """The axes reversed, zero-copy (``t.transpose()``)."""
        return self.transpose()

    @property
    def mT(self) -> Tensor:
        """The last two axes swapped (a stack of matrices transposed), zero-copy; a
        tensor of two or more dimensions.

        >>> x.mT.shape                            # x: (5, 2, 3)
        (5, 3, 2)
        """
        if self.ndim < 2:
            raise _NoMatrixAxes(
                f"mT needs two or more dimensions, this tensor has shape {self.shape}"
            )
        axes = (*range(self.ndim - 2), self.ndim - 1, self.ndim - 2)
        return methods.permute(self, axes, "mT")

    def __getitem__(self, index: Index) -> Tensor:
        """numpy-style basic indexing, zero-copy: ints, slices (negative steps too), ``...``,
        None (``numpy.newaxis``).

        An int past its axis raises :class:`~cuasync.errors.IndexOutOfRangeError` (an
        ``IndexError``); arrays, lists and other objects raise
        :class:`~cuasync.errors.UnsupportedIndexError`. Slice bounds past the axis are
        clipped to it, as Python's and numpy's.

        >>> t[1:5, ::2].shape, t[None, 0].shape, t[..., -1].shape, t[::-1].strides
        ((4, 4), (1, 8), (6,), (-8, 1))
        """
        items = index if isinstance(index, tuple) else (index,)
        consumed = self._check_items(items)
        if consumed > self.ndim:
            raise IndexOutOfRangeError(
                f"too many indices: {consumed} for a {self.ndim}-d tensor of shape {self.shape}"
            )
        offset = self.offset
        shape: list[int] = []
        strides: list[int] = []
        axis = 0
        for item in items:
            if item is None:  # a new axis of length 1
                shape.append(1)
                strides.append(0)
                continue
            if item is Ellipsis:
                fill = self.ndim - consumed
                shape.extend(self.shape[axis : axis + fill])
                strides.extend(self.strides[axis : axis + fill])
                axis += fill
                continue
            dim, stride = self.shape[axis], self.strides[axis]
            if type(item) is slice:
                start, n, step = self._check_slice(item, dim, axis)
                offset += start * stride
                shape.append(n)
                strides.append(stride * step)
            else:
                i = int(item)
                if not -dim <= i < dim:
                    raise IndexOutOfRangeError(
                        f"index {i} is out of range for axis {axis} with size {dim} "
                        f"(expected {-dim}..{dim - 1})"
                    )
                offset += (i % dim) * stride
            axis += 1
        shape.extend(self.shape[axis:])
        strides.extend(self.strides[axis:])
        return derived_view(self, tuple(shape), tuple(strides), offset)

    @staticmethod
    def _check_items(items: tuple[IndexItem, ...]) -> int:
        """The number of axes ``items`` index; raises for anything but basic indices."""
        consumed = 0
        ellipsis = False
        for item in items:
            if item is None:
                continue
            if item is Ellipsis:
                if ellipsis:
                    raise UnsupportedIndexError("an index can only have a single ellipsis ('...')")
                ellipsis = True
                continue
            if type(item) is not slice and not is_size(item):
                raise UnsupportedIndexError(_unsupported_index(item))
            consumed += 1
        return consumed

    @staticmethod
    def _check_slice(item: slice, dim: int, axis: int) -> tuple[int, int, int]:
        """``(start, length, step)`` of a slice of an axis of size ``dim``; bounds past the
        axis are clipped to it, as Python's and numpy's (``t[-100:]``: the last 100 at most)."""
        step = 1 if item.step is None else item.step
        if not is_size(step) or step == 0:
            raise ShapeError(f"slice step on axis {axis} must be a non-zero int, got {item.step!r}")
        for name, value in (("start", item.start), ("stop", item.stop)):
            if value is not None and not is_size(value):
                raise ShapeError(
                    f"slice {name} on axis {axis} must be an int or None, got {_given(value)}"
                )
        lo, hi = (None if v is None else int(v) for v in (item.start, item.stop))
        start, stop, step = slice(lo, hi, int(step)).indices(dim)
        return start, len(range(start, stop, step)), step

    def partition(self, tile_shape: ShapeLike) -> Partition:
        """Split into tiles of ``tile_shape`` for a kernel launch (one tile per block).

        >>> out = cuasync.zeros((64, 64)).sync().partition((16, 16))   # grid (4, 4)
        """
        return methods.partition(self, tile_shape)

    def partition_prefix(self, tile_shape: ShapeLike) -> Partition:
        """As :meth:`partition`, but a launch may cover a per-axis prefix of the tiles:
        an explicit grid of at most the tile grid on each axis (``partition`` wants it equal).

        >>> p = cuasync.zeros((64, 64)).sync().partition_prefix((16, 16))  # tiles (4, 4)
        >>> await k[(2, 4), (16, 16)](p)     # the first two tile rows only
        """
        return methods.partition(self, tile_shape, prefix=True)

    def device_pointer(self) -> DevicePointer:
        """A typed, non-owning :class:`~cuasync.lowlevel.DevicePointer` to the first element.

        A launch taking it checks the dtype, is ordered like one taking the tensor, and
        keeps the tensor alive until the kernel has run; the pointer never frees memory.

        >>> await k[grid, block](x.device_pointer(), n)
        """
        return methods.device_pointer(self)

    # -- ops on the tensor (lazy) ---------------------------------------------------------
    def astype(self, dtype: DTypeLike, *, casting: str = "unsafe") -> TensorOp:
        """An op producing a contiguous copy cast to ``dtype`` (:func:`cuasync.convert`):
        ``casting`` is numpy's ("no", "equiv", "safe", "same_kind", "unsafe"), or
        "checked" (:class:`~cuasync.errors.CastOverflowError` where a value does not fit).

        >>> h = await t.astype("float16")
        >>> i = await t.astype("int8", casting="checked")
        """
        return methods.convert(self, dtype, casting=casting)

    def item(self) -> DeviceOp[Any]:
        """An op copying the one element of a size-1 tensor to the host as a Python scalar.

        >>> total = await cuasync.sum(x).then(lambda s: s.item())   # or: (await op).item()
        """
        if self.size != 1:
            raise ShapeError(
                f"item() needs a tensor of exactly one element, this one has {self.size} "
                f"(shape {self.shape})"
            )
        return self.to_host().map(lambda a: a.item())

    # -- copies (lazy ops) ---------------------------------------------------------------
    def to_host(self) -> DeviceOp[np.ndarray]:
        """An op copying the tensor into a new numpy array (through pinned memory)."""
        return methods.to_host(self)

    def dup(self) -> TensorOp:
        """An op producing a contiguous copy of the tensor on the same device."""
        return methods.dup(self)

    def to(self, device: int | Device) -> DeviceOp[Tensor]:
        """An op producing a contiguous copy of the tensor on ``device``.

        Always a new tensor, on the same device too (then it is :meth:`dup`): what you get
        never aliases the input, however many devices the machine has. Between devices
        the copy goes device to device where they can access each other's memory, else
        through pinned host memory; it runs on a stream of ``device``'s policy and waits
        for pending writes to this tensor (see docs/multi-gpu.md).

        >>> y = await x.to(1)                     # x on device 0, y on device 1
        """
        return methods.to_device(self, device)

    def to_device(self, device: int | Device, /, *, stream: object = None) -> DeviceOp[Tensor]:
        """The array API's name of :meth:`to`: an op copying the tensor to ``device``
        (``stream`` must be None: the copy runs on a stream of ``device``'s policy).

        >>> y = await x.to_device(x.device)
        """
        if stream is not None:
            raise ArgumentError(
                f"to_device: stream must be None (got {stream!r}); the copy runs on a "
                "stream of the device's policy (cuasync.use_policy chooses it)"
            )
        return self.to(device)

    # -- interop ---------------------------------------------------------------------------
    # __dlpack__ and __dlpack_device__ are the native base's (TensorCore: the common
    # export in C, the rest in cuasync/_interop/dlpack.py).

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        """The CUDA Array Interface (v3); ``stream`` is cuasync's stream to order after.

        >>> cupy.asarray(t)            # zero-copy
        """
        return methods.cai_export(self)
