"""What a GPU probe does without a GPU: its kernels parsed (and compiled for sm_90 where
NVRTC is installed), so that a probe's sources are checked before device time is spent.

    if not get_backend().driver_handles:
        return offline_check("device_rows", kernels())
"""

from __future__ import annotations

from collections.abc import Mapping

import cuasync


def offline_check(probe: str, kernels: Mapping[str, cuasync.Kernel]) -> int:
    """Say that ``probe`` needs a GPU, compile ``kernels`` for sm_90 if NVRTC can, and
    return the probe's exit status (0: nothing here to fail)."""
    print(
        f"{probe}: needs a GPU (backend: {cuasync.backend_name()}); "
        f"{len(kernels)} kernel sources parsed"
    )
    try:
        for k in kernels.values():
            k.compile_image("sm_90")
        print(f"{probe}: all {len(kernels)} compiled for sm_90 (NVRTC)")
    except Exception as e:  # NVRTC missing or not usable here
        print(f"{probe}: not compiled here ({type(e).__name__}: {str(e)[:200]})")
    return 0
