"""Copies between pageable host memory (numpy arrays) and the device, by route.

``from_host`` and ``download_into`` move numpy data through pinned staging memory by one
of two routes, picked per size (:func:`upload_route`, :func:`download_route`):

* **single**: one pooled pinned block; the calling thread memcpys the array into it
  before the DMA (upload), or out of it after the DMA (download). Below
  :data:`UPLOAD_CHUNKED_MIN` / :data:`DOWNLOAD_CHUNKED_MIN` this was faster on the H200
  than handing chunks to several threads.
* **chunked**: the data is split into chunks (:func:`chunk_bytes`), each with a pooled
  pinned block, acquired up front. Upload: the calling thread (the event loop) only
  enqueues, per chunk, a wait on a host word (``stream_wait_value32`` on a word claimed
  from the completion slab, ``Hub.claim_word``) and the chunk's DMA; the copy threads
  (:mod:`._copy_threads`) memcpy each chunk into its block, then write its word
  (``Hub.release_word``), so the DMAs start chunk by chunk while the memcpys run on
  several threads. Download (blocking; :mod:`._readback`): each chunk's DMA is followed
  by a device write of its word; the caller watches the words and hands each landed
  chunk to the copy threads.

Upload rules the chunked route keeps: a failing memcpy still writes its word (else the
stream would wait forever) and fails the op with the error (the context's error box);
nothing on a copy thread calls the driver or drops the last reference to what the op
uses (the context retains the array and the blocks until the op completes); a submission
that fails part-way writes every word it claimed.

Not used: the driver's own copy from pageable memory (``cuMemcpyHtoDAsync`` with the
array's address). The CUDA driver API's "API synchronization behavior" page says that
for transfers between device memory and pageable host memory an ``Async`` copy "might
be synchronous with respect to host", and that where pageable memory must first be
staged the driver "may synchronize with the stream". On the event loop that could block
the loop until every earlier command of the stream has run, including commands held by
a host-written wait (a :func:`cuasync.testing.gate`, another chunked upload, a foreign
library's work) that this very thread may have to release: a deadlock. Nor does the page
promise that the array has been read when the call returns where no staging is needed
(devices that access pageable memory directly). ``python -m cuasync.bench transfers``
measures that route beside these two.

>>> upload(ctx, tensor.ptr, np.ones(1 << 22, np.float32))   # in an op's enqueue
>>> with forced_route("single"): ...                         # benchmarks and tests
"""

from __future__ import annotations

import threading
import traceback
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np

from .._backends import get_backend
from .._core.completion import get_hub
from .._core.context import ExecutionContext
from .._core.device import Device
from .._native import PROCESS
from . import copy_threads as _copy_threads
from .staging import PinnedBlock, staging_pool

__all__ = [
    "CHUNK_MAX",
    "CHUNK_MIN",
    "DOWNLOAD_CHUNKED_MIN",
    "MAX_CHUNKS",
    "UPLOAD_CHUNKED_MIN",
    "chunk_bytes",
    "download_route",
    "forced_route",
    "upload",
    "upload_chunked",
    "upload_route",
    "upload_single",
]

KiB, MiB = 1 << 10, 1 << 20
#: ``from_host`` copies from this many bytes up go the chunked route. Measured on the H200
#: (``python -m cuasync.bench transfers``, 2026-12-01): below 16 MiB one thread's copy
#: was faster (1 MiB: 4.7 against 2.2 GB/s; 4 MiB: 7.0 against 3.0) and held the loop
#: about as long; at 16 MiB they matched (9.6, 10.0 GB/s) and chunks held the loop half
#: as long (0.7 against 1.6 ms); from 64 MiB chunks ran 3-4 times faster.
UPLOAD_CHUNKED_MIN = 16 * MiB
#: ``download_into`` copies from this many bytes up go the chunked route (the same
#: crossover: 16 MiB 8.1 single, 10.9 chunked GB/s; 4 MiB 7.2 single, 3.9 chunked).
DOWNLOAD_CHUNKED_MIN = 16 * MiB
#: Chunk sizes (powers of two): at least two chunks per copy thread, within these bounds.
CHUNK_MIN = 256 * KiB
CHUNK_MAX = 8 * MiB
#: At most this many chunks per copy (larger chunks beyond 1 GiB): each chunk is two
#: commands, and the driver blocks the enqueuing thread once about a thousand wait
#: behind a closed stream wait (docs/completion.md).
MAX_CHUNKS = 128

