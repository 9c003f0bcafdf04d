"""``download_into``: blocking readback into a numpy array the caller reuses.

The copy goes device → pooled pinned blocks → ``out``, so a loop that reads the same
size back each step allocates and page-faults nothing. With ``resize=True`` an array of
another size is resized in place first (:meth:`numpy.ndarray.resize` and its reference
check).

Routes (:mod:`._pageable` picks by size): below ``DOWNLOAD_CHUNKED_MIN``, or for a
strided tensor or ``out``, one block, copied out by the caller after the DMA. Above it,
chunks: after each chunk's DMA the stream writes a word of the completion slab
(``Hub.claim_word``; the device writes it, so it is freed only once it landed); the
caller watches the words in order (spin, then short sleeps, checking for a fault) and
hands each landed chunk to the copy threads, which copy it out while later chunks are
still on the way. Nothing on a copy thread calls the driver: a word written by the
device, not an event queried from a worker, tells that a chunk landed.

>>> out = np.empty(0, np.float32)
>>> for step in range(n):
...     cuasync.download_into(result, out, resize=True)   # grows once, then reuses
"""

from __future__ import annotations

import ctypes
import sys
import threading
import time
import traceback

import numpy as np

from .._backends import get_backend
from .._core.completion import get_hub, raise_if_faulted
from .._core.context import ExecutionContext
from .._core.device import Device
from .._core.loops import check_blocking_allowed
from .._core.op import device_op
from .._core.output import Output
from .._dtypes import dtype_name
from .._tensor import Tensor, contiguous_strides
from ..errors import ArgumentError, DTypeError, ShapeError
from . import copy_threads as _copy_threads
from . import pageable as _pageable
from .device_copy import copy_strided
from .pageable import download_route
from .pinned import PinnedPool
from .staging import PinnedBlock, staging_pool

__all__ = ["download_into"]


def _refs(out: object) -> int:
    return sys.getrefcount(out)


def _calibrate() -> int:
    probe = np.empty(1)
    return _refs(probe)


#: What ``sys.getrefcount(out)`` says inside a function's frame when the caller holds
#: ``out`` in one variable: more means a view, another name or a container holds it too.
_ONE_HOLDER = _calibrate()


def download_into(
    tensor: Tensor,
    out: np.ndarray,
    *,
    resize: bool = False,
    refcheck: bool = True,
    allow_in_loop: bool = False,
) -> np.ndarray:
    """Copy ``tensor`` into the existing numpy array ``out`` and return ``out``; blocking.

    For repeated readback of same-size results: ``out`` is reused, so the loop allocates
    and page-faults nothing; the copy goes through a pooled pinned buffer. ``out`` must be
    writable with the tensor's dtype and element count (its shape may differ); the tensor
    may be a strided view. Raises :class:`~cuasync.errors.SyncInEventLoopError` inside a
    running event loop (``await tensor.to_host()`` there) unless ``allow_in_loop=True``.

    ``resize=True`` accepts an ``out`` of another element count and resizes it in place
    to the tensor's shape first, as ``out.resize(tensor.shape)`` would: only an array that
    owns its memory and is C-contiguous, and (``refcheck``, numpy's rule) is referenced
    from one place only, where you pass it from: a view of it or a second name makes the
    resize refused. numpy's own check cannot tell that from inside a call, so cuasync
    counts for it. ``refcheck=False`` skips it; you then vouch that no view of ``out``
    exists, since resizing may move its memory. Otherwise
    :class:`~cuasync.errors.ShapeError` says why.

    A ``bool`` tensor is allowed: cuasync's bool tensors hold 0/1 bytes by construction
    (see the Transfers guide).

    >>> out = np.empty((1024,), np.float32)
    >>> for step in range(n): cuasync.download_into(result, out)
    >>> cuasync.download_into(bigger, out, resize=True).shape   # resized in place
    (4096,)
    """
    held = sys.getrefcount(out)  # first, before this frame makes any other reference
    check_blocking_allowed("cuasync.download_into()", allow_in_loop)
    if not isinstance(tensor, Tensor):
        raise ArgumentError(f"tensor must be a cuasync.Tensor, got {type(tensor).__name__}")
    if not isinstance(out, np.ndarray):
        raise ArgumentError(
            f"out must be a numpy.ndarray to copy into, got {type(out).__name__}; "
            "use tensor.to_host() for a new array"
        )
    if out.dtype != tensor.dtype:
        raise DTypeError(
            f"out is {out.dtype} but the tensor is {dtype_name(tensor.dtype)}; pass an array "
            f"of dtype {dtype_name(tensor.dtype)}"
        )
    if not out.flags.writeable:
        raise ArgumentError("out is read-only; pass a writable array")
    if out.size != tensor.size:
        if not resize:
            raise ShapeError(
                f"out has {out.size} elements {out.shape} but the tensor has {tensor.size} "
                f"{tensor.shape}; pass an array with the same number of elements, or "
                "resize=True to resize out in place"
            )
        _resize(out, tensor, held > _ONE_HOLDER if refcheck else False)
    _copy(tensor, out)
    return out


