"""The CUDA backend driven directly, on a real GPU.

Every test here needs a device: they run only with ``CUASYNC_BACKEND=cuda`` and a
usable driver, and skip cleanly everywhere else.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cuasync._backends import cuda
from cuasync._backends.base import CAPTURE_RELAXED
from cuasync._launch.signature import parse_params
from cuasync.errors import DriverError, InvalidDeviceError, OutOfMemoryError

_REASON = (
    "set CUASYNC_BACKEND=cuda to run the CUDA backend tests"
    if os.environ.get("CUASYNC_BACKEND") != "cuda"
    else cuda.probe()
)

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(_REASON is not None, reason=str(_REASON)),
]

# Hand-written PTX (ISA 8.0, sm_80; the driver JITs it for newer GPUs).
PTX = textwrap.dedent(
    """\
    .version 8.0
    .target sm_80
    .address_size 64

    .visible .entry noop()
    {
        ret;
    }

    .visible .entry store_u32(
        .param .u64 store_u32_ptr,
        .param .u32 store_u32_value
    )
    {
        .reg .b64 %rd<2>;
        .reg .b32 %r<2>;
        ld.param.u64 %rd1, [store_u32_ptr];
        ld.param.u32 %r1, [store_u32_value];
        st.u32 [%rd1], %r1;
        ret;
    }

    .visible .entry spin_until_nonzero(
        .param .u64 spin_ptr
    )
    {
        .reg .b64 %rd<2>;
        .reg .b32 %r<2>;
        .reg .pred %p<2>;
        ld.param.u64 %rd1, [spin_ptr];
    SPIN:
        ld.volatile.u32 %r1, [%rd1];
        setp.eq.u32 %p1, %r1, 0;
        @%p1 bra SPIN;
        ret;
    }

    .visible .entry trap_now()
    {
        trap;
    }
    """
).encode()


@pytest.fixture(scope="module")
def backend() -> cuda.CudaBackend:
    return cuda.CudaBackend()


@pytest.fixture
def stream(backend: cuda.CudaBackend) -> Iterator[int]:
    s = backend.stream_create(0)
    yield s
    backend.stream_synchronize(s)
    backend.stream_destroy(s)


@pytest.fixture(scope="module")
def module(backend: cuda.CudaBackend) -> Iterator[int]:
    mod = backend.module_load(0, PTX)
    yield mod
    backend.module_unload(mod)


class Pinned:
    """A host_alloc'd block with a numpy view of it."""

    def __init__(self, backend: cuda.CudaBackend, nbytes: int) -> None:
        self.backend = backend
        self.ptr = backend.host_alloc(nbytes)
        self.nbytes = nbytes
        self.bytes = np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(self.ptr))

    def free(self) -> None:
        self.backend.host_free(self.ptr)


@pytest.fixture
def pinned(backend: cuda.CudaBackend) -> Iterator[Any]:
    blocks: list[Pinned] = []

    def make(nbytes: int) -> Pinned:
        block = Pinned(backend, nbytes)
        blocks.append(block)
        return block

    yield make
    for block in blocks:
        block.free()


@dataclass
class _Function:
    """A function of the hand-written module, as the backend's ``KernelCode``."""

    name: str
    signature: str
    module_handle: int
    emulate: Any = None
    function_handle: int = 0

    @property
    def params(self) -> list[Any]:
        return parse_params(f"__global__ void {self.name}({self.signature})", self.name)

    def compile_image(self, arch: str) -> tuple[bytes, str]:
        raise AssertionError("a function of a loaded module is never compiled")

    def check_compiles(self, arch: str) -> None:
        raise AssertionError("a function of a loaded module is never compiled")


def _kernel(backend: cuda.CudaBackend, module: int, name: str, signature: str = "") -> Any:
    """``name`` of ``module``, prepared for device 0 (prepare_kernel takes its handle)."""
    return backend.prepare_kernel(0, _Function(name, signature, module))


# -- probe and devices ----------------------------------------------------------------
def test_probe_is_none() -> None:
    assert cuda.probe() is None


