"""Types of the native module (``reactor/python/`` over ``reactor/core/``): reactor/README.md."""

import sys
from collections.abc import Callable, Generator, Iterator, Sequence
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Final, Self, SupportsIndex, final

from typing_extensions import disjoint_base

if TYPE_CHECKING:
    import threading

    import numpy as np

    from cuasync._core.device import Device, SchedulingPolicy, Stream
    from cuasync._core.memory import Allocation
    from cuasync._core.pools import MemoryPool

SOURCE_HASH: Final[str]
"""The hash of the sources it was built from (``setup.py``; ``cuasync._native`` compares it
with the checkout's, where the sources are present)."""

HAVE_EVENTFD: Final[int]
#: cuasync's execution lock (``context.LOCK``), which native code takes too.
EXEC_LOCK: Final[ExecLock]
"""1 where ``LoopQueue.fileno()`` is an eventfd (Linux), 0 where it is a pipe's read end."""

#: The process's state an await reads (``completion``'s hub, ``loops``' last loop).
PROCESS: Final[ProcessCore]

HOST_SIGNAL_FN: Final[int]
"""Address of a C host function (``void fn(void *data)``, for ``cuLaunchHostFunc``) that
pushes ``data`` (a 32-bit id) onto the host-signal queue: no GIL, no CUDA call."""

DLPACK_CAPSULE_DESTRUCTOR: Final[int]
"""Address of the C destructor of cuasync's DLPack capsules (``void fn(PyObject *)``): it
calls the managed tensor's deleter unless the capsule was consumed, keeping an exception
that is already set (a consumer that refuses a capsule drops it while raising)."""

@final
class LoopQueue:
    """Per-event-loop completion queue; its fd becomes readable when entries arrive."""

    def __new__(cls) -> LoopQueue: ...
    def fileno(self) -> int:
        """The fd to watch for readability. ValueError once closed."""

    def drain(self) -> tuple[list[int], list[int]]:
        """Clear the fd, then pop ``(completed, stale)`` slot ids. ValueError once closed."""

    def close(self) -> tuple[list[int], list[int]]:
        """Close the fd and pop the entries still pending, atomically; idempotent."""

    @property
    def pending(self) -> int:
        """Entries waiting to be drained (lock-free)."""

@final
class Reactor:
    """Watches armed uint32 flag words of a host slab on one native thread."""

    def __new__(
        cls,
        address: SupportsIndex,
        nslots: SupportsIndex,
        *,
        stale_ns: int = 2_000_000,
        stale_max_ns: int = 50_000_000,
        spin_ns: int = 50_000,
        backoff_max_ns: int = 200_000,
        long_ns: int = 10_000_000,
        long_backoff_max_ns: int = 2_000_000,
    ) -> Reactor: ...
    def arm(
        self,
        slot: SupportsIndex,
        expected: SupportsIndex,
        queue: LoopQueue,
        quiet_until: int = 0,
        watched: bool = False,
        /,
    ) -> None:
        """Push ``slot`` onto ``queue`` once its word reaches ``expected``; not scanned
        for before ``quiet_until`` (``time.monotonic_ns()``), while an early wake watches it;
        ``watched``: that wake looks at it before then (and arms it again if it has not
        landed), so a parked or napping thread is not woken for it."""

    def disarm(self, slot: SupportsIndex, /) -> bool:
        """Stop watching ``slot`` without notifying; True if it was armed."""

    def set_orphan_queue(self, queue: LoopQueue | None, /) -> None:
        """Where reports of slots armed to a closed queue go (None: dropped, counted)."""

    def set_stale_queue(self, queue: LoopQueue | None, /) -> None:
        """Where every stale report goes while ``queue`` is open (None: each slot's own)."""

    def close(self) -> None:
        """Join the thread, drop every armed slot, unregister the slab; idempotent."""

    @property
    def armed(self) -> int: ...
    @property
    def parked(self) -> bool: ...
    @property
    def wakeups(self) -> int: ...
    @property
    def completed(self) -> int: ...
    @property
    def stale_reports(self) -> int: ...
    @property
    def dropped(self) -> int: ...
    @property
    def scans(self) -> int: ...
    @property
    def backoff_ns(self) -> int: ...

@final
class Submitter:
    """Makes queued kernel launches and their flag writes on a native thread, in push
    order; the flags are words of ``reactor``'s slab."""

    def __new__(
        cls, reactor: Reactor, *, capacity: int = 16384, spin_ns: int = 50_000
    ) -> Submitter: ...
    def push(
        self,
        function: SupportsIndex,
        gx: SupportsIndex,
        gy: SupportsIndex,
        gz: SupportsIndex,
        bx: SupportsIndex,
        by: SupportsIndex,
        bz: SupportsIndex,
        shared_mem: SupportsIndex,
        stream: SupportsIndex,
        context: SupportsIndex,
        layout: bytes,
        args: list[Any] | tuple[Any, ...],
        slot: SupportsIndex,
        value: SupportsIndex,
        /,
    ) -> int:
        """Queue a launch (packed as :func:`launch_packed` packs) and the slot's flag; its
        ticket (launched once :attr:`done` is past it), or -1 when the queue is full or the
        parameters too large (the caller launches)."""
    def status(self, slot: SupportsIndex, /) -> int:
        """The result of the slot's last queued launch once its flag landed: 0, the
        CUresult of the launch (or of making the context current), or minus the write's."""
    def fence(self) -> None:
        """Return once every launch queued before the call was made (GIL released)."""
    def close(self, timeout: float = 1.0, /) -> bool:
        """Stop the thread after the queue drains; False if it was still in the driver."""
    @property
    def pending(self) -> int: ...
    @property
    def done(self) -> int: ...
    @property
    def launched(self) -> int: ...
    @property
    def failed(self) -> int: ...
    @property
    def wakeups(self) -> int: ...
    @property
    def closed(self) -> bool: ...