def _resize(out: np.ndarray, tensor: Tensor, referenced: bool) -> None:
    """``out.resize(tensor.shape)`` in place, or a ShapeError saying why it cannot be."""
    why = ""
    if not out.flags.owndata:
        why = (
            "it does not own its memory (it is a view, or memory another object manages, "
            "such as a to_host() result)"
        )
    elif not out.flags.c_contiguous:
        why = "it is not C-contiguous"
    elif referenced:
        why = (
            "it is referenced from more than the one place you pass it from (a view of it, "
            "or a second name): resizing may move its memory under them; drop those "
            "references, or pass refcheck=False if no view of it exists"
        )
    if why:
        raise ShapeError(
            f"out has {out.size} elements {out.shape}, the tensor {tensor.size} "
            f"{tensor.shape}, and out cannot be resized in place: {why}; otherwise pass "
            "an array with the tensor's element count"
        )
    out.resize(tensor.shape, refcheck=False)  # realloc: in place when the allocator can


def _copy(t: Tensor, out: np.ndarray) -> None:
    if (
        t.is_contiguous
        and out.flags.c_contiguous
        and download_route(t.nbytes, t.device) == "chunked"
    ):
        download_chunked(t, out)
        return
    itemsize = t.itemsize
    block = PinnedPool.default()._blocks.acquire(t.nbytes)
    address = block.address

    def enqueue(ctx: ExecutionContext) -> Output[None]:
        src = ctx.read(t.allocation, "tensor") + t.offset * itemsize
        copy_strided(
            ctx,
            "dtoh",
            address,
            tuple(s * itemsize for s in contiguous_strides(t.shape)),
            src,
            tuple(s * itemsize for s in t.strides),
            t.shape,
            itemsize,
        )
        ctx.retain(block)
        return Output.ready(None)

    device_op(enqueue, t.device, "download_into").sync(allow_in_loop=True)
    staged = block.array(t.dtype, t.shape)
    if staged.shape != out.shape:
        staged = staged.reshape(out.shape)
    np.copyto(out, staged)