#: The memcpy of one chunk (a module attribute, so tests can make it fail or wait).
_memcpy = np.copyto
_memops: dict[int, bool] = {}
#: Guards the per-chunk state of the uploads in flight (a few list items each).
_lock = threading.Lock()


@contextmanager
def forced_route(route: str | None) -> Iterator[None]:
    """Use ``route`` ("single" or "chunked") whatever the size, inside the block
    (benchmarks and tests); "chunked" still needs copy threads and stream memory ops."""
    if route not in (None, "single", "chunked"):
        raise ValueError(f"route must be 'single', 'chunked' or None, got {route!r}")
    # (PROCESS.forced_route: the native small upload reads it too, and declines then)
    before, PROCESS.forced_route = PROCESS.forced_route, route
    try:
        yield
    finally:
        PROCESS.forced_route = before


def _chunkable(device: Device) -> bool:
    """Whether the chunked route can run on ``device``: copy threads, host-word waits."""
    if _copy_threads.pool_size() <= 0:
        return False
    ordinal = device.ordinal
    ok = _memops.get(ordinal)
    if ok is None:
        ok = _memops[ordinal] = get_backend().supports_stream_memops(ordinal)
    return ok


def upload_route(nbytes: int, device: Device) -> str:
    """The route of an upload of ``nbytes`` from pageable memory: "single" or "chunked".

    >>> upload_route(4096, cuasync.Device(0))
    'single'
    """
    want = PROCESS.forced_route or ("chunked" if nbytes >= UPLOAD_CHUNKED_MIN else "single")
    return "chunked" if want == "chunked" and nbytes and _chunkable(device) else "single"


def download_route(nbytes: int, device: Device) -> str:
    """The route of a download of ``nbytes`` into pageable memory: "single" or "chunked".

    >>> download_route(64 << 20, cuasync.Device(0))
    'chunked'
    """
    want = PROCESS.forced_route or ("chunked" if nbytes >= DOWNLOAD_CHUNKED_MIN else "single")
    return "chunked" if want == "chunked" and nbytes and _chunkable(device) else "single"