def dlpack_pack(
    release: Callable[[Any], object],
    arg: object,
    data: SupportsIndex,
    device_id: SupportsIndex,
    shape: tuple[int, ...],
    strides: tuple[int, ...],
    code: SupportsIndex,
    bits: SupportsIndex,
    flags: SupportsIndex,
    versioned: object,
    /,
) -> Any:
    """A DLPack capsule of CUDA memory at data; release(arg) is called once on release."""

def dlpack_unpack(capsule: object, /) -> tuple[Any, ...] | None:
    """The fields of an unconsumed DLPack capsule (the last: the bytes its layout spans,
    or -1), or None."""

def dlpack_take(capsule: object, versioned: object, /) -> None:
    """Rename the capsule used_dltensor[_versioned]: the consumer owns it now."""

def dlpack_delete(address: SupportsIndex, versioned: object, /) -> None:
    """Call the deleter of the consumed managed tensor at address."""

def set_launch_fence(submitter: Submitter | None, /) -> None:
    """Make the native launches and flag writes wait for ``submitter``'s queue first."""

def set_host_signal_queue(queue: LoopQueue | None, /) -> None:
    """Make ``queue`` the one ``HOST_SIGNAL_FN`` pushes to (None: signals are dropped)."""

if sys.platform == "linux":
    def set_timer(fd: int, deadline_ns: int, /) -> bool:
        """Set the timerfd ``fd`` to expire once at ``deadline_ns`` (``time.monotonic_ns()``;
        0 disarms it); False where the kernel refused (a closed fd)."""

def spin_wait(
    address: SupportsIndex,
    expected: SupportsIndex,
    budget_ns: SupportsIndex,
    hold_ns: SupportsIndex = 0,
    /,
) -> bool:
    """Busy-wait until the slab word reaches ``expected`` or the budget ends, the GIL kept
    for the first ``hold_ns`` of it (only where no Python thread can be what writes the
    word) and released for the rest."""

def load32(address: SupportsIndex, /) -> int:
    """Acquire load of a word of a live Reactor's slab."""

def store32(address: SupportsIndex, value: SupportsIndex, /) -> None:
    """Release store to a word of a live Reactor's slab."""

def set_entry_points(
    *,
    write_value32: SupportsIndex = 0,
    launch_kernel: SupportsIndex = 0,
    ctx_set_current: SupportsIndex = 0,
    stream_synchronize: SupportsIndex = 0,
    memcpy_htod: SupportsIndex = 0,
) -> None:
    """Driver entry points from ``cuGetProcAddress``; 0 clears. All are replaced (a
    :class:`Submitter` takes the ones set when it is made)."""

def write_value32(stream: SupportsIndex, address: SupportsIndex, value: SupportsIndex, /) -> int:
    """``cuStreamWriteValue32(stream, address, value, 0)``; returns the CUresult."""

def copy_and_write(
    dst: SupportsIndex,
    src: SupportsIndex,
    nbytes: SupportsIndex,
    stream: SupportsIndex,
    address: SupportsIndex,
    value: SupportsIndex,
    /,
) -> int:
    """``cuMemcpyHtoDAsync(dst, src, nbytes, stream)``, then (it succeeded) the flag write;
    returns 0, the copy's CUresult (nothing enqueued), or minus the write's."""

def launch_and_write(
    function: SupportsIndex,
    gx: SupportsIndex,
    gy: SupportsIndex,
    gz: SupportsIndex,
    bx: SupportsIndex,
    by: SupportsIndex,
    bz: SupportsIndex,
    shared_mem: SupportsIndex,
    stream: SupportsIndex,
    params: SupportsIndex,
    address: SupportsIndex,
    value: SupportsIndex,
    /,
) -> int:
    """``cuLaunchKernel``, then (launch succeeded, address != 0) ``cuStreamWriteValue32``."""

def launch_packed(
    function: SupportsIndex,
    gx: SupportsIndex,
    gy: SupportsIndex,
    gz: SupportsIndex,
    bx: SupportsIndex,
    by: SupportsIndex,
    bz: SupportsIndex,
    shared_mem: SupportsIndex,
    stream: SupportsIndex,
    layout: bytes,
    args: list[Any] | tuple[Any, ...],
    address: SupportsIndex,
    value: SupportsIndex,
    /,
) -> int:
    """:func:`launch_and_write` with the parameters packed in C from ``args`` by
    ``layout`` (8-byte records: struct code, 3 pad bytes, uint32 offset; ``P``: a pointer,
    an int or an object with ``.ptr``); returns as :func:`launch_and_write` does."""

def stub_entry_points(*, launch_ns: int = 0) -> dict[str, int]:
    """Entry points for ``set_entry_points(**...)`` that reach no driver: the launch
    counts the call (:func:`stub_launches`) and busy-waits ``launch_ns`` (a model of the
    driver's host time), the flag write stores the value at once, the copy counts the
    call (:func:`stub_copies`) and copies nothing; ``ctx_set_current`` and
    ``stream_synchronize`` do nothing (a :class:`Submitter` can be made on them)."""

def stub_launches() -> int:
    """Calls of the stub ``launch_kernel`` so far."""

def stub_copies() -> int:
    """Calls of the stub ``memcpy_htod`` so far."""

# -- the native op core (express.c, launcher.c) -------------------------------------------

@disjoint_base
class StreamCore:
    """The fields of a ``cuasync.Stream`` (its base type), read by the native core."""

    handle: int
    device: Device
    owned: bool
    _capturing: bool
    _submitted: int
    _completed: int
    _alive: list[bool]