def test_device_info(backend: cuda.CudaBackend) -> None:
    assert backend.name == "cuda"
    assert backend.device_count() >= 1
    assert backend.device_name(0)
    assert backend.device_total_memory(0) > 1 << 30
    major, minor = backend.device_compute_capability(0)
    assert major >= 5 and minor >= 0
    assert backend.supports_stream_memops(0)
    assert backend.device_fault(0) is None
    backend.device_synchronize(0)


def test_invalid_ordinal(backend: cuda.CudaBackend) -> None:
    with pytest.raises(InvalidDeviceError):
        backend.stream_create(backend.device_count())


# -- streams and events ---------------------------------------------------------------
def test_stream_lifecycle(backend: cuda.CudaBackend) -> None:
    s = backend.stream_create(0)
    assert isinstance(s, int) and s != 0
    assert backend.stream_device(s) == 0
    assert backend.stream_query(s) is True
    backend.stream_synchronize(s)
    assert backend.stream_is_capturing(s) is False
    backend.stream_destroy(s)


def test_events(backend: cuda.CudaBackend, stream: int) -> None:
    start = backend.event_create(0, timing=True)
    end = backend.event_create(0, timing=True)
    plain = backend.event_create(0)
    try:
        backend.event_record(start, stream)
        backend.event_record(end, stream)
        backend.event_record(plain, stream)
        backend.event_synchronize(end)
        assert backend.event_query(end) is True
        assert backend.event_query(plain) in (True, False)
        backend.event_synchronize(plain)
        assert backend.event_query(plain) is True
        assert backend.event_elapsed_ms(start, end) >= 0.0
        with pytest.raises(DriverError):  # timing disabled on `plain`
            backend.event_elapsed_ms(start, plain)
    finally:
        for e in (start, end, plain):
            backend.event_destroy(e)


def test_query_not_ready_and_cross_stream_wait(
    backend: cuda.CudaBackend, module: int, pinned: Any
) -> None:
    """A kernel spinning on a host word keeps the stream busy until the host writes it."""
    flag = pinned(4)
    flag.bytes[:] = 0
    word = ctypes.c_uint32.from_address(flag.ptr)
    spin = _kernel(backend, module, "spin_until_nonzero", "unsigned int* flag")
    a = backend.stream_create(0)
    b = backend.stream_create(0)
    event = backend.event_create(0)
    try:
        backend.launch_kernel(
            spin, (1, 1, 1), (1, 1, 1), 0, a, [backend.host_device_pointer(flag.ptr)], list
        )
        backend.event_record(event, a)
        backend.stream_wait_event(b, event)
        hits: list[int] = []
        backend.launch_host_func(b, lambda: hits.append(1))
        assert backend.stream_query(a) is False
        assert backend.event_query(event) is False
        assert backend.stream_query(b) is False
        assert hits == []
    finally:
        word.value = 1  # release the kernel whatever happened
        backend.stream_synchronize(a)
        backend.stream_synchronize(b)
    assert backend.stream_query(a) is True
    assert backend.event_query(event) is True
    assert hits == [1]
    backend.event_destroy(event)
    backend.stream_destroy(a)
    backend.stream_destroy(b)


def test_foreign_stream_device(backend: cuda.CudaBackend) -> None:
    from cuda.bindings import driver

    backend.device_synchronize(0)  # makes device 0's primary context current here
    err, foreign = driver.cuStreamCreate(0)
    assert not err
    handle = int(foreign)
    try:
        assert handle not in backend._streams
        assert backend.stream_device(handle) == 0
        assert backend._stream_device_from_context(handle) == 0
        assert backend.stream_query(handle) is True
        backend.stream_synchronize(handle)
    finally:
        driver.cuStreamDestroy(handle)


