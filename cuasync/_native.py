"""The native module, ``cuasync._reactor``: required, and checked to match these sources.

It owns the types the hot path touches (the slot ledger, the reactor, the op core) and
is built by ``pip install`` (a C compiler is needed, as for uvloop). A build left over
from other sources fails the import with the command that rebuilds it, instead of
running half-matched code.

>>> from cuasync._native import NATIVE
>>> NATIVE.SlotLedger
<class 'cuasync._reactor.SlotLedger'>
"""

from __future__ import annotations

from typing import Any

#: The interface version of ``reactor/*.c`` this Python code calls (the module's ``ABI``).
ABI = 5

_REBUILD = "rebuild it: pip install -e . (or python3 setup.py build_ext --inplace)"

try:
    from . import _reactor
except ImportError as exc:  # built without a C compiler, or not built at all
    raise ImportError(
        f"cuasync's native module cuasync._reactor could not be imported ({exc}); {_REBUILD}"
    ) from exc
if getattr(_reactor, "ABI", 1) != ABI:  # a build left over from another checkout
    raise ImportError(
        f"cuasync._reactor at {_reactor.__file__} is a build of other sources (interface "
        f"{getattr(_reactor, 'ABI', 1)}, this code needs {ABI}); {_REBUILD}"
    )

NATIVE: Any = _reactor

#: The native base types of the classes the hot path reads (typed by ``_reactor.pyi``).
StreamCore = _reactor.StreamCore
AllocationCore = _reactor.AllocationCore
TensorCore = _reactor.TensorCore
PreparedCore = _reactor.PreparedCore
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
BlockCore = _reactor.BlockCore

__all__ = [
    "ABI",
    "NATIVE",
    "AllocationCore",
    "BackendCore",
    "BlockCore",
    "CompletionCore",
    "ContextCore",
    "FutureCore",
    "HubCore",
    "NodeCore",
    "LaunchCore",
    "OpCore",
    "OutputCore",
    "PreparedCore",
    "StreamCore",
    "TensorCore",
    "TensorOpCore",
    "UploadOpCore",
    "UploadWorkCore",
]
