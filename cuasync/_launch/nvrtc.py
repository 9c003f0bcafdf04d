"""Compiling CUDA C++ with NVRTC (``cuda.bindings.nvrtc``); needs no GPU and no driver."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import KernelCompileError


@dataclass(frozen=True)
class Compiled:
    image: bytes  # cubin
    lowered_name: str  # the first name expression's
    log: str
    #: Every name expression's lowered name, in the order given.
    lowered_names: tuple[str, ...] = ()


def _check(result: object, call: str, log: str = "") -> None:
    code = int(result)  # type: ignore[call-overload]
    if code:
        raise KernelCompileError(f"{call} failed with nvrtcResult {code}", log)


def nvrtc_version() -> tuple[int, int]:
    nvrtc = _load()
    err, major, minor = nvrtc.nvrtcVersion()
    _check(err, "nvrtcVersion")
    return int(major), int(minor)


@functools.cache
def nvrtc_problem() -> str | None:
    """Why NVRTC cannot be used in this process, or ``None`` when it loads (asked once)."""
    try:
        _load()
    except KernelCompileError as exc:
        return str(exc)
    return None


def _load():  # type: ignore[no-untyped-def]
    try:
        from cuda.bindings import nvrtc
    except Exception as exc:  # pragma: no cover - cuda-bindings is a dependency
        raise KernelCompileError(
            f"NVRTC is not available ({exc}); install it with "
            "'pip install cuda-bindings nvidia-cuda-nvrtc'"
        ) from None
    try:
        nvrtc.nvrtcVersion()
    except Exception as exc:
        raise KernelCompileError(
            "NVRTC (libnvrtc) could not be loaded; install it with "
            f"'pip install nvidia-cuda-nvrtc' ({type(exc).__name__}: {exc})"
        ) from None
    return nvrtc


def _program_log(nvrtc: Any, prog: Any) -> str:
    err, size = nvrtc.nvrtcGetProgramLogSize(prog)
    _check(err, "nvrtcGetProgramLogSize")
    # NVRTC writes into the buffer it is given, so it must be mutable memory we own:
    # a ``bytes`` is immutable, and a one-byte one (an empty log) is CPython's shared
    # singleton, so writing into ``b" " * 1`` would turn every ``b" "`` into ``b"\x00"``.
    buf = bytearray(size)
    (err,) = nvrtc.nvrtcGetProgramLog(prog, buf)
    _check(err, "nvrtcGetProgramLog")
    return buf.rstrip(b"\0 ").decode(errors="replace")


_compiles = 0


def compiles() -> int:
    """How many compilations :func:`compile_cubin` has started in this process."""
    return _compiles


def compile_cubin(
    source: str, name_expression: str | Sequence[str], arch: str, flags: list[str]
) -> Compiled:
    """Compile ``source`` for ``arch`` (e.g. ``"sm_90"``) and return the cubin and lowered
    name; several name expressions (a source's kernels) are compiled in one program, and
    each one's lowered name returned (``lowered_names``)."""
    global _compiles
    _compiles += 1
    names = [name_expression] if isinstance(name_expression, str) else list(name_expression)
    nvrtc = _load()
    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), b"cuasync_kernel.cu", 0, [], [])
    _check(err, "nvrtcCreateProgram")
    try:
        for name in names:
            (err,) = nvrtc.nvrtcAddNameExpression(prog, name.encode())
            _check(err, "nvrtcAddNameExpression")
        options = [f"--gpu-architecture={arch}", *flags]
        (result,) = nvrtc.nvrtcCompileProgram(prog, len(options), [o.encode() for o in options])
        log = _program_log(nvrtc, prog)
        if int(result):
            what = repr(names[0]) if len(names) == 1 else f"{names!r} (one program)"
            raise KernelCompileError(
                f"NVRTC could not compile {what} for {arch}; its log follows", log
            )
        err, size = nvrtc.nvrtcGetCUBINSize(prog)
        _check(err, "nvrtcGetCUBINSize", log)
        image = bytearray(size)
        (err,) = nvrtc.nvrtcGetCUBIN(prog, image)
        _check(err, "nvrtcGetCUBIN", log)
        lowered_names = []
        for name in names:
            err, lowered = nvrtc.nvrtcGetLoweredName(prog, name.encode())
            _check(err, "nvrtcGetLoweredName", log)
            lowered_names.append(lowered.decode() if isinstance(lowered, bytes) else str(lowered))
        return Compiled(bytes(image), lowered_names[0], log, tuple(lowered_names))
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