# -- memory ---------------------------------------------------------------------------
def test_alloc_copy_roundtrip(backend: cuda.CudaBackend, stream: int, pinned: Any) -> None:
    n = 1 << 20
    src = pinned(n)
    dst = pinned(n)
    src.bytes[:] = np.arange(n, dtype=np.uint64).astype(np.uint8)
    dst.bytes[:] = 0
    a = backend.mem_alloc_async(n, stream)
    b = backend.mem_alloc_async(n, stream)
    assert a and b and a != b
    backend.memcpy_htod_async(a, src.ptr, n, stream)
    backend.memcpy_dtod_async(b, a, n, stream)
    backend.memcpy_dtoh_async(dst.ptr, b, n, stream)
    backend.mem_free_async(a, stream)
    backend.mem_free_async(b, stream)
    backend.stream_synchronize(stream)
    assert np.array_equal(src.bytes, dst.bytes)


def test_memset(backend: cuda.CudaBackend, stream: int, pinned: Any) -> None:
    n = 4096
    out = pinned(n)
    out.bytes[:] = 0
    dev = backend.mem_alloc_async(n, stream)
    backend.memset_d8_async(dev, 0xAB, n, stream)
    backend.memset_d8_async(dev, 0x11, 16, stream)
    backend.memcpy_dtoh_async(out.ptr, dev, n, stream)
    backend.mem_free_async(dev, stream)
    backend.stream_synchronize(stream)
    assert (out.bytes[:16] == 0x11).all()
    assert (out.bytes[16:] == 0xAB).all()


def test_memcpy_2d(backend: cuda.CudaBackend, stream: int, pinned: Any) -> None:
    rows, width, host_pitch, dev_pitch = 8, 24, 32, 64
    src = pinned(rows * host_pitch)
    out = pinned(rows * host_pitch)
    src.bytes[:] = np.arange(rows * host_pitch, dtype=np.uint32).astype(np.uint8)
    out.bytes[:] = 0xEE
    a = backend.mem_alloc_async(rows * dev_pitch, stream)
    b = backend.mem_alloc_async(rows * dev_pitch, stream)
    backend.memset_d8_async(a, 0, rows * dev_pitch, stream)
    backend.memcpy_2d_async(a, dev_pitch, src.ptr, host_pitch, width, rows, stream, "htod")
    backend.memcpy_2d_async(b, dev_pitch, a, dev_pitch, width, rows, stream, "dtod")
    backend.memcpy_2d_async(out.ptr, host_pitch, b, dev_pitch, width, rows, stream, "dtoh")
    backend.mem_free_async(a, stream)
    backend.mem_free_async(b, stream)
    backend.stream_synchronize(stream)
    got = out.bytes.reshape(rows, host_pitch)
    want = src.bytes.reshape(rows, host_pitch)
    assert np.array_equal(got[:, :width], want[:, :width])
    assert (got[:, width:] == 0xEE).all()  # the padding was not touched


def test_alloc_out_of_memory(backend: cuda.CudaBackend, stream: int) -> None:
    nbytes = 1 << 50  # 1 PiB
    with pytest.raises(OutOfMemoryError) as info:
        backend.mem_alloc_async(nbytes, stream)
    assert info.value.nbytes == nbytes
    assert backend.device_fault(0) is None


def test_mem_info_pool_usage_and_trim(backend: cuda.CudaBackend, stream: int) -> None:
    free, total = backend.mem_get_info(0)
    assert 0 < free <= total
    nbytes = 64 << 20
    ptr = backend.mem_alloc_async(nbytes, stream)
    backend.stream_synchronize(stream)
    reserved, used = backend.mem_pool_usage(0)
    assert used >= nbytes and reserved >= used
    backend.mem_free_async(ptr, stream)
    backend.stream_synchronize(stream)
    reserved_idle, used_after = backend.mem_pool_usage(0)
    assert used_after <= used - nbytes and reserved_idle >= reserved - (1 << 21)
    backend.mem_pool_trim(0, 0)
    trimmed, _ = backend.mem_pool_usage(0)
    assert trimmed <= reserved_idle - nbytes


def test_host_device_pointer(backend: cuda.CudaBackend, pinned: Any) -> None:
    block = pinned(256)
    dptr = backend.host_device_pointer(block.ptr)
    assert isinstance(dptr, int) and dptr
    assert backend.host_device_pointer(block.ptr + 64) == dptr + 64