@disjoint_base
class AllocationCore:
    """The fields of an ``Allocation`` (its base type), read by the native core."""

    ptr: int
    nbytes: int
    device: Device
    _write: tuple[Stream, int] | None
    _reads: dict[Stream, int]
    _pool: MemoryPool | None
    _class: int
    readonly: bool

@disjoint_base
class TensorCore:
    """The fields of a ``cuasync.Tensor`` (its base type), read by the native core, and
    the DLPack protocol (the common export in C, the rest in ``_interop.dlpack``)."""

    _alloc: Allocation
    shape: tuple[int, ...]
    dtype: np.dtype[Any]
    strides: tuple[int, ...]
    offset: int
    def __dlpack__(
        self,
        *,
        stream: int | None = None,
        max_version: tuple[int, int] | None = None,
        dl_device: tuple[int, int] | None = None,
        copy: bool | None = None,
    ) -> Any: ...
    def __dlpack_device__(self) -> tuple[int, int]: ...

@disjoint_base
class PreparedCore:
    """The fields of a ``PreparedKernel`` (its base type), read by the native core."""

    name: str
    ordinal: int
    handle: int
    fast: Any
    #: a library call made in place of a kernel launch (``call(stream, args, errors,
    #: flag_address, flag_value)``), or None: a kernel
    call: Any
    #: the grid whose awaits park at once, without the inline spin, while four spin
    #: budgets are at most ``parked_ns`` (their work is known to outlast them:
    #: ``cuasync._core.wake``), or None
    parked_grid: Any
    parked_ns: int

@disjoint_base
class KernelCore:
    """The fields of a kernel (its base type: ``Kernel``, a ``Module``'s kernel) that a
    launch reads; ``kernel[grid, block]`` with two ints is a lookup of ``_launcher_cache``
    in C, anything else (and a miss) ``PROCESS.kernel_configure(kernel, config)``."""

    params: Any
    _prepared: dict[int, Any]
    _launcher_cache: dict[Any, Callable[..., Any]] | None
    _plan: tuple[Any, tuple[Any, ...]] | None
    def __getitem__(self, config: Any, /) -> Any: ...

@disjoint_base
class OpCore:
    """The fields of a ``cuasync.DeviceOp`` (its base type), read by the native core."""

    _consumed: bool
    _device: Device | None
    _origin: Any
    _running: Any
    _future: Any
    # asyncio's future protocol (op_future.c; see cuasync._core.op_future)
    @property
    def _asyncio_future_blocking(self) -> bool | None: ...
    @_asyncio_future_blocking.setter
    def _asyncio_future_blocking(self, value: bool) -> None: ...
    @property
    def _cancel_message(self) -> Any: ...
    def get_loop(self) -> Any: ...
    def add_done_callback(self, fn: Callable[[Any], object], /, *, context: Any = None) -> None: ...
    def remove_done_callback(self, fn: Callable[[Any], object], /) -> int: ...
    def done(self) -> bool: ...
    def cancelled(self) -> bool: ...
    def result(self) -> Any: ...
    def exception(self) -> BaseException | None: ...
    def cancel(self, msg: object = None) -> bool: ...
    def _make_cancelled_error(self) -> Any: ...

@disjoint_base
class LaunchCore(OpCore):
    """The fields of a kernel launch op (its base type), read by the native core; ``_plan``
    and ``_cancel_word`` are held for a cached plan and a scope's cancellation word."""

    _kernel: Any
    _prepared: Any
    #: the arguments, and the tensors among them (none: the shared ``()``)
    _args: tuple[Any, ...]
    _tensors: tuple[Any, ...]
    _output: Any
    _grid: tuple[int, int, int]
    _block: tuple[int, int, int]
    _shared_mem: int
    _plan: Any
    _cancel_word: Any
    #: whether it writes each of ``_tensors`` (their parameters are not const)
    _writes: tuple[bool, ...]
    #: the parameter each of ``_tensors`` is passed as
    _params: tuple[Any, ...]
    #: the Stream an await runs it on (a wait's: the stream it waits for), or None: the
    #: policy's next one
    _stream: Any
    def __await__(self) -> Generator[Any, Any, Any]: ...

@disjoint_base
class HubCore:
    """The switches of the completion hub (its base type) that every submission reads."""

    express: Any
    spin_budget_us: int
    backend: Any
    slots: SlotLedger
    stats: Any
    _memops: dict[int, bool]
    _box_type: Callable[[], list[BaseException]]
    _generic: Any
    _await_spin_us: Callable[[Any, Any, Any, int], int | None]
    _core_failed: Callable[..., None]
    _core_abandon: Callable[..., None]
    use_reactor: bool
    step_aside: bool
    def spin_early(self, entry: Pending, /) -> None:
        """A due early wake of ``entry.comp``'s loop: spin until ``entry.until``, finish
        it here where it lands, else arm it again for the reactor."""
    def release(self, comp: Any, path: str, /) -> None:
        """What the finished ``comp`` used, given back: ``path``'s counter, its slot
        taken back from the reactor and returned to the ledger."""
    def arm(
        self, comp: Any, queue: Any, quiet_until: SupportsIndex = 0, watched: bool = False, /
    ) -> None:
        """Hand ``comp``'s slot to the reactor, reported to ``queue`` (under its lock)."""
    def watch(
        self,
        comp: Any,
        adapter: Any,
        waiter: Callable[[Any], object],
        quiet_until: SupportsIndex = 0,
        watched: bool = False,
        /,
    ) -> None:
        """Call ``waiter`` once ``comp`` is finished, its slot armed to the loop of
        ``adapter`` (or moved to the background watcher)."""
    def park(
        self,
        comp: Any,
        adapter: Any,
        waiter: Callable[[Any], object],
        key: Any,
        since: SupportsIndex,
        /,
    ) -> Pending | None:
        """A parked await's set-up: its wake planned, ``waiter`` added and the slot
        armed, the wake set on the loop's timer; its Pending, or None."""
    def suspend(
        self, comp: Any, adapter: Any, since: SupportsIndex = 0, op: Any = None, /
    ) -> Suspension:
        """The parked await of ``comp`` (``yield from`` it): finished where it landed
        since, else parked (``adapter.park()``, :meth:`park`) until it is; returns
        ``comp.result()``. Cancelled or dropped unfinished: ``comp`` to the background
        watcher (a launch ``op``'s output abandoned, its arguments let go)."""