# -- the chunked route -----------------------------------------------------------------------
def download_chunked(t: Tensor, out: np.ndarray) -> None:
    """Copy the contiguous tensor ``t`` into the C-contiguous array ``out`` (same byte
    count), blocking: per chunk a DMA into a pooled block and a device write of a word;
    each landed chunk is copied out on the copy threads (the last one here)."""
    _reap()
    nbytes = t.nbytes
    chunk = _pageable.chunk_bytes(nbytes)
    bounds = [(a, min(a + chunk, nbytes)) for a in range(0, nbytes, chunk)]
    pool = staging_pool()
    blocks = [pool.acquire(b - a) for a, b in bounds]
    hub = get_hub()
    words = hub.claim_words(len(blocks))
    written = 0  # words whose device write is enqueued: freed only once they land

    def enqueue(ctx: ExecutionContext) -> Output[None]:
        nonlocal written
        src = ctx.read(t.allocation, "tensor") + t.offset * t.itemsize
        ctx.retain(blocks)
        backend, handle = get_backend(), ctx.handle
        for (a, b), block, (_, address, value) in zip(bounds, blocks, words, strict=True):
            backend.memcpy_dtoh_async(block.address, src + a, b - a, handle)
            backend.write_value32(handle, address, value)
            written += 1
        return Output.ready(None)

    op = device_op(enqueue, t.device, "download_into")
    op._take()
    try:
        comp = op._start(op._pick_stream(), True)
    except BaseException:
        _orphan(words[:written])
        for slot, _, value in words[written:]:
            hub.release_word(slot, value)
        raise
    job = _Download(out.reshape(-1).view(np.uint8), bounds, blocks)
    landed = 0
    try:
        for i, (slot, address, value) in enumerate(words):
            wait_landed(address, value, t.device)
            hub.release_word(slot, value)  # the device wrote it: no later write can come
            landed += 1
            if i == len(words) - 1 or not _copy_threads.submit([(job.copy, i)]):
                job.copy(i)
        job.done.wait()  # host memcpys: bounded
    except BaseException:
        _orphan(words[landed:])
        hub.watch_in_background(comp)
        raise
    hub.block(comp)
    comp.result()
    if job.errors:
        raise job.errors[0]


class _Download:
    """One chunked download's copy-outs: chunk ``i`` goes from ``blocks[i]`` into
    ``out[bounds[i]]`` (``out`` as flat bytes); ``done`` is set after the last."""

    __slots__ = ("blocks", "bounds", "done", "errors", "left", "out")

    def __init__(
        self, out: np.ndarray, bounds: list[tuple[int, int]], blocks: list[PinnedBlock]
    ) -> None:
        self.out = out
        self.bounds = bounds
        self.blocks: list[PinnedBlock | None] = list(blocks)  # each held until copied out
        self.left = len(blocks)
        self.errors: list[BaseException] = []
        self.done = threading.Event()

    def copy(self, i: int) -> None:
        try:
            block = self.blocks[i]
            if block is not None and not self.errors:
                a, b = self.bounds[i]
                _pageable._memcpy(self.out[a:b], block.scratch(b - a))
        except BaseException as exc:
            traceback.clear_frames(exc.__traceback__)
            self.errors.append(exc)
        finally:
            block = self.blocks[i] = None  # back to its pool: no driver call
            with _lock:
                self.left -= 1
                last = not self.left
            if last:
                self.done.set()


#: Guards the copy-out counts of the downloads in flight.
_lock = threading.Lock()
#: Spin on a chunk's word this long (GIL released) before sleeping between looks.
_SPIN_NS = 50_000
_PAUSE_MAX_S = 200e-6
#: Words whose device write may still come (a download interrupted while waiting):
#: freed once they land, never before (a late write would set a reused slot back).
_orphans: list[tuple[int, int, int]] = []


def wait_landed(address: int, value: int, device: Device) -> None:
    """Block until the device wrote ``value`` into the slab word at ``address``: spin,
    then sleep between looks (up to 200 us), raising the device's fault if it has one."""
    native = get_hub().native
    pause = 20e-6
    while True:
        if native is not None:
            if native.spin_wait(address, value, _SPIN_NS):
                return
        elif _landed(address, value):
            return
        raise_if_faulted(device)
        time.sleep(pause)  # a device write comes without notice: look again
        pause = min(pause * 2, _PAUSE_MAX_S)


def _landed(address: int, value: int) -> bool:
    word = ctypes.c_uint32.from_address(address).value
    return ((word - value) & 0xFFFFFFFF) < 0x80000000


def _orphan(words: list[tuple[int, int, int]]) -> None:
    with _lock:
        _orphans.extend(words)


def _reap() -> None:
    """Free the orphaned words that have landed since."""
    if not _orphans:
        return
    with _lock:
        landed = [w for w in _orphans if _landed(w[1], w[2])]
        for w in landed:
            _orphans.remove(w)
    hub = get_hub()
    for slot, _, value in landed:
        hub.release_word(slot, value)
