"""Launchers written for one kernel and one launch configuration: ``kernel[grid, block]``.

``kernel[1, 256](x, n)`` is on the path of every launch, and a loop over a parameter
plan costs more than the launch itself. With the native module, the launcher of a
configuration is its ``Launcher``, made once for the kernel's signature: it checks the
arguments against the launch plan (``_Launchable._make_plan``: tensors of the exact
dtype, ints and floats of the bound's type within range) and builds the op in C (the
op's ``__slots__`` filled directly). Anything else (another dtype, a partition, a
pointer, a numpy scalar, a value out of range) goes to the kernel's full checks
(``kernel._launch_checked``), which word the errors; the wrong number of arguments, or
parameters replaced since, to ``kernel._launch``. ``tests/kernels/test_kernel.py`` holds
it to the full checks.

With ``CUASYNC_NATIVE=off``, :func:`make_launcher` returns
None and ``kernel[grid, block]`` is a launcher calling ``kernel._launch``: the same
plan's checks in Python, then the full ones (the generic path).
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

from . import _config
from ._core.device import Device, _default_device, get_default_device
from ._native import NATIVE
from ._tensor import Tensor

__all__ = ["make_launcher"]


def make_launcher(
    kernel: Any,
    launch: type,
    grid: Any,
    block: Any,
    shared_mem: int,
    cancel: ContextVar[Any] | None = None,
) -> Callable[..., Any] | None:
    """The native launcher of ``kernel[grid, block, shared_mem]`` (``grid`` given);
    ``launch`` is the op class it builds; ``cancel``, for a kernel taking a cancel word:
    the cancel scope's ContextVar (each call appends the current scope's word, 0 outside
    any). None with ``CUASYNC_NATIVE=off``, or
    where the plan takes no fast path for one of the parameters (every launch then
    needs the full checks)."""
    if not _config.CONFIG.native:
        return None
    plan = kernel._plan_now()
    if any(not pointer and low > high for _, pointer, _, low, high in plan):
        return None
    entries = tuple(
        ("P", dtype, None, param, not param.const)
        if pointer
        else (_SCALAR_KINDS.get(type(high), "o"), low, high, param, False)
        for param, pointer, dtype, low, high in plan
    )
    launcher: Callable[..., Any] = NATIVE.Launcher(
        kernel=kernel, params=kernel.params, plan=entries, launch=launch, tensor=Tensor,
        grid=grid, block=block, shared_mem=shared_mem, default_device=get_default_device,
        name=f"{kernel.name}[{grid}, {block}, {shared_mem}]",
        devices=(_default_device, Device._instances), cancel=cancel,
    )  # fmt: skip
    return launcher


#: The native launcher's kind of a scalar parameter, by the type of its bounds.
_SCALAR_KINDS = {int: "i", float: "f"}