@final
class FutureWaker:
    """The wake-up of a task parked on the loop future ``fut``: called with the finished
    completion from any thread, it resolves ``fut`` at once on the loop's thread (the
    one that made it), else through ``adapter.call_from_thread(resolve_future, fut)``."""

    @property
    def adapter(self) -> Any: ...
    @property
    def fut(self) -> Any: ...
    def __new__(cls, adapter: Any, fut: Any, /) -> FutureWaker: ...
    def __call__(self, comp: Any, /) -> None: ...

def resolve_future(fut: Any, /) -> None:
    """Resolve the loop future ``fut`` with None, unless it is done."""

@final
class Suspension(Generator[Any, Any, Any]):
    """The parked await of a completion (:meth:`HubCore.suspend`'s)."""

    def __next__(self) -> Any: ...
    def send(self, value: Any, /) -> Any: ...
    def throw(self, typ: Any, val: Any = ..., tb: Any = ..., /) -> Any: ...
    def close(self) -> None: ...

@disjoint_base
class BackendCore:
    """What a backend (its base type) tells every submission."""

    fast_launch: Any
    current: Any
    _context_handles: dict[int, int]
    _host_remap: list[tuple[int, int, int]]
    #: the calls the native core makes of a backend: its ``_launch_kernel``,
    #: ``_launch_failed``, ``_context_handle`` and ``_copy_and_write``, bound by
    #: ``Backend.__init__`` (a callable set here instead is the one every path calls)
    launch_kernel: Callable[..., None]
    launch_failed: Callable[..., None]
    context_handle: Callable[[int], int]
    copy_and_write: Callable[[int, int, int, int, int, int], None]
    fault_seen: bool
    _native_copy: bool

@disjoint_base
class ContextCore:
    """The fields of an ``ExecutionContext`` (its base type), set by the native core."""

    stream: Stream
    fuse: Any
    deferred: Any
    device: Device
    retained: list[Any]
    errors: list[BaseException] | None
    checks: list[Callable[[], None]] | None
    capturing: bool
    accesses: list[tuple[Allocation, bool]] | None
    seq: int

@disjoint_base
class OutputCore:
    """The fields of an ``Output`` (its base type), set by the native core."""

    _fn: Callable[[], Any] | None
    _value: Any

@disjoint_base
class FutureCore:
    """The field of a ``DeviceFuture`` (its base type), set by the native core."""

    _comp: Any

@disjoint_base
class CompletionCore:
    """The fields of a ``Completion`` (its base type), set by the native core."""

    ctx: Any
    out: Any
    stream: Stream
    device: Device
    seq: int
    slot: int
    gen: int
    address: int
    armed_at: float
    def add_waiter(self, waiter: Callable[[Any], object], /) -> None:
        """Call ``waiter(self)`` once finished (now, where it is already)."""
    def _wake(self, waiters: Any, /) -> None:
        """Call the waiters taken from ``_waiters`` (one, a list, or None)."""
    def result(self) -> Any:
        """The output of finished work; raises its error (a fresh copy after the first)."""
    def finish(self, path: str, /) -> None:
        """The work completed: realize the output, release what it used, call the
        waiters (nothing where it is no longer pending)."""

@disjoint_base
class TensorOpCore(OpCore):
    """The fields of a ``TensorOp`` (its base type), read by the native core."""

    _node: Any
    _out: Any
    _planned: Any
    _absorbed: Any
    dtype: np.dtype[Any]
    shape: tuple[int, ...]

@disjoint_base
class UploadOpCore(TensorOpCore):
    """The field of a ``from_host`` op (its base type) the native core sets."""

    _output: Any

@disjoint_base
class NodeCore:
    """The fields of an expression ``Node`` (its base type), read by the native core,
    which also constructs it (no Python ``__init__``)."""

    kind: str
    name: str
    shape: tuple[int, ...]
    dtype: Any
    children: tuple[Any, ...]
    ins: Any
    device: Any
    value: Any
    def __new__(
        cls,
        kind: str,
        name: str,
        shape: tuple[int, ...],
        dtype: Any,
        value: Any = None,
        children: tuple[Any, ...] = (),
        ins: Any = (),
        device: Any = None,
    ) -> Self: ...

@final
class Memo:
    """Recent answers of a dict of seen kinds, found by a key compared by identity (exact
    ints by value, exact tuples item by item) without building it; ``len()``: the
    entries kept (``reactor/python/memo.c``)."""

    def __new__(cls) -> Self: ...
    def __len__(self) -> int: ...
    def clear(self) -> None: ...

@final
class OpNodes:
    """The builder of elementwise op nodes (``expr.op_node`` is its ``op_node``): seen
    structures looked up in ``seen``; ``resolve`` on a miss, ``fit`` for a weak int,
    ``device_of`` for a device error (``reactor/python/apply.c``)."""

    def __new__(
        cls,
        node: type[NodeCore],
        seen: dict[Any, Any],
        resolve: Callable[[str, list[Any], tuple[Any, ...]], Any],
        fit: Callable[[Any, Any, str], Any],
        device_of: Callable[[list[Any], str], Any],
    ) -> Self: ...
    @property
    def memo(self) -> Memo: ...
    def op_node(self, op: str, children: Sequence[Any], /) -> Any: ...

