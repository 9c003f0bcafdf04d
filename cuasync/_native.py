"""The native module, ``cuasync._reactor``: required, and checked to match its sources.

It owns the types the hot path touches (the slot ledger, the base types below, the
reactor, the op core) and is built by ``pip install`` (a C compiler is needed, as for
uvloop). The build stamps it with a hash of ``reactor/**/*.[ch]`` (``SOURCE_HASH``, see
setup.py); where those sources are present (a checkout, an editable install), a build of
other sources fails the import with the command that rebuilds it, instead of running
half-matched code. An installed wheel has no sources beside it, and nothing to compare.

>>> from cuasync._native import NATIVE
>>> NATIVE.SlotLedger
<class 'cuasync._reactor.SlotLedger'>
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

_REBUILD = "rebuild it: pip install -e . (or python3 setup.py build_ext --inplace)"
#: Where a checkout keeps the native sources (absent in an installed wheel).
_SOURCES = Path(__file__).resolve().parent.parent / "reactor"


def source_hash(folder: Path) -> str:
    """The hash setup.py stamps the build with: every .c and .h file under ``folder``, by path."""
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*.[ch]")):
        name = path.relative_to(folder).as_posix()
        digest.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


try:
    from . import _reactor
except ImportError as exc:  # built without a C compiler, or not built at all
    raise ImportError(
        f"cuasync's native module cuasync._reactor could not be imported ({exc}); {_REBUILD}"
    ) from exc
if (_SOURCES / "core" / "reactor.h").is_file() and (_SOURCES / "python" / "module.c").is_file():
    _built, _here = getattr(_reactor, "SOURCE_HASH", "unknown"), source_hash(_SOURCES)
    if _built != _here:  # a build left over from other sources
        raise ImportError(
            f"cuasync._reactor at {_reactor.__file__} is a build of other sources (built from "
            f"{_built}, the sources here are {_here}); {_REBUILD}"
        )

NATIVE: Any = _reactor

#: The native base types of the classes the hot path reads (typed by ``_reactor.pyi``).
StreamCore = _reactor.StreamCore
AllocationCore = _reactor.AllocationCore
TensorCore = _reactor.TensorCore
PreparedCore = _reactor.PreparedCore
KernelCore = _reactor.KernelCore
OpCore = _reactor.OpCore
LaunchCore = _reactor.LaunchCore
HubCore = _reactor.HubCore
BackendCore = _reactor.BackendCore
ContextCore = _reactor.ContextCore
OutputCore = _reactor.OutputCore
FutureCore = _reactor.FutureCore
CompletionCore = _reactor.CompletionCore
TensorOpCore = _reactor.TensorOpCore
UploadOpCore = _reactor.UploadOpCore
NodeCore = _reactor.NodeCore
UploadWorkCore = _reactor.UploadWorkCore
ReduceWorkCore = _reactor.ReduceWorkCore
BlockCore = _reactor.BlockCore
WatchedCore = _reactor.WatchedCore
BlockCacheCore = _reactor.BlockCacheCore
AdapterCore = _reactor.AdapterCore
DeviceCore = _reactor.DeviceCore
RoundRobinCore = _reactor.RoundRobinCore
SingleStreamCore = _reactor.SingleStreamCore
ProcessCore = _reactor.ProcessCore
WakePolicyCore = _reactor.WakePolicyCore
Estimate = _reactor.Estimate
Pending = _reactor.Pending
TimerCore = _reactor.TimerCore
#: The parked await of a completion (``HubCore.suspend``'s iterator).
Suspension = _reactor.Suspension
#: The wake-up of a task parked on an asyncio loop future (``AsyncioAdapter.park``'s).
FutureWaker = _reactor.FutureWaker
#: The process's state an await reads in C (a ``ProcessCore``): ``hub``, the completion
#: hub (``completion.get_hub`` makes it), and ``last``, the last loop looked up and its
#: adapter (``loops``).
PROCESS = _reactor.PROCESS

__all__ = [
    "NATIVE",
    "PROCESS",
    "AdapterCore",
    "AllocationCore",
    "BackendCore",
    "BlockCacheCore",
    "BlockCore",
    "CompletionCore",
    "Estimate",
    "FutureWaker",
    "ContextCore",
    "DeviceCore",
    "FutureCore",
    "HubCore",
    "KernelCore",
    "LaunchCore",
    "NodeCore",
    "OpCore",
    "OutputCore",
    "Pending",
    "PreparedCore",
    "ProcessCore",
    "ReduceWorkCore",
    "RoundRobinCore",
    "SingleStreamCore",
    "Suspension",
    "StreamCore",
    "TensorCore",
    "TensorOpCore",
    "TimerCore",
    "UploadOpCore",
    "UploadWorkCore",
    "WakePolicyCore",
    "WatchedCore",
    "source_hash",
]
