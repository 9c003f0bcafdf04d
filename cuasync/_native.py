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

#: The interface version of ``reactor/*.c`` this Python code calls (the module's ``ABI``).
ABI = 4

NATIVE: Any
try:
    from . import _reactor as NATIVE
except ImportError:  # built without a C compiler
    NATIVE = None
else:
    if getattr(NATIVE, "ABI", 1) != ABI:  # a build left over from another checkout
        import warnings

        warnings.warn(
            f"cuasync._reactor at {NATIVE.__file__} is a build of other sources (interface "
            f"{getattr(NATIVE, 'ABI', 1)}, this code needs {ABI}); it is not used, so awaits "
            "complete through host callbacks. Rebuild it: python3 setup.py build_ext --inplace",
            RuntimeWarning,
            stacklevel=2,
        )
        NATIVE = None

__all__ = ["ABI", "NATIVE"]