@final
class ElementwiseApply:
    """The builder of elementwise ops (``elementwise.APPLY``: the elementwise functions'
    and the operators')."""

    def __new__(
        cls,
        nodes: OpNodes,
        tensor: type[TensorCore],
        op: type[TensorOpCore],
        leaf: Callable[[Any, str], Any],
        check_dtype: Callable[[Any, str], None],
        check_out: Callable[[Any, dict[str, Any], str, Any], None],
    ) -> Self: ...
    def tensor_op(self, node: Any, out: Any, /) -> Any:
        """The TensorOp of ``node`` writing ``out`` (None: a new tensor), as
        ``TensorOp(node, out)`` makes it."""

@final
class Operator:
    """A binary operator of ``Tensor`` and ``TensorOp`` (a method descriptor)."""

    @property
    def name(self) -> str: ...
    @property
    def reflected(self) -> bool: ...
    def __new__(
        cls,
        name: str,
        reflected: bool,
        implementation: Any,
        fallback: Callable[[Any, str, Any, bool], Any],
    ) -> Self: ...
    @property
    def __name__(self) -> str: ...
    @property
    def __qualname__(self) -> str: ...
    def __set_name__(self, owner: type, name: str, /) -> None: ...
    def __call__(self, me: Any, other: Any, /) -> Any: ...
    def __get__(self, obj: Any, owner: Any = None, /) -> Any: ...

@final
class ExpressLaunches:
    """TensorOps as raw launches (``launch_plan.express_launch`` is its ``launch``)."""

    def __new__(
        cls,
        plan: type[Any],
        plans: dict[Any, Any],
        plan_for: Callable[[Any, Any, tuple[Any, ...], list[Any]], Any],
        new_output: Callable[[Any, tuple[int, ...], Any], Any],
        storage_view: Callable[[Any], Any],
        scalar_arg: Callable[[Any, str], Any],
        small_max: int,
    ) -> Self: ...
    #: a reduction's plan not seen before (``reductions._reduce_plan_for``), or None
    reduce_plan_for: Callable[[Any, None, tuple[Any, ...], list[Any]], Any] | None
    @property
    def memo(self) -> Memo: ...
    #: {type: maker(value, stream)}: the launch op of a TensorOp wrapping a value of that
    #: type (a seen matmul's product), or None
    @property
    def pending_launches(self) -> dict[type, Callable[[Any, Any], Any]]: ...
    def launch(self, op: Any, stream: Any, /) -> Any: ...
    def new_tensor(
        self,
        nbytes: int,
        shape: tuple[int, ...],
        dtype: Any,
        strides: tuple[int, ...],
        stream: Any,
        /,
    ) -> Any: ...

@final
class TensorSubmit:
    """``TensorOp.submit_on`` in C (``reactor/python/launches.c``): a seen expression's
    raw launch submitted by the hub's core as a future in one call; the Python it was
    where that is not the case."""

    def __new__(
        cls,
        launches: ExpressLaunches,
        long_way: Callable[[Any, Any], Any],
        generic: Callable[[Any, Any], Any],
        declined: Callable[[Any, Any], Any],
        scope: Any,
    ) -> Self: ...
    def __call__(self, op: Any, stream: Any, /) -> Any: ...
    def __get__(self, obj: Any, owner: Any = None, /) -> Any: ...
    def __set_name__(self, owner: Any, name: str, /) -> None: ...
    @property
    def __name__(self) -> str: ...
    @property
    def __qualname__(self) -> str: ...

@final
class LtMatmul:
    """One kind of cuBLASLt product called from C (``reactor/python/blas.c``): its
    descriptor, the layouts of A, B and C, its algorithm, its scales' type; a call
    passes what changes and returns cublasLtMatmul's status."""

    def __new__(
        cls, fn: int, desc: int, a: int, b: int, c: int, algo: bytes, scale_double: bool
    ) -> Self: ...
    def __call__(
        self,
        handle: int,
        alpha: float,
        beta: float,
        a: int,
        b: int,
        c: int,
        workspace: int,
        workspace_bytes: int,
        stream: int,
        /,
    ) -> int: ...

@final
class ReduceApply:
    """The builder of reductions (``reductions.reduce_op`` is its ``reduce_op``): natively
    for a tensor reduced into a new tensor with arguments seen before, else ``long_way``
    (``reactor/python/reduce.c``)."""

    def __new__(
        cls,
        apply: ElementwiseApply,
        resolved: dict[Any, Any],
        long_way: Callable[[str, str, Any, Any, Any, Any, Any], Any],
        work: type[ReduceWorkCore],
    ) -> Self: ...
    @property
    def memo(self) -> Memo: ...
    def reduce_op(
        self,
        name: str,
        op: str,
        x: Any,
        axis: Any = None,
        *,
        dtype: Any = None,
        out: Any = None,
        keepdims: Any = False,
    ) -> Any: ...

@disjoint_base
class UploadWorkCore:
    """The fields of a ``from_host``'s pending value (its base type)."""

    source: Any
    dtype: np.dtype[Any]

@disjoint_base
class ReduceWorkCore:
    """The fields of a reduction's pending value (its base type), read by ``ExpressLaunches``."""

    _node: Any
    _key: tuple[Any, ...]
    _out: Any
    _strides: tuple[int, ...]
    _shape: tuple[int, ...]
    _name: str
    _dtype: Any

