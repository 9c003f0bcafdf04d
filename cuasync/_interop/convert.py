"""``cuasync.asarray``: any device array another library made, as a cuasync tensor; host
data (the array API's nested sequences and scalars) as an upload op.

>>> x = cuasync.asarray(cupy.arange(4))         # DLPack, zero-copy
>>> cuasync.asarray(x) is x
True
>>> y = await cuasync.asarray([[1.0, 2.0]], dtype=cuasync.float16)   # an upload
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast, overload

import numpy as np

if TYPE_CHECKING:
    from numpy.typing import ArrayLike
    from typing_extensions import Buffer

from .._core.device import Device, Stream
from .._dtypes import DTypeLike, as_dtype
from .._ops.tensorop import TensorOp
from .._tensor import Tensor
from .._transfers.copies import from_host
from ..errors import ArgumentError
from .cai import SupportsCudaArrayInterface, from_cuda_array_interface
from .dlpack import SupportsDLPack, from_dlpack

__all__ = ["asarray"]


_T_co = TypeVar("_T_co", covariant=True)


class NestedSequence(Protocol[_T_co]):
    """A sequence of ``_T_co`` or of such sequences (lists of lists of floats): the
    array API standard's ``NestedSequence``."""

    def __getitem__(self, key: int, /) -> _T_co | NestedSequence[_T_co]: ...
    def __len__(self, /) -> int: ...


#: A Python scalar ``asarray`` uploads.
Scalar = bool | int | float | complex
#: Host data ``asarray`` uploads: what the array API's ``asarray`` takes besides arrays.
HostData = np.ndarray | np.generic | Scalar | NestedSequence[Scalar]
#: A device array ``asarray`` adopts, zero-copy.
DeviceArray = Tensor | SupportsDLPack | SupportsCudaArrayInterface

# (str and bytes are sequences too: from_host refuses their dtypes, saying so)
_HOST = (np.ndarray, np.generic, int, float, complex, Sequence)


# (a numpy array has __dlpack__ too: it is uploaded, the first overload, as at run time)
@overload
def asarray(  # type: ignore[overload-overlap]
    obj: np.ndarray | np.generic | Scalar | Buffer,
    /,
    dtype: DTypeLike = None,
    *,
    device: int | Device | None = None,
    stream: Stream | None = None,
    copy: bool | None = None,
) -> TensorOp: ...
# (a Tensor or a DLPack producer indexes like a nested sequence: adopted, as at run time)
@overload
def asarray(  # type: ignore[overload-overlap]
    obj: DeviceArray,
    /,
    dtype: None = None,
    *,
    device: int | Device | None = None,
    stream: Stream | None = None,
    copy: bool | None = None,
) -> Tensor: ...
@overload
def asarray(
    obj: DeviceArray,
    /,
    dtype: str | np.dtype[Any] | type[Any],
    *,
    device: int | Device | None = None,
    stream: Stream | None = None,
    copy: bool | None = None,
) -> TensorOp: ...
@overload
def asarray(
    obj: NestedSequence[Scalar],
    /,
    dtype: DTypeLike = None,
    *,
    device: int | Device | None = None,
    stream: Stream | None = None,
    copy: bool | None = None,
) -> TensorOp: ...
def asarray(
    obj: HostData | Buffer | DeviceArray,
    /,
    dtype: DTypeLike = None,
    *,
    device: int | Device | None = None,
    stream: Stream | None = None,
    copy: bool | None = None,
) -> Tensor | TensorOp:
    """``obj`` as a :class:`Tensor`, zero-copy: a cuasync tensor (returned as is), a
    DLPack producer, or an object with ``__cuda_array_interface__``; with ``dtype``, an
    op converting it (a new tensor, as :func:`cuasync.astype` makes; ``copy=False``
    refuses a conversion). Host data (a numpy array or scalar, nested sequences such as
    lists and tuples, a Python scalar, an object with the buffer protocol) is uploaded:
    an op, as :func:`cuasync.from_host` (``dtype`` None: the data's, a Python float's
    the default float dtype, a buffer's format's; ``copy=False`` is refused, an upload
    is a copy).

    The producer's pending work is ordered before every cuasync op that uses the
    result (``stream``: the cuasync stream that waits for it, by default a private one
    of the memory's device), and the producer object stays alive as long as the memory
    is in use. ``copy=True`` is passed to a DLPack producer, which makes the copy;
    cuasync itself never copies here (copy a tensor with ``await t.dup()``).

    >>> x = cuasync.asarray(torch.ones(3, device="cuda"))
    >>> await x.to_host()
    array([1., 1., 1.], dtype=float32)
    >>> h = await cuasync.asarray(x, dtype="float16")          # converted: a new tensor
    >>> m = await cuasync.asarray([[True, False]])              # uploaded: bool, 1 x 2
    """
    if isinstance(obj, _HOST):
        return _upload(obj, dtype, device, copy)
    adopted = _adopt(cast(DeviceArray, obj), device, stream, None if dtype is not None else copy)
    if adopted is None:  # not a device array: host memory by the buffer protocol, or refused
        return _upload(_buffer(obj), dtype, device, copy)
    if dtype is None:
        return adopted
    target = as_dtype(dtype)
    if copy is False and target != adopted.dtype:
        raise ArgumentError(
            f"asarray: copy=False, but x is {adopted.dtype} and dtype={target} needs a "
            "conversion, which is a new tensor; pass copy=None"
        )
    return adopted.astype(target)


def _upload(
    obj: HostData, dtype: DTypeLike, device: int | Device | None, copy: bool | None
) -> TensorOp:
    if copy is False:
        raise ArgumentError(
            f"asarray: copy=False, but {type(obj).__name__} is host data, which only a copy "
            "brings to the device; pass copy=None (or await cuasync.from_host(x))"
        )
    if dtype is not None:
        return from_host(np.asarray(obj, dtype=as_dtype(dtype)), device=device)
    return from_host(cast("ArrayLike", obj), device=device)


def _buffer(obj: object) -> np.ndarray:
    """The memory of an object speaking the buffer protocol (the standard's
    ``SupportsBufferProtocol``), as numpy reads it: the dtype of its format."""
    try:
        view = memoryview(cast("Buffer", obj))
    except TypeError:
        raise ArgumentError(
            f"{type(obj).__name__} is neither host data (a number, a sequence, an object with "
            "the buffer protocol) nor a device array (it has neither __dlpack__ nor "
            "__cuda_array_interface__)"
        ) from None
    return np.asarray(view)


def _adopt(
    obj: DeviceArray, device: int | Device | None, stream: Stream | None, copy: bool | None
) -> Tensor | None:
    """``obj`` adopted zero-copy, or None if it is no device array."""
    if isinstance(obj, Tensor) or hasattr(obj, "__dlpack__"):
        return from_dlpack(cast(SupportsDLPack, obj), device=device, stream=stream, copy=copy)
    if hasattr(obj, "__cuda_array_interface__"):
        if copy:
            raise ArgumentError(
                "copy=True: the CUDA Array Interface has no copy request; adopt the memory "
                "and copy it: `await cuasync.asarray(x).dup()`"
            )
        return from_cuda_array_interface(obj, device=device, stream=stream)
    return None
