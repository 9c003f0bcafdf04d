"""Whether the copy engines' copy of a guarded region (issue #36: the ``"copy"`` kind, a
conditional graph node's body) takes memory cuasync did not allocate: CUDA managed
memory, beside device memory, both CuPy's, adopted by ``__cuda_array_interface__``.

``dup`` guards only copies from memory cuasync allocated; this probe makes the region
itself (``guarded``, forced with ``guard.POLICY.min_ns = 0``, in a cancel scope not
cancelled) copy each source, and says whether it ran and its result is right.

    CUASYNC_GUARDS=on python3 tools/probes/guard_managed.py
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np


def _sources(cupy: Any, n: int) -> dict[str, Any]:
    host = np.arange(n, dtype=np.float32)
    device = cupy.asarray(host)
    managed = cupy.ndarray((n,), np.float32, cupy.cuda.malloc_managed(host.nbytes))
    managed[...] = device
    return {"device memory (cupy)": device, "managed memory (cupy)": managed}


def _guarded_copy(dst: Any, src: Any) -> Any:
    """An op copying ``src`` into ``dst`` with the copy engines inside a guarded region."""
    from cuasync._core.op import device_op
    from cuasync._core.output import Output
    from cuasync._launch.guard import guarded
    from cuasync._transfers.device_copy import copy_strided

    def enqueue(ctx: Any) -> Any:
        ctx.write(dst.allocation, "dst")
        at = ctx.read(src.allocation) + src.offset * src.itemsize
        strides = (src.itemsize,)
        with guarded(ctx, "copy", nbytes=2 * dst.nbytes):
            copy_strided(ctx, "dtod", dst.ptr, strides, at, strides, src.shape, src.itemsize)
        return Output.ready(None)

    return device_op(enqueue, dst.device, "guarded copy")


async def main() -> None:
    import cupy

    import cuasync
    from cuasync._backends import get_backend
    from cuasync._interop.cai import from_cuda_array_interface
    from cuasync._launch import guard

    guard.POLICY.min_ns = 0.0
    print("guards:", sorted(get_backend().guards), flush=True)
    n = 1 << 20
    for label, arr in _sources(cupy, n).items():
        cupy.cuda.runtime.deviceSynchronize()
        src = from_cuda_array_interface(arr)
        dst = await cuasync.zeros((n,), "float32")
        try:
            with cuasync.cancel_scope():
                await _guarded_copy(dst, src)
            ok = np.array_equal(await dst.to_host(), cupy.asnumpy(arr))
            print(f"{label}: copied in a guarded region, right: {ok}", flush=True)
        except Exception as exc:  # (what this probe is for)
            print(f"{label}: {type(exc).__name__}: {exc}", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