@disjoint_base
class BlockCore:
    """The fields of a ``PinnedBlock`` (its base type), read by the native core."""

    address: int
    capacity: int
    size_class: int
    _pool: Any

@disjoint_base
class WatchedCore:
    """The fields of an op handed to asyncio as a future (``op_future.Watched``, its base
    type), and the steps the loop takes for every such op."""

    op: Any
    loop: Any
    adapter: Any
    context: Any
    callbacks: Any
    stream: Any
    first: Any
    launch: Any
    box: Any
    held: Any
    comp: Any
    value: Any
    error: BaseException | None
    message: Any
    seq: int
    behind: list[Any] | None
    @property
    def thread(self) -> int: ...
    slot: int
    address: int
    ticket: int
    gen: int
    looks: int
    launched: bool
    started: bool
    finished: bool
    cancelled: bool
    blocking: bool
    def __new__(cls, op: Any, loop: Any, adapter: Any, /) -> Self: ...
    def add(self, fn: Callable[[Any], object], context: Any, /) -> None: ...
    def end(self) -> None: ...
    def let_launch_go(self) -> tuple[Any, Any, Any]: ...
    def look(self, hub: Any, /) -> bool: ...
    def submit_launch(self) -> None: ...
    @staticmethod
    def start_each(
        batch: list[Any], failed: Callable[[Any, BaseException], object], /
    ) -> list[Any]: ...
    @staticmethod
    def look_each(
        batch: list[Any], hub: Any, failed: Callable[[Any, Exception], object], /
    ) -> list[Any]: ...

@disjoint_base
class AdapterCore:
    """The fields of a loop adapter (its base type) that an await reads."""

    _ready: Any
    _tick_task: Any
    _tick_shared: bool
    long_ops: bool
    steps_aside: bool

@disjoint_base
class DeviceCore:
    """The fields of a ``Device`` (its base type) that the native core reads."""

    ordinal: int
    _lock: threading.RLock
    _used: int
    _count: int
    _peak: int
    _limit: int | None
    _utility: Stream | None
    _policy: SchedulingPolicy | None
    _legacy: Stream | None

@disjoint_base
class RoundRobinCore:
    """The fields of a ``StreamPoolRoundRobin`` (its base type) that an await reads."""

    _streams: list[Stream]
    _counter: Iterator[int]
    num_streams: int

@disjoint_base
class SingleStreamCore:
    """The field of a ``SingleStream`` (its base type): its stream."""

    stream: Stream

@disjoint_base
class ProcessCore:
    """The process's state an await reads (the module's one ``PROCESS``)."""

    hub: Any
    backend: Any
    last: tuple[Callable[[], Any], Any]
    #: a kernel launch's Python paths (``_launch/kernel.py`` sets them once)
    kernel_configure: Callable[[Any, Any], Any] | None
    kernel_launch: Callable[..., Any] | None
    kernel_launch_checked: Callable[..., Any] | None
    kernel_check_aliasing: Callable[[Any, list[Any]], None] | None
    kernel_device_of: Callable[[list[Any]], Any] | None
    kernel_prepare: Callable[[Any, Any], Any] | None
    #: the null pointer of a pointer parameter a launch leaves unused (no tensor)
    kernel_null: int | None
    #: what an op collected unexecuted calls (``op.py``'s warning)
    op_unexecuted: Callable[[Any], None] | None
    #: the route pageable copies are forced to, or None (``pageable.forced``)
    forced_route: str | None
    #: whether ops record where they were built (``_config.debug_origins``; None until read)
    debug_origins: bool | None
    #: the native op core of a new hub (``express.make_core``, set when it is imported)
    make_core: Callable[[Any], Any] | None
    #: Allocation's Python finalizer and the block cache its native one reads
    alloc_release: Callable[[Any], None] | None
    block_cache: BlockCacheCore | None
    #: ``Allocation.use``, for an access that orders a stream after another's uses
    alloc_use: Callable[[Any, Any, int, bool], None] | None
    #: the await of a launch op (``LaunchCore.__await__`` calls it)
    launch_await: LaunchAwait | None
    #: what a small upload calls and reads: the staging pool's acquire (staging.py), the
    #: handler of a failed copy (express.release_failed), the selected pools' ContextVar
    staging_acquire: Callable[[int], Any] | None
    upload_failed: Callable[..., None] | None
    selected_pools: ContextVar[Any] | None
    #: what ``build_upload`` reads: numpy's ndarray and the dtypes cuasync knows
    #: (_dtypes.py), the default device's ContextVar and the Devices made (device.py)
    ndarray: type | None
    dtypes: dict[Any, str] | None
    default_device: ContextVar[int] | None
    devices: dict[int, Any] | None
    #: ``Hub.stream_memops``, asked where the hub has no answer yet: (hub, ordinal)
    stream_memops: Callable[[Any, int], bool] | None
    #: the Python side of a DLPack export (cuasync/_interop/dlpack.py)
    dlpack_export: Callable[..., Any] | None
    dlpack_release: Callable[[Any], None] | None
    dlpack_device: Callable[[Any], tuple[int, int]] | None
    dlpack_codes: dict[Any, tuple[int, int]] | None

@disjoint_base
class BlockCacheCore:
    """The block cache's state (``block_cache.CACHE``), which the native core reads."""

    lock: threading.RLock
    blocks: dict[tuple[int, int], list[int]]
    bytes: dict[int, int]
    device_max: int
    per_key: int
    key_max: int
    min_class: int
    taking: bool

@final
class ThreadFlags:
    """This thread's submission flags (``context.LOCAL``), thread-locals of the native core."""

    active: bool
    traced: bool

def set_tracing(on: object, /) -> None: ...

