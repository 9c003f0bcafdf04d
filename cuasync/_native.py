"""The one place that decides between the native module and the pure-Python fallback.

``NATIVE`` is ``cuasync._reactor`` when it was built, else ``None``: a machine without a
C compiler gets host-callback completions and ctypes word access. Everything else
takes the module from here (the hub keeps its own reference, so a test can build a
hub without it in-process and run the fallback like the native path).

>>> from cuasync._native import NATIVE
>>> NATIVE is None   # True where the extension is missing
"""

from __future__ import annotations

from typing import Any

NATIVE: Any
try:
    from . import _reactor as NATIVE
except ImportError:  # built without a C compiler
    NATIVE = None

__all__ = ["NATIVE"]
