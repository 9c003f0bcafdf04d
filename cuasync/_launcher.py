"""Launchers written for one kernel and one launch configuration: ``kernel[grid, block]``.

``kernel[1, 256](x, n)`` is on the path of every launch, and a loop over a parameter
plan costs more than the launch itself. The launcher of a configuration is Python code
generated once for the kernel's signature (as :mod:`dataclasses` writes ``__init__``):
for ``bump(float* x, int n)`` it is, in effect,

>>> def launcher(*args):
...     if len(args) == 2 and kernel.params is PARAMS:
...         a0, a1 = args
...         if type(a0) is Tensor and a0.dtype is D0 and type(a1) is T1 and L1 <= a1 <= H1:
...             device = a0._alloc.device
...             prepared = kernel._prepared.get(device.ordinal) or kernel._prepare_launch(device)
...             return Launch(kernel, prepared, device, [a0, a1], [(a0, P0)], a0, ...)
...         return kernel._launch_checked(args, grid, block, shared_mem)
...     return kernel._launch(args, grid, block, shared_mem)

Anything else (another dtype, a partition, a pointer, a numpy scalar, a value out of
range) goes to the full checks, which word the errors; the wrong number of arguments,
or parameters replaced since, to ``kernel._launch``. The accepted arguments are those
of the launch plan (``_Launchable._make_plan``), which ``tests/kernels/test_kernel.py`` holds to
the full checks.

With the native module, the launcher is its ``Launcher`` instead: the same checks and
the same op, made in C (the op's ``__slots__`` filled directly); the generated Python is
the fallback where the module is not built.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ._core.device import Device, _default_device, get_default_device
from ._native import NATIVE
from ._tensor import Tensor

__all__ = ["make_launcher"]


def make_launcher(
    kernel: Any, launch: type, grid: Any, block: Any, shared_mem: int, native: bool = True
) -> Callable[..., Any] | None:
    """The launcher of ``kernel[grid, block, shared_mem]`` (``grid`` given); ``launch``
    is the op class it builds; ``native``: the native module's where it is built. None
    where the plan takes no fast path for one of the parameters (every launch then
    needs the full checks)."""
    plan = kernel._plan_now()
    if any(not pointer and low > high for _, pointer, _, low, high in plan):
        return None
    name = f"{kernel.name}[{grid}, {block}, {shared_mem}]"
    if native and getattr(NATIVE, "Launcher", None) is not None:
        entries = tuple(
            ("P", dtype, None, param, not param.const)
            if pointer
            else (_SCALAR_KINDS.get(type(high), "o"), low, high, param, False)
            for param, pointer, dtype, low, high in plan
        )
        launcher: Callable[..., Any] = NATIVE.Launcher(
            kernel=kernel, params=kernel.params, plan=entries, launch=launch, tensor=Tensor,
            grid=grid, block=block, shared_mem=shared_mem, default_device=get_default_device,
            name=name, devices=(_default_device, Device._instances),
        )  # fmt: skip
        return launcher
    names: dict[str, Any] = {
        "kernel": kernel,
        "PARAMS": kernel.params,
        "Tensor": Tensor,
        "Launch": launch,
        "default_device": get_default_device,
        "GRID": grid,
        "BLOCK": block,
        "SHARED_MEM": shared_mem,
    }
    args = [f"a{i}" for i in range(len(plan))]
    checks: list[str] = []
    pointers: list[str] = []  # the tensor arguments
    pairs: list[str] = []  # (tensor, param) of each
    outputs: list[str] = []
    for i, (param, pointer, dtype, low, high) in enumerate(plan):
        a = args[i]
        names[f"P{i}"] = param
        if pointer:
            check = f"type({a}) is Tensor"
            if dtype is not None:
                names[f"D{i}"] = dtype
                check += f" and {a}.dtype is D{i}"
            pointers.append(a)
            pairs.append(f"({a}, P{i})")
            if not param.const:
                outputs.append(a)
        elif low <= high:  # the plan's scalars: of the bound's type, within the bounds
            names[f"T{i}"], names[f"L{i}"], names[f"H{i}"] = type(high), low, high
            check = f"type({a}) is T{i} and L{i} <= {a} <= H{i}"
        else:
            return None
        checks.append(check)
    # the output: the one non-const pointer argument, a tuple of several, or None
    output = f"({', '.join(outputs)})" if len(outputs) > 1 else "None"
    if len(outputs) == 1:
        output = outputs[0]
    tensors = f"[{', '.join(pairs)}]"
    if not pointers:
        where = ["device = default_device()"]
    else:
        where = [f"device = {pointers[0]}._alloc.device"]
        if len(pointers) > 1:
            others = " or ".join(f"{a}._alloc.device is not device" for a in pointers[1:])
            where += [
                f"tensors = {tensors}",
                "kernel._check_aliasing(tensors)",
                f"if {others}:",
                "    device = kernel._device_of(tensors)",
            ]
            tensors = "tensors"
    unpack = f"{', '.join(args)}, = args" if args else "pass"
    condition = " and ".join(checks) or "True"
    body = "\n".join(
        [
            "def launcher(*args):",
            f"    if len(args) == {len(plan)} and kernel.params is PARAMS:",
            f"        {unpack}",
            f"        if {condition}:",
            *(f"            {line}" for line in where),
            "            prepared = kernel._prepared.get(device.ordinal)",
            "            if prepared is None:",
            "                prepared = kernel._prepare_launch(device)",
            f"            return Launch(kernel, prepared, device, [{', '.join(args)}], "
            f"{tensors}, {output}, GRID, BLOCK, SHARED_MEM)",
            # the same checks as the plan's: go straight to the full ones
            "        return kernel._launch_checked(args, GRID, BLOCK, SHARED_MEM)",
            "    return kernel._launch(args, GRID, BLOCK, SHARED_MEM)",
        ]
    )
    exec(compile(body, f"<cuasync launcher of {kernel.name}>", "exec"), names)
    made: Callable[..., Any] = names["launcher"]
    made.__qualname__ = made.__name__ = name
    return made


#: The native launcher's kind of a scalar parameter, by the type of its bounds.
_SCALAR_KINDS = {int: "i", float: "f"}