@final
class ElementwiseFunction:
    """A function applying the elementwise op ``op`` to its operands (``params``, the first
    ``positional_only`` of them positional-only), ``out=`` keyword-only, through ``apply``
    (an ElementwiseApply); declared by ``wrapped``, a def whose signature, docstring and
    names it carries (``elementwise.elementwise_function``)."""

    def __new__(
        cls,
        op: str,
        params: tuple[str, ...],
        positional_only: int,
        apply: Any,
        wrapped: Callable[..., Any],
    ) -> ElementwiseFunction: ...
    def __call__(self, *args: Any, out: Any = None) -> Any: ...
    op: Final[str]
    __wrapped__: Final[Callable[..., Any]]
    #: The declaring def's names (``cuasync.exp.__name__`` is ``"exp"``; read-only).
    __name__: Final[str]
    __qualname__: Final[str]

def scoped_launch(scope_var: ContextVar[Any], launch: Callable[..., Any], /, *args: Any) -> Any:
    """``launch(*args, word)``: the cancel word of the scope current in ``scope_var`` (0
    outside any; where the op's device is not the scope's, its device's word, set into
    the op's ``_args``), for the Python launchers of a kernel taking a cancel word."""

def build_upload(array: Any, /) -> Any:
    """``cuasync.from_host(array)``'s op for its common case, built in C, else None."""

def tracing() -> bool: ...
def plan_key(
    node: Any, out_strides: tuple[int, ...] | None, /
) -> tuple[tuple[Any, ...], list[Any], list[Any]] | None:
    """The key of ``node``'s launch plan, its tensors and scalars; None: the long way."""

def blocks_kept() -> int: ...
def let_go(op: Any, /) -> None:
    """A cancelled await's launch op lets go of its output and arguments."""

@final
class SlotLedger:
    """The completion slab's slots: the one owner of claiming and releasing them."""

    def __new__(cls, slab: SupportsIndex, nslots: SupportsIndex) -> SlotLedger: ...
    @property
    def slab(self) -> int: ...
    @property
    def nslots(self) -> int: ...
    @property
    def free(self) -> int: ...
    @property
    def retired(self) -> int: ...
    @property
    def claims(self) -> int: ...
    @property
    def in_use(self) -> int: ...
    def claim(self) -> tuple[int, int, int] | None: ...
    def arm(self, slot: SupportsIndex, completion: object, /) -> None: ...
    def completion(self, slot: SupportsIndex, /) -> Any: ...
    def release(self, slot: SupportsIndex, /) -> None: ...
    def retire(self, slot: SupportsIndex, /) -> None: ...
    def generation(self, slot: SupportsIndex, /) -> int: ...
    def completions(self) -> list[Any]: ...

@final
class Express:
    """The express submission of a kernel launch op in one native call (one per hub:
    ``cuasync._core.express.make_core``)."""

    def __new__(cls, hub: HubCore) -> Express: ...
    def launch(self, op: Any, stream: Any, mode: SupportsIndex, adapter: Any, /) -> Any:
        """Submit ``op`` on ``stream`` (mode 0: no spin, 1: an await's, 2: a blocking
        sync's, 4: an await in a burst, its launch queued for the submitter where it can
        be, no spin): the op's output (landed and settled), an ``express.Sent`` tuple
        (``landed`` None in mode 4), or the ``generic`` sentinel (nothing done)."""
    def submit(self, op: Any, stream: Any, /) -> Any:
        """``op.submit_on(stream)``: the op taken, launched and its ``DeviceFuture``
        returned; or the ``generic`` sentinel, the op untaken and nothing done."""
    def upload(self, op: Any, stream: Any, mode: SupportsIndex, adapter: Any, /) -> Any:
        """A small ``from_host`` op submitted on ``stream`` (modes as :meth:`launch`'s): an
        ``express.Sent`` tuple, or the ``generic`` sentinel (nothing done)."""
    def parks_at_once(self, op: Any, spin_us: SupportsIndex, /) -> bool:
        """Whether an await of the launch ``op``, spinning ``spin_us``, parks at once
        instead: its kernel's ``parked_grid`` is its grid and four spins are at most its
        ``parked_ns`` (the native await's test; ``cuasync._core.wake`` sets the hint)."""
    def look(
        self,
        stream: Any,
        slot: SupportsIndex,
        gen: SupportsIndex,
        seq: SupportsIndex,
        ticket: SupportsIndex,
        /,
    ) -> int:
        """A look at the flag of a launch queued for an op handed to asyncio as a future
        (``op_future.Watched.look``; the slot claimed with generation ``gen``, ``ticket``
        the submitter's or -1): 1 landed and settled (the stream's completed number, the
        slot, the counter), 0 not landed, -1 not landed and not made yet, 2 landed with a
        failure in the submitter's status word (Python settles it)."""
    def drop_staging(self) -> None:
        """The idle pinned blocks kept for small uploads go back to the staging pool."""
    @property
    def staging_idle_bytes(self) -> int: ...
    @property
    def staging_reuses(self) -> int: ...
    @property
    def uploads(self) -> int: ...
    @property
    def launches(self) -> int: ...
    @property
    def native_launches(self) -> int: ...
    @property
    def declined(self) -> int: ...
    @property
    def completed_inline(self) -> int: ...
    @property
    def burst_awaits(self) -> int: ...
    @property
    def burst_queued(self) -> int: ...
    @property
    def burst_handed_over(self) -> int: ...
    @property
    def parked_at_once(self) -> int: ...

