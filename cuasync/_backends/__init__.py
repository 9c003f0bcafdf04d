"""Backend selection: ``CUASYNC_BACKEND=auto|cuda|emulator``, decided once per process."""

from __future__ import annotations

import threading

from .._config import CONFIG
from ..errors import BackendUnavailableError
from .base import Backend

_lock = threading.Lock()
_backend: Backend | None = None


def _make_emulator() -> Backend:
    from .emulator import EmulatorBackend

    return EmulatorBackend(CONFIG.emu_devices, CONFIG.emu_memory, CONFIG.emu_delay_us)


def _make_cuda() -> Backend:
    from . import cuda

    reason = cuda.probe()
    if reason is not None:
        raise BackendUnavailableError(
            f"CUASYNC_BACKEND=cuda was requested but the CUDA backend cannot run here: {reason}. "
            "Unset CUASYNC_BACKEND (or set it to 'emulator') to use the CPU emulator."
        )
    return cuda.CudaBackend()


def get_backend() -> Backend:
    """The process's backend, created on first use."""
    global _backend
    backend = _backend
    if backend is not None:
        return backend
    with _lock:
        if _backend is None:
            if CONFIG.backend == "cuda":
                _backend = _make_cuda()
            elif CONFIG.backend == "emulator":
                _backend = _make_emulator()
            else:
                try:
                    _backend = _make_cuda()
                except BackendUnavailableError:
                    _backend = _make_emulator()
        return _backend


def backend_name() -> str:
    """``"cuda"`` or ``"emulator"``: which backend this process uses."""
    return get_backend().name
