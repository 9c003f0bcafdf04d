"""Backend selection: ``CUASYNC_BACKEND=auto|cuda|emulator``, decided once per process."""

from __future__ import annotations

import os
import threading
from typing import Any, NoReturn

from .._config import CONFIG
from .._native import PROCESS
from ..errors import BackendUnavailableError
from .base import Backend

_lock = threading.Lock()
#: The process's backend is ``PROCESS.backend`` (None until :func:`get_backend` chooses
#: it): a field of the native module's ``PROCESS``, which the native core reads.


def _make_emulator() -> Backend:
    # Only the selected backend's module is imported (each is 10-15 ms of import).
    from .emulator import EmulatorBackend

    return EmulatorBackend(
        CONFIG.emu_devices, CONFIG.emu_memory, CONFIG.emu_delay_us, peer_access=CONFIG.emu_peer
    )


def _make_cuda() -> Backend:
    # Only the selected backend's module is imported (each is 10-15 ms of import).
    from . import cuda

    reason = cuda.probe()
    if reason is not None:
        raise BackendUnavailableError(
            f"CUASYNC_BACKEND=cuda was requested but the CUDA backend cannot run here: {reason}. "
            "Unset CUASYNC_BACKEND (or set it to 'emulator') to use the CPU emulator."
        )
    return cuda.CudaBackend()


def get_backend() -> Backend:
    """The process's backend, created on first use (``PROCESS.backend``)."""
    backend: Backend | None = PROCESS.backend
    if backend is not None:
        return backend
    with _lock:
        if PROCESS.backend is None:
            if CONFIG.backend == "cuda":
                PROCESS.backend = _make_cuda()
            elif CONFIG.backend == "emulator":
                PROCESS.backend = _make_emulator()
            else:
                try:
                    PROCESS.backend = _make_cuda()
                except BackendUnavailableError:
                    PROCESS.backend = _make_emulator()
        made: Backend = PROCESS.backend
        return made


FORKED_MESSAGE = (
    "cuasync was initialized in the parent process before os.fork(): its CUDA context "
    "(or its emulator's threads) and completion threads do not exist in a forked child. "
    "Start worker processes with multiprocessing's 'spawn' or 'forkserver' method, or "
    "fork before cuasync is first used (importing it is fine)."
)


class _ForkedBackend:
    """The backend of a child forked after initialization: every use raises, clearly."""

    def __getattr__(self, name: str) -> NoReturn:
        raise RuntimeError(FORKED_MESSAGE)


def _after_fork_in_child() -> None:
    if PROCESS.backend is not None:
        PROCESS.backend = _ForkedBackend()


os.register_at_fork(after_in_child=_after_fork_in_child)


def forked() -> bool:
    """Whether this process was forked after cuasync was initialized in its parent."""
    return isinstance(PROCESS.backend, _ForkedBackend)


def backend_name() -> str:
    """``"cuda"`` or ``"emulator"``: which backend this process uses."""
    backend: Any = get_backend()
    name: str = backend.name
    return name