@final
class LaunchAwait:
    """``_Launch.__await__`` in C: the await's preamble and the hub's core's launch."""

    def __new__(
        cls,
        *,
        fallback: Callable[[Any], Any],
        finish: Callable[..., Any],
        get_running_loop: Callable[[], Any],
        running_adapter: Callable[[], Any],
        policy: Any,
        stream_for: Callable[[Any], Any],
        current_tasks: dict[Any, Any] | None,
        tensor_launch: Callable[[Any, Any], Any] | None = None,
        scope: Any = None,
        start_pass: Callable[[Any], object] | None = None,
    ) -> LaunchAwait: ...
    def __call__(self, op: Any, /) -> Any: ...
    def hand_over(self, op: Any, /) -> Any: ...
    def __get__(self, obj: Any, owner: Any = None, /) -> Any: ...
    @property
    def inline_awaits(self) -> int: ...

@final
class Launcher:
    """``kernel[grid, block, shared_mem]`` as a native callable that builds the op."""

    def __new__(
        cls,
        *,
        kernel: Any,
        params: Any,
        plan: tuple[tuple[str, Any, Any, Any, bool], ...],
        launch: type,
        tensor: type,
        grid: Any,
        block: Any,
        shared_mem: Any,
        default_device: Callable[[], Any],
        name: str,
        devices: tuple[Any, dict[int, Any]] | None,
        cancel: ContextVar[Any] | None,
    ) -> Launcher: ...
    def __call__(self, *args: Any) -> Any: ...
    #: ``kernel[grid, block, shared_mem]``, as the generated Python launcher is named.
    __name__: str
    __qualname__: str

@final
class ExecLock:
    """cuasync's execution lock: ``threading.Lock``'s methods, and a non-blocking take
    from C for the express core."""

    def __new__(cls) -> ExecLock: ...
    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool: ...
    def release(self) -> None: ...
    def locked(self) -> bool: ...
    def __enter__(self) -> bool: ...
    def __exit__(self, *args: object) -> None: ...

@final
class CurrentOrdinal:
    """A device ordinal per thread (-1 until set), read by the express core without an
    attribute lookup (the CUDA backend's record of the context it made current)."""

    def __new__(cls) -> CurrentOrdinal: ...
    ordinal: int

@disjoint_base
class WakePolicyCore:
    """The early wake's parameters as native fields (``wake.Policy``'s base)."""

    min_estimate_ns: int
    park_at_once_ns: int
    lead_ns: int
    lead_max_ns: int
    tolerance_ns: int
    spin_max_ns: int
    max_keys: int
    late_ns: int
    late_up_shift: int
    late_down_shift: int
    report_lag_ns: int
    quiet_max_ns: int
    prewake_ns: int
    prewake_min_ns: int
    quiet: bool
    _on: int

@final
class Estimate:
    """The learned time from the start of a wait to landing of one key (ns) and its mean
    deviation; the policy set by :func:`set_wake_policy` shapes how samples move it."""

    ns: int
    dev: int
    def __new__(cls, ns: SupportsIndex) -> Estimate: ...
    @property
    def steady(self) -> bool: ...
    def exact(self, d: SupportsIndex, /) -> None: ...
    def early(self, by: SupportsIndex, /) -> None: ...
    def missed(self, after: SupportsIndex, by: SupportsIndex, /) -> None: ...
    def unplanned(self, by: SupportsIndex, /) -> None: ...
    def window(self, lead: SupportsIndex, /) -> tuple[int, int, bool]: ...

@final
class Pending:
    """One parked await the early wake follows: its completion, key and times (monotonic
    ns), ordered by ``at`` for the loop's timer heap."""

    hub: Any
    comp: Any
    adapter: Any
    key: Any
    timer: Any
    parked: int
    since: int
    due: int
    at: int
    until: int
    quiet: int
    lo: int
    seen: int
    looked: int
    resumed: int
    hold: int
    @property
    def watched(self) -> bool:
        """Whether its wake looks at its slot before its quiet time ends."""
    def __new__(
        cls,
        hub: Any,
        comp: Any,
        adapter: Any,
        key: Any,
        parked: SupportsIndex,
        since: SupportsIndex | None = None,
    ) -> Pending: ...
    def __lt__(self, other: Pending, /) -> bool: ...
    def __gt__(self, other: Pending, /) -> bool: ...
    def __hash__(self) -> int: ...

@disjoint_base
class TimerCore:
    """One loop's timerfd (``fd``, owned from now) and the heap of the wakes parked on
    it: the base of wake.Timer."""

    fd: int
    closed: bool
    armed: int
    set_ns: int
    late_ns: int
    @property
    def heap(self) -> list[Pending]: ...
    def __new__(cls, fd: int) -> Self: ...
    def add(self, entry: Pending, /) -> bool: ...
    def remove(self, entry: Pending, /) -> None: ...
    def fire(self) -> None: ...
    def close(self) -> None: ...

def set_wake_policy(
    policy: WakePolicyCore,
    estimates: dict[Any, Estimate],
    forget: Callable[[], None],
    open_timer: Callable[[Any], Any],
    /,
) -> None:
    """Make ``policy`` the one estimates follow, ``estimates`` the process's,
    ``forget()`` what empties them when full and ``open_timer(adapter)`` what makes a
    loop's timer."""

def plan_wake(
    hub: Any, comp: Any, adapter: Any, key: Any, since: SupportsIndex = 0, /
) -> Pending | None:
    """The await of ``comp`` about to park, followed (None: not followed)."""

def is_launch(key: object, /) -> bool:
    """Whether ``key`` is a launch's: ``(prepared kernel, grid)``."""

def cancel_wake(entry: Pending, /) -> None:
    """The await of ``entry`` was cancelled: its wake taken off its timer."""

def resumed(entry: Pending, /) -> None:
    """The await of ``entry`` resumed: its wake taken off its timer, its estimate learnt."""