# -- completion primitives ------------------------------------------------------------
def test_write_value32(backend: cuda.CudaBackend, stream: int, pinned: Any) -> None:
    slab = pinned(64)
    slab.bytes[:] = 0
    word = ctypes.c_uint32.from_address(slab.ptr + 8)
    backend.write_value32(stream, slab.ptr + 8, 0xDEADBEEF)
    backend.stream_synchronize(stream)
    assert word.value == 0xDEADBEEF
    assert slab.bytes[:8].sum() == 0 and slab.bytes[12:].sum() == 0
    backend.write_value32(stream, slab.ptr + 8, 7)
    backend.stream_synchronize(stream)
    assert word.value == 7


def test_launch_host_func(backend: cuda.CudaBackend, stream: int) -> None:
    done = threading.Event()
    seen: list[int] = []

    def fn() -> None:
        seen.append(threading.get_ident())
        done.set()

    backend.launch_host_func(stream, fn)
    assert done.wait(10)
    backend.stream_synchronize(stream)
    assert len(seen) == 1
    assert not cuda._host_fns  # released after running


def test_launch_host_func_exception_is_unraisable(
    backend: cuda.CudaBackend, stream: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    reported: list[Any] = []
    monkeypatch.setattr(sys, "unraisablehook", reported.append)
    after = threading.Event()

    def bad() -> None:
        raise ValueError("raised in a host function")

    backend.launch_host_func(stream, bad)
    backend.launch_host_func(stream, after.set)
    assert after.wait(10)
    backend.stream_synchronize(stream)
    assert len(reported) == 1
    assert reported[0].exc_type is ValueError
    assert reported[0].object is bad


# -- modules, kernels, graphs ---------------------------------------------------------
def test_module_and_kernel_params(
    backend: cuda.CudaBackend, module: int, stream: int, pinned: Any
) -> None:
    noop = _kernel(backend, module, "noop")
    store = _kernel(backend, module, "store_u32", "unsigned int* ptr, unsigned int value")
    assert noop.handle and store.handle
    assert store.handle == backend.module_function(module, "store_u32")
    backend.launch_kernel(noop, (1, 1, 1), (1, 1, 1), 0, stream, [], list)
    out = pinned(4)
    out.bytes[:] = 0
    dev = backend.mem_alloc_async(4, stream)
    backend.launch_kernel(store, (1, 1, 1), (32, 1, 1), 0, stream, [dev, 0x12345678], list)
    backend.memcpy_dtoh_async(out.ptr, dev, 4, stream)
    backend.mem_free_async(dev, stream)
    backend.stream_synchronize(stream)
    assert ctypes.c_uint32.from_address(out.ptr).value == 0x12345678
    with pytest.raises(DriverError):
        backend.module_function(module, "no_such_kernel")


def test_module_load_rejects_garbage(backend: cuda.CudaBackend) -> None:
    with pytest.raises(DriverError):
        backend.module_load(0, b"this is not a module")


def test_graph_capture(backend: cuda.CudaBackend, module: int, stream: int, pinned: Any) -> None:
    store = _kernel(backend, module, "store_u32", "unsigned int* ptr, unsigned int value")
    out = pinned(16)
    out.bytes[:] = 0
    dev = backend.mem_alloc_async(16, stream)
    backend.stream_synchronize(stream)
    backend.stream_begin_capture(stream, CAPTURE_RELAXED)
    assert backend.stream_is_capturing(stream) is True
    backend.memset_d8_async(dev, 0x5A, 16, stream)
    # the parameters are copied at the launch: later launches may pack other values
    backend.launch_kernel(store, (1, 1, 1), (1, 1, 1), 0, stream, [dev + 4, 0xCAFEF00D], list)
    graph = backend.stream_end_capture(stream)
    assert backend.stream_is_capturing(stream) is False
    assert graph
    graph_exec = backend.graph_instantiate(graph)
    backend.graph_upload(graph_exec, stream)
    backend.graph_launch(graph_exec, stream)
    backend.memcpy_dtoh_async(out.ptr, dev, 16, stream)
    backend.stream_synchronize(stream)
    words = np.frombuffer(out.bytes.tobytes(), dtype=np.uint32)
    assert words[1] == 0xCAFEF00D
    assert words[0] == words[2] == words[3] == 0x5A5A5A5A
    # Launch again after clearing: the graph replays both nodes.
    backend.memset_d8_async(dev, 0, 16, stream)
    backend.graph_launch(graph_exec, stream)
    backend.memcpy_dtoh_async(out.ptr, dev, 16, stream)
    backend.mem_free_async(dev, stream)
    backend.stream_synchronize(stream)
    words = np.frombuffer(out.bytes.tobytes(), dtype=np.uint32)
    assert words[1] == 0xCAFEF00D and words[0] == 0x5A5A5A5A
    backend.graph_exec_destroy(graph_exec)
    backend.graph_destroy(graph)


def test_driver_entry_points(backend: cuda.CudaBackend, stream: int) -> None:
    names = ["cuStreamWriteValue32", "cuLaunchKernel", "cuStreamQuery", "cuNoSuchFunction"]
    found = backend.driver_entry_points(names)
    assert set(found) == set(names[:3])
    assert all(isinstance(v, int) and v for v in found.values())
    # The address really is cuStreamQuery: call it through ctypes.
    query = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)(found["cuStreamQuery"])
    backend.stream_synchronize(stream)
    assert query(stream) == 0