def chunk_bytes(nbytes: int) -> int:
    """The chunk size for a copy of ``nbytes``: a power of two giving each copy thread
    two chunks or more, from :data:`CHUNK_MIN` to :data:`CHUNK_MAX`, and larger where
    that would make more than :data:`MAX_CHUNKS` chunks.

    >>> chunk_bytes(64 << 20) >> 20     # MiB, with 8 copy threads
    4
    """
    threads = max(1, _copy_threads.pool_size())
    target = max(2, -(-nbytes // (2 * threads)))
    chunk = min(max(1 << (target - 1).bit_length(), CHUNK_MIN), CHUNK_MAX)
    while -(-nbytes // chunk) > MAX_CHUNKS:
        chunk *= 2
    return chunk


def _split(array: np.ndarray, chunk: int) -> tuple[np.ndarray, list[tuple[int, int]], int]:
    """``array`` as something sliceable on its first axis, the ``[start, stop)`` of each
    chunk on that axis, and the bytes per unit of it.

    A C-contiguous array is split as flat bytes; any other along its first axis (after
    dropping leading axes of length 1), whole rows per chunk.
    """
    if array.flags.c_contiguous:
        flat = array.reshape(-1).view(np.uint8)
        n = flat.shape[0]
        return flat, [(a, min(a + chunk, n)) for a in range(0, n, chunk)], 1
    while array.ndim > 1 and array.shape[0] == 1:
        array = array[0]
    rows = array.shape[0]
    row_bytes = array.nbytes // rows
    per = max(1, chunk // row_bytes)
    return array, [(a, min(a + per, rows)) for a in range(0, rows, per)], row_bytes


# -- upload ------------------------------------------------------------------------------
def upload(ctx: ExecutionContext, dst: int, source: np.ndarray) -> None:
    """Enqueue on ``ctx``'s stream a copy of ``source`` (any layout) into the contiguous
    device memory at ``dst``, by the route its size picks."""
    nbytes = source.nbytes
    if (nbytes < UPLOAD_CHUNKED_MIN and PROCESS.forced_route is None) or (  # the common case first
        ctx.capturing or upload_route(nbytes, ctx.device) == "single"
    ):
        if nbytes:
            upload_single(ctx, dst, source)
    else:
        upload_chunked(ctx, dst, source)


def upload_single(ctx: ExecutionContext, dst: int, source: np.ndarray) -> None:
    """The single route: memcpy into one pooled block on this thread, then the DMA."""
    nbytes = source.nbytes
    block = staging_pool().acquire(nbytes)
    ctx.retain(block)
    staged = block.scratch(nbytes).view(source.dtype)
    _memcpy(staged if source.ndim == 1 else staged.reshape(source.shape), source)
    get_backend().memcpy_htod_async(dst, block.address, nbytes, ctx.handle)


def upload_chunked(ctx: ExecutionContext, dst: int, source: np.ndarray) -> None:
    """The chunked route: waits and DMAs enqueued here, memcpys on the copy threads."""
    src, bounds, unit = _split(source, chunk_bytes(source.nbytes))
    sizes = [(b - a) * unit for a, b in bounds]
    pool = staging_pool()
    blocks = [pool.acquire(n) for n in sizes]  # before any wait is enqueued (module docs)
    ctx.retain(blocks)
    ctx.retain(source)  # the last reference is never a copy thread's
    words = get_hub().claim_words(len(blocks))
    job = _Upload(src, bounds, blocks, sizes, words, ctx.error_box())
    backend, handle = get_backend(), ctx.handle
    offset = 0
    tasks: list[_copy_threads.Task] = [(job.copy, i) for i in range(len(blocks))]
    try:
        for (_, address, value), block, n in zip(words, blocks, sizes, strict=True):
            backend.stream_wait_value32(handle, address, value)
            backend.memcpy_htod_async(dst + offset, block.address, n, handle)
            offset += n
        queued = _copy_threads.submit(tasks)
    except BaseException:
        job.abort()  # the waits enqueued so far must not hold the stream forever
        raise
    if not queued:
        for fn, i in tasks:  # no copy threads (interpreter exit): here, now
            fn(i)


class _Upload:
    """One chunked upload, as the copy threads see it: chunk ``i`` is copied from
    ``src[bounds[i]]`` into ``dst[i]`` (a view of its pinned block), then its word is
    written. Before the last word is written the job drops the array, so a copy thread
    never holds the last reference to it (the op's context does, until it completes)."""

    __slots__ = ("bounds", "dst", "errors", "failed", "left", "src", "words")

    def __init__(
        self,
        src: np.ndarray,
        bounds: list[tuple[int, int]],
        blocks: list[PinnedBlock],
        sizes: list[int],
        words: list[tuple[int, int, int]],
        errors: list[BaseException],
    ) -> None:
        self.src: np.ndarray | None = src
        self.bounds = bounds
        # Views that do not keep the blocks alive: the op's context does, until every
        # word is written and the DMAs ran.
        self.dst: list[np.ndarray] | None = [
            b.scratch(n) for b, n in zip(blocks, sizes, strict=True)
        ]
        self.words: list[tuple[int, int] | None] = [(slot, value) for slot, _, value in words]
        self.left = len(words)
        self.errors = errors
        self.failed = False

    def copy(self, i: int) -> None:
        """On a copy thread: chunk ``i``'s memcpy, then its word, whatever happens."""
        try:
            if not self.failed:
                self._copy(i)
        except BaseException as exc:
            traceback.clear_frames(exc.__traceback__)  # its frames must not hold the array
            self.fail(exc)
        finally:
            self.open(i)

    def _copy(self, i: int) -> None:
        src, dst = self.src, self.dst
        if src is None or dst is None:
            return
        a, b = self.bounds[i]
        part = src[a:b]
        out = dst[i]
        if part.ndim != 1 or part.dtype != out.dtype:  # rows of a non-contiguous array
            out = out.view(part.dtype).reshape(part.shape)
        _memcpy(out, part)

    def fail(self, exc: BaseException) -> None:
        """The op fails with ``exc`` (its first error); the other chunks skip their copy."""
        if not self.failed:
            self.failed = True
            exc.add_note("(raised by a cuasync copy thread staging the array of from_host)")
            self.errors.append(exc)

    def open(self, i: int) -> None:
        """Write chunk ``i``'s word, once; the last one drops the array first."""
        with _lock:
            word, self.words[i] = self.words[i], None
            if word is None:
                return
            self.left -= 1
            if not self.left:
                self.src = self.dst = None
        get_hub().release_word(*word)

    def abort(self) -> None:
        """The submission failed part-way: write every word now (no copy)."""
        self.failed = True
        for i in range(len(self.words)):
            self.open(i)