# -- faults ---------------------------------------------------------------------------
_FAULT_SCRIPT = """
import sys
from collections import namedtuple
from cuasync._backends import cuda
Function = namedtuple("Function", "name params emulate module_handle function_handle")
from cuasync.errors import DeviceFaultError
PTX = {ptx!r}
b = cuda.CudaBackend()
s = b.stream_create(0)
m = b.module_load(0, PTX)
f = b.prepare_kernel(0, Function("trap_now", [], None, m, 0))
b.launch_kernel(f, (1, 1, 1), (1, 1, 1), 0, s, [], list)
try:
    b.stream_synchronize(s)
except DeviceFaultError as exc:
    print("sync raised", exc.name)
else:
    sys.exit("stream_synchronize did not raise")
fault = b.device_fault(0)
assert isinstance(fault, DeviceFaultError), fault
try:
    b.stream_query(s)
except DeviceFaultError:
    print("query raised")
else:
    sys.exit("stream_query did not raise after the fault")
print("ok")
"""


def test_sticky_fault_is_remembered() -> None:
    """A trapped kernel poisons the context, so this runs in a child process."""
    repo = str(Path(cuda.__file__).resolve().parents[2])  # where `cuasync` is importable
    path = os.pathsep.join(p for p in (repo, os.environ.get("PYTHONPATH")) if p)
    proc = subprocess.run(
        [sys.executable, "-c", _FAULT_SCRIPT.format(ptx=PTX)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": path},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "sync raised CUDA_ERROR_" in proc.stdout
    assert proc.stdout.rstrip().endswith("ok")


def test_a_device_word_is_written_on_an_urgent_stream(
    backend: cuda.CudaBackend, stream: int, pinned: Any
) -> None:
    """The cancel words' primitives: device memory outside the pool, zeroed, and a word
    of it written in stream order on a stream of the greatest priority (issue 36: a pool
    word given to write_value32 was refused on the H200)."""
    _, greatest = backend.stream_priority_range(0)
    urgent = backend.stream_create(0, greatest)
    try:
        slab = backend.device_words_alloc(0, 4096, urgent)
        out = pinned(8)
        out.bytes[:] = 0xFF
        backend.write_device_word(urgent, slab + 4, 0xBEEF)
        backend.stream_synchronize(urgent)
        backend.memcpy_dtoh_async(out.ptr, slab, 8, stream)
        backend.stream_synchronize(stream)
        assert out.bytes.view(np.uint32).tolist() == [0, 0xBEEF]  # the rest stays zeroed
    finally:
        backend.stream_destroy(urgent)
