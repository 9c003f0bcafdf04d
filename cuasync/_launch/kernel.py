"""User kernels: CUDA C++ compiled with NVRTC (or a cubin/PTX you bring), launched as ops.

>>> def saxpy_numpy(a, x, y, n): y[:n] += a * x[:n]
>>> saxpy = cuasync.Kernel(SOURCE, "saxpy", emulate=saxpy_numpy)
>>> y = await saxpy[(n + 255) // 256, 256](2.0, x, y, n)

Arguments are checked against the C signature before anything is enqueued: tensors
(and views and partitions) for pointers, Python scalars converted to the parameter's
type, :class:`DevicePointer` for raw addresses. A lazy op producing a tensor may stand
for a tensor: it runs first, in the launch's submission (:class:`_LaunchOfOps`).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import struct
import sys
import threading
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic

import numpy as np

from .. import kernel_cache
from .._backends import get_backend
from .._backends._params import bfloat16_bits, fp8_bits
from .._backends.base import PreparedKernel
from .._cancel_var import SCOPE, current_word, detached
from .._config import debug_origins
from .._core import express
from .._core.context import ExecutionContext
from .._core.device import Device, Stream, get_default_device
from .._core.loops import in_running_loop
from .._core.op import DeviceFuture, DeviceOp, _NativeLaunchBase, _origin
from .._core.output import Output, _Ready
from .._dtypes import SUPPORTED, dtype_name
from .._first_use import Unprepared
from .._launcher import make_launcher
from .._native import NATIVE, PROCESS, KernelCore, LaunchCore
from .._tensor import Tensor, is_size, partly_overlap
from .._tensor import methods as tensor_methods
from ..errors import AliasingError, ArgumentError, LaunchError
from .nvrtc import compile_cubin, nvrtc_version
from .partition import Partition
from .signature import Param, parse_params, with_cancel_word

__all__ = ["CompileOptions", "DevicePointer", "Kernel", "program_kernels"]

Dim3 = tuple[int, int, int]
#: A launch's ``grid`` or ``block`` as users give one: an int (or numpy integer), or a
#: tuple or list of 1 to 3 of them.
Dim3Like = int | np.integer[Any] | tuple[int | np.integer[Any], ...] | list[int]

if TYPE_CHECKING:
    from typing_extensions import TypeVar

    from .._core.completion import Completion

    #: What a launch produces: the argument bound to the kernel's non-const pointer
    #: parameter (a Tensor or Partition), a tuple of them when there are several, None
    #: when there are none. The C signature decides, so it is Any unless a user states it
    #: (``k: cuasync.Kernel[cuasync.Tensor] = cuasync.Kernel(src, "scale")``).
    R = TypeVar("R", default=Any)
else:
    from typing import TypeVar

    R = TypeVar("R")

#: A launch op of some type (:func:`launch_fields` gives back the one it is given).
LaunchOp = TypeVar("LaunchOp", bound="_Launch")

#: Launchers cached per kernel (by exact-int launch config) before the cache is cleared.
_LAUNCHER_CACHE_SIZE = 256


class DevicePointer(int):
    """A device address passed to a kernel's pointer parameter; it never owns memory.

    ``DevicePointer(address)`` is a raw address cuasync does not track. The pointer of
    :meth:`Tensor.device_pointer` is typed and tracked: ``dtype`` is checked against the
    parameter's pointee, and a launch taking it is ordered after the tensor's other work
    (a write for a non-const parameter) and keeps ``tensor`` alive until the kernel ran.

    >>> p = x.device_pointer()            # DevicePointer(0x7f...), p.dtype float32
    >>> await k[grid, block](1.0, p, y, n)
    """

    dtype: np.dtype[Any] | None
    tensor: Tensor | None

    def __new__(cls, address: int, dtype: Any = None) -> DevicePointer:
        self = super().__new__(cls, address)
        self.dtype = None if dtype is None else np.dtype(dtype)
        self.tensor = None
        return self

    @classmethod
    def _of(cls, tensor: Tensor) -> DevicePointer:
        p = cls(tensor.ptr, tensor.dtype)
        p.tensor = tensor
        return p

    def __repr__(self) -> str:
        typed = "" if self.dtype is None else f", {dtype_name(self.dtype)}"
        return f"DevicePointer({int(self):#x}{typed})"


#: The pointer cuasync passes for a pointer parameter a launch leaves unused (a
#: reduction's workspace where it has none): no tensor, nothing to order; a launcher
#: (``kernel[grid, block]``) takes this very object as such (``PROCESS.kernel_null``).
NULL_POINTER = DevicePointer(0)


@dataclass(frozen=True)
class CompileOptions:
    """NVRTC options; part of the compile cache key.

    ``opt_level``: ptxas optimization level, 0..3; ``line_info``: source line info for
    profilers; ``debug``: device debug info (slow code); ``max_registers``: a cap on
    registers per thread (1..255) or None; ``defines``: preprocessor macros, a dict or
    ``(name, value)`` pairs; ``extra``: more NVRTC option strings, passed last.

    >>> cuasync.CompileOptions(opt_level=3, defines={"TILE": 64}, max_registers=64)
    """

    opt_level: int | np.integer[Any] = 3
    line_info: bool = False
    debug: bool = False
    max_registers: int | np.integer[Any] | None = None
    #: ``{name: value}`` or ``((name, value), ...)``; values are written with ``str()``.
    defines: Sequence[tuple[str, object]] | dict[str, object] = ()
    extra: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        if isinstance(self.defines, dict):
            object.__setattr__(
                self, "defines", tuple(sorted((str(k), str(v)) for k, v in self.defines.items()))
            )
        elif not isinstance(self.defines, (tuple, list)) or not all(
            isinstance(d, tuple) and len(d) == 2 for d in self.defines
        ):
            raise ArgumentError(
                f"defines must be a dict or a tuple of (name, value) pairs, got {self.defines!r}"
            )
        else:
            object.__setattr__(self, "defines", tuple((str(k), str(v)) for k, v in self.defines))
        if not is_size(self.opt_level) or not 0 <= self.opt_level <= 3:
            raise ArgumentError(f"opt_level must be an int in 0..3, got {self.opt_level!r}")
        registers = self.max_registers
        if registers is not None and (not is_size(registers) or not 1 <= registers <= 255):
            raise ArgumentError(
                f"max_registers must be None or an int in 1..255 (registers per thread), got "
                f"{registers!r}"
            )
        # a bare string would become one flag per character
        if isinstance(self.extra, str) or not all(isinstance(f, str) for f in self.extra):
            raise ArgumentError(
                f"extra must be a tuple of NVRTC option strings, got {self.extra!r}; "
                'pass ("-G",), not "-G"'
            )
        object.__setattr__(self, "opt_level", int(self.opt_level))
        object.__setattr__(self, "extra", tuple(self.extra))

    def flags(self) -> list[str]:
        """The NVRTC command-line options these settings stand for, ``extra`` last.

        >>> CompileOptions(opt_level=2, max_registers=64).flags()
        ['--ptxas-options=-O2', '--maxrregcount=64']
        """
        out = [f"--ptxas-options=-O{self.opt_level}"]
        if self.line_info:
            out.append("--generate-line-info")
        if self.debug:
            out.append("--device-debug")
        if self.max_registers is not None:
            out.append(f"--maxrregcount={self.max_registers}")
        out += [f"-D{k}={v}" for k, v in self.defines]  # type: ignore[str-unpack]
        return out + list(self.extra)


#: CUDA's limits on each launch dimension (x, y, z), the same on every architecture.
_DIM_LIMITS: dict[str, Dim3] = {"grid": (2**31 - 1, 65535, 65535), "block": (1024, 1024, 64)}


def _dim3(value: Any, argument: str) -> Dim3:
    """``grid`` or ``block`` as three positive sizes within CUDA's limits, or a LaunchError.

    An int or numpy integer, or a tuple or list of 1 to 3 of them (bools are not sizes).
    """
    limits = _DIM_LIMITS[argument]
    if type(value) is int and 1 <= value <= limits[0]:
        return (value, 1, 1)
    expected = f"{argument} must be a positive int or a tuple of 1 to 3 positive ints"
    dims = (value,) if is_size(value) else value
    if not isinstance(dims, (tuple, list)) or not 1 <= len(dims) <= 3:
        raise LaunchError(f"{expected}, got {type(value).__name__} {value!r}"[:200])
    for axis, d in zip("xyz", dims, strict=False):
        if not is_size(d) or d < 1:
            where = "" if dims is not value else f" for {axis}"
            raise LaunchError(f"{expected}, got {type(d).__name__} {d!r}{where}"[:200])
    padded = tuple(int(d) for d in dims) + (1,) * (3 - len(dims))
    for axis, d, limit in zip("xyz", padded, limits, strict=True):
        if d > limit:
            raise LaunchError(
                f"{argument}={value!r}: {axis} is {d}, above CUDA's limit of {limit} for "
                f"{argument} {axis}"
            )
    return padded  # type: ignore[return-value]


def _cacheable(config: tuple[Any, ...]) -> bool:
    """Whether a launch config is made of exact ints (or None), so it can key the cache.

    ``(1.0, 256) == (1, 256)`` and ``(True, 32) == (1, 32)`` (equal and hash-equal), so a
    float or bool config must never be looked up in a cache of int ones: it would get
    their already-validated launcher.
    """
    for member in config:
        if type(member) is int or member is None:
            continue
        if type(member) is not tuple:
            return False
        for d in member:
            if type(d) is not int:
                return False
    return True


@functools.cache
def _int_bounds(dtype: np.dtype[Any]) -> tuple[int, int]:
    info = np.iinfo(dtype)
    return int(info.min), int(info.max)


#: The largest finite value of each floating-point parameter type; larger finite values
#: may still round down to it (or overflow to inf: see _fits_float).
_FLOAT_LIMITS: dict[str, float] = {
    "float16": 65504.0,
    "bfloat16": math.ldexp(2 - 2.0**-7, 127),
    "float32": math.ldexp(2 - 2.0**-23, 127),
    "float64": sys.float_info.max,
    "float8_e4m3fn": 448.0,
    "float8_e5m2": 57344.0,
}

#: :data:`_FLOAT_LIMITS` by numpy dtype, filled as dtypes are met (bfloat16 and FP8 exist
#: only once ml_dtypes is imported, at their first use); None for a type that is no float.
_FLOAT_MAX: dict[np.dtype[Any], float | None] = {}


def _float_max(dtype: np.dtype[Any]) -> float | None:
    """The largest finite value of the float ``dtype``; None where it is no float."""
    try:
        return _FLOAT_MAX[dtype]
    except KeyError:
        limit = _FLOAT_MAX[dtype] = _FLOAT_LIMITS.get(dtype_name(dtype))
        return limit


def _fits_float(value: float, dtype: np.dtype[Any]) -> bool:
    """Whether a finite ``value`` stays finite once rounded to the float ``dtype``."""
    name = dtype_name(dtype)
    if name == "float64":
        return math.isfinite(value)
    if name == "bfloat16":
        return bfloat16_bits(value) & 0x7F80 != 0x7F80
    if name == "float8_e4m3fn":
        return fp8_bits(value, name) & 0x7F != 0x7F  # an overflow is NaN
    if name == "float8_e5m2":
        return fp8_bits(value, name) & 0x7C != 0x7C
    try:  # struct raises OverflowError exactly when the rounded value would be inf
        struct.pack("<e" if name == "float16" else "<f", value)
    except OverflowError:
        return False
    return True


def _is_inf(value: Any) -> bool:
    """Whether a real number is itself infinite (ints never are, however large)."""
    return not isinstance(value, (int, np.integer)) and bool(np.isinf(value))


class _Launchable(KernelCore, Generic[R]):
    """What ``Kernel`` and ``Module.kernel`` share: checking arguments and enqueuing launches.

    It is the backend's :class:`~cuasync._backends.base.KernelCode`: the backend prepares
    it once per device (compiles and loads it, or readies its numpy twin) and launches it.
    Its ``params``, prepared kernels, launchers and launch plan are its native base's
    fields (``KernelCore``), which the native launchers read; ``kernel[grid, block]`` is
    the base's too (a lookup of the launchers in C, :meth:`_configure` on a miss).
    """

    name: str
    params: list[Param]
    emulate: Callable[..., object] | None
    #: The handle of the loaded module holding the function, or 0 (compile the source).
    module_handle: int = 0
    #: The handle of a borrowed function (``Module.kernel_from_handle``), or 0.
    function_handle: int = 0
    #: Whether the last parameter is the hidden cancel word (``Param.hidden``): launches
    #: append the current cancel scope's word (:mod:`cuasync._launch.cancel`).
    _cancel: bool = False
    _prepared: dict[int, PreparedKernel]

    if TYPE_CHECKING:

        def __getitem__(self, config: Any) -> Callable[..., DeviceOp[R]]:
            """``kernel[grid, block]`` or ``kernel[grid, block, shared_mem]`` → a launcher
            (the native base's; see :meth:`_configure`)."""

    def compile_image(self, arch: str) -> tuple[bytes, str]:
        raise NotImplementedError

    def check_compiles(self, arch: str) -> None:
        """Compile for ``arch`` only to find errors (:meth:`Kernel.check_compiles`)."""
        self.compile_image(arch)

    def _prepare(self, device: Device) -> PreparedKernel:
        """This kernel made launchable on ``device`` by the backend, once per device."""
        prepared = self._prepared.get(device.ordinal)
        if prepared is None:
            prepared = get_backend().prepare_kernel(device.ordinal, self)
            prepared.kernel = self
            self._prepared[device.ordinal] = prepared
        return prepared

    def _prepare_launch(self, device: Device) -> PreparedKernel | Unprepared:
        """What a launch op built now holds (the launchers call it when the kernel is not
        prepared for ``device``): inside a running event loop, a kernel with a source to
        compile stays :class:`Unprepared`, for the op's ``await`` to prepare it on the
        compile thread (:mod:`cuasync._first_use`); else it is prepared now."""
        prepared = self._prepared.get(device.ordinal)
        if prepared is not None:
            return prepared
        if self.module_handle or self.function_handle or not in_running_loop():
            return self._prepare(device)
        return Unprepared(self, device)

    def _configure(self, config: Any) -> Callable[..., DeviceOp[R]]:
        """``kernel[config]`` where the native lookup (two ints, a cached launcher) has
        none: the launcher of ``kernel[grid, block]`` or ``kernel[grid, block,
        shared_mem]``, checked, made and cached."""
        cacheable = type(config) is tuple and (
            # kernel[int, int] checked inline: this is on every launch
            (len(config) == 2 and type(config[0]) is int and type(config[1]) is int)
            or _cacheable(config)
        )
        if cacheable:
            cache = self._launcher_cache  # (self._launchers, one frame less)
            cached = None if cache is None else cache.get(config)
            if cached is not None:
                return cached
        if not isinstance(config, tuple) or not 2 <= len(config) <= 3:
            raise LaunchError(
                "use kernel[grid, block] or kernel[grid, block, shared_mem], got "
                f"kernel[{config!r}]"[:200]
            )
        grid, block, *rest = config
        spec = self._spec(grid, block, rest[0] if rest else 0)
        op_type = _CancellableLaunch if self._cancel else _Launch
        cancel = SCOPE if self._cancel else None
        launcher = make_launcher(self, op_type, *spec, cancel) if spec[0] is not None else None
        if launcher is None:

            def launch(*args: Any) -> DeviceOp[R]:
                return self._launch(args, *spec)

            launcher = _with_word(launch) if self._cancel else launch

        if cacheable:
            cache = self._launchers
            if len(cache) >= _LAUNCHER_CACHE_SIZE:  # grids computed per call: stay bounded
                cache.clear()
            cache[config] = launcher
        return launcher

    @property
    def _launchers(self) -> dict[Any, Callable[..., DeviceOp[R]]]:
        cache: dict[Any, Callable[..., DeviceOp[R]]] | None = self._launcher_cache
        if cache is None:
            cache = self._launcher_cache = {}
        return cache

    @staticmethod
    def _spec(grid: Any, block: Any, shared_mem: Any) -> tuple[Dim3 | None, Dim3, int]:
        if not is_size(shared_mem) or shared_mem < 0:
            raise LaunchError(
                f"shared_mem must be an int >= 0 (bytes of dynamic shared memory), got "
                f"{type(shared_mem).__name__} {shared_mem!r}"[:200]
            )
        block3 = _dim3(block if block is not None else 128, "block")
        if block3[0] * block3[1] * block3[2] > 1024:
            raise LaunchError(f"block={block3} has more than 1024 threads")
        return (None if grid is None else _dim3(grid, "grid")), block3, int(shared_mem)

    def launch(
        self,
        *args: Any,
        grid: Dim3Like | None = None,
        block: Dim3Like | None = None,
        shared_mem: int | np.integer[Any] = 0,
    ) -> DeviceOp[R]:
        """An op launching the kernel; its output is the tensor(s) bound to non-const pointers.

        ``grid`` may be omitted when a partition argument gives it (one block per tile);
        ``block`` defaults to 128 threads.
        """
        if self._cancel:  # the hidden word: the current scope's (refilled when executed)
            args = (*args, current_word())
        return self._launch(args, *self._spec(grid, block, shared_mem))

    def _launch(
        self, args: tuple[Any, ...], grid: Dim3 | None, block: Dim3, shared_mem: int
    ) -> DeviceOp[R]:
        plan = self._plan_now()
        if grid is not None and len(args) == len(plan):
            # The common launch first: tensors of the exact dtype, ints and floats in range
            # (the checks of _convert and _scalar, made once per parameter into the plan).
            # Anything else (a partition, a pointer, a numpy scalar, one value out of range)
            # breaks out to the full checks below, which also word the errors.
            converted: list[Any] = []
            tensors: list[tuple[Tensor, Param]] = []
            outputs: list[Any] = []
            for (param, pointer, dtype, low, high), arg in zip(plan, args):  # noqa: B905
                if pointer:
                    if type(arg) is not Tensor or (dtype is not None and arg.dtype is not dtype):
                        break
                    tensors.append((arg, param))
                    if not param.const:
                        outputs.append(arg)
                elif type(arg) is not high.__class__ or not low <= arg <= high:
                    break  # (high is the bound's type: int bounds take ints, float ones floats)
                converted.append(arg)
            else:
                if tensors:
                    device = tensors[0][0]._alloc.device
                    if len(tensors) > 1:
                        self._check_aliasing(tensors)
                        for t, _ in tensors:
                            if t._alloc.device is not device:
                                device = self._device_of(tensors)  # raises
                else:
                    device = get_default_device()
                return self._launch_op(device, converted, tensors, outputs, grid, block, shared_mem)
        return self._launch_checked(args, grid, block, shared_mem)

    def _plan_now(self) -> tuple[tuple[Param, bool, Any, Any, Any], ...]:
        """The plan of the current ``params`` (see :meth:`_make_plan`)."""
        made = self._plan
        return made[1] if made is not None and made[0] is self.params else self._make_plan()

    def _make_plan(self) -> tuple[tuple[Param, bool, Any, Any, Any], ...]:
        """Per parameter, what the fast path of :meth:`_launch` accepts without the full
        checks: ``(param, pointer, dtype, low, high)``; a scalar passes as it is when it
        has the type of ``high`` and lies in ``low..high`` (ints for integer parameters,
        floats within the finite range for float ones; nothing for the rest).

        Made for the current ``params`` (made again if they are replaced). ``dtype`` is
        cuasync's own object for that dtype, which tensors carry: an equal dtype from
        elsewhere (an unpickled kernel's) would fail the fast path's identity check.
        """
        plan = []
        params = self.params
        for param in params:
            dtype = param.dtype
            if dtype is not None:
                dtype = SUPPORTED.get(dtype_name(dtype), dtype)
            low: Any = 1
            high: Any = 0  # an empty range: the full checks
            if not param.pointer and dtype is not None:
                limit = _float_max(dtype)
                if limit is not None:
                    low, high = -limit, limit
                elif dtype.kind in "iu":
                    low, high = _int_bounds(dtype)
            plan.append((param, param.pointer, dtype, low, high))
        frozen = tuple(plan)
        self._plan = (params, frozen)
        return frozen

    def _launch_checked(
        self, args: tuple[Any, ...], grid: Dim3 | None, block: Dim3, shared_mem: int
    ) -> DeviceOp[R]:
        if len(args) != len(self.params):
            shown = [p for p in self.params if not p.hidden]
            sig = ", ".join(p.describe() for p in shown)
            given = len(args) - (len(self.params) - len(shown))
            raise LaunchError(f"{self.name}() takes {len(shown)} argument(s) ({sig}), got {given}")
        if any(isinstance(a, DeviceOp) for a in args):  # lazy ops in place of tensors
            return _LaunchOfOps(self, args, grid, block, shared_mem)
        converted, tensors, outputs, partitions = self._convert(args)
        device = self._device_of(tensors)
        grid3 = self._grid(grid, partitions) if partitions or grid is None else grid
        return self._launch_op(device, converted, tensors, outputs, grid3, block, shared_mem)

    def _launch_op(
        self,
        device: Device,
        converted: list[Any],
        tensors: list[tuple[Tensor, Param]],
        outputs: list[Any],
        grid: Dim3,
        block: Dim3,
        shared_mem: int,
    ) -> DeviceOp[R]:
        """The launch op of checked arguments; its output is the one output argument, a
        tuple of several, or None."""
        output: Any = None
        if len(outputs) == 1:
            output = outputs[0]
        elif outputs:
            output = tuple(outputs)
        prepared = self._prepared.get(device.ordinal) or self._prepare_launch(device)
        op_type = _CancellableLaunch if self._cancel else _Launch
        return op_type(self, prepared, device, converted, tensors, output, grid, block, shared_mem)

    def _where(self, param: Param) -> str:
        return f"{self.name}() parameter {param.name!r} ({param.describe()})"

    # -- argument checking -------------------------------------------------------------
    def _convert(
        self, args: Sequence[Any]
    ) -> tuple[list[Any], list[tuple[Tensor, Param]], list[Any], list[tuple[Partition, Param]]]:
        converted: list[Any] = []
        tensors: list[tuple[Tensor, Param]] = []
        outputs: list[Any] = []
        partitions: list[tuple[Partition, Param]] = []
        for param, arg in zip(self.params, args, strict=True):
            if param.pointer:
                tensor = arg.tensor if isinstance(arg, Partition) else arg
                if type(tensor) is Tensor or isinstance(tensor, Tensor):
                    if param.dtype is not None and tensor.dtype != param.dtype:
                        raise LaunchError(
                            f"{self._where(param)} expects {dtype_name(param.dtype)} data, got a "
                            f"{dtype_name(tensor.dtype)} tensor; convert it first"
                        )
                    tensors.append((tensor, param))
                    if isinstance(arg, Partition):
                        partitions.append((arg, param))
                    if param.is_output:
                        outputs.append(arg)
                    converted.append(tensor)
                elif isinstance(arg, DevicePointer):
                    if not 0 <= arg < 1 << 64:
                        raise LaunchError(
                            f"{self._where(param)}: {arg!r} is not a 64-bit device address"
                        )
                    typed = getattr(arg, "dtype", None)
                    if typed is not None and param.dtype is not None and typed != param.dtype:
                        raise LaunchError(
                            f"{self._where(param)} expects {dtype_name(param.dtype)} data, got "
                            f"a pointer to {dtype_name(typed)}"
                        )
                    owner = getattr(arg, "tensor", None)
                    if owner is not None:  # ordered and kept alive like the tensor itself
                        tensors.append((owner, param))
                    converted.append(int(arg))
                else:
                    raise LaunchError(
                        f"{self._where(param)} expects a tensor, view, partition or an op "
                        "producing a tensor (or a cuasync.lowlevel.DevicePointer "
                        f"for a raw address), got {type(arg).__name__} {arg!r}"[:300]
                    )
            else:
                converted.append(self._scalar(param, arg))
        if len(tensors) > 1:
            self._check_aliasing(tensors)
        return converted, tensors, outputs, partitions

    def _check_aliasing(self, tensors: list[tuple[Tensor, Param]]) -> None:
        """Refuse a written (non-const pointer) tensor partly overlapping another argument."""
        for i, (w, wp) in enumerate(tensors):
            if wp.const:
                continue
            for j, (t, p) in enumerate(tensors):
                if j != i and (j > i or p.const) and partly_overlap(w, t):
                    raise AliasingError(
                        f"{self.name}() parameter {wp.name!r} writes memory that parameter "
                        f"{p.name!r} also uses ({w.shape}/{w.strides} and {t.shape}/"
                        f"{t.strides} views of one allocation); the result would be "
                        "undefined. Pass the very same view for in-place work, or copy one "
                        "of them first with .dup()"
                    )

    def _scalar(self, param: Param, arg: Any) -> Any:
        """``arg`` as a plain Python value of the parameter's C type, or a LaunchError.

        Nothing is clamped or wrapped: ints must be in range, and a finite number that
        would overflow a float parameter to inf is refused (inf and nan themselves pass).
        """
        dtype = param.dtype
        if dtype is None:
            raise LaunchError(
                f"{self._where(param)}: cuasync does not know the C type {param.ctype!r}"
            )
        t = type(arg)
        limit = _float_max(dtype)
        if limit is not None and (t is float or t is int):
            if t is float and -limit <= arg <= limit:
                return arg
            return self._real(param, arg, dtype)
        kind = dtype.kind
        if kind in "iu" and t is int:
            value = arg
        elif isinstance(arg, (Tensor, Partition, DevicePointer)):
            raise LaunchError(f"{self._where(param)} is a scalar, got {type(arg).__name__}")
        elif kind == "b" and isinstance(arg, (bool, np.bool_)):
            return bool(arg)
        elif kind in "iu" and isinstance(arg, np.integer):
            value = int(arg)
        elif limit is not None and isinstance(arg, (np.integer, np.floating)):
            return self._real(param, arg, dtype)
        elif (
            kind == "c"
            and isinstance(arg, (int, float, complex, np.number))
            and not isinstance(arg, bool)
        ):
            part = SUPPORTED["float32" if dtype_name(dtype) == "complex64" else "float64"]
            return complex(
                self._real(param, arg.real, part, "the real part "),
                self._real(param, arg.imag, part, "the imaginary part "),
            )
        else:
            raise LaunchError(
                f"{self._where(param)} expects a {dtype_name(dtype)} scalar, got "
                f"{type(arg).__name__} {arg!r}"[:300]
            )
        low, high = _int_bounds(dtype)
        if not low <= value <= high:
            raise LaunchError(
                f"{self._where(param)}: {value} does not fit in {dtype_name(dtype)} ({low}..{high})"
            )
        return value

    def _real(self, param: Param, arg: Any, dtype: np.dtype[Any], what: str = "") -> float:
        """A real ``arg`` as a float that fits the float ``dtype`` (or is nan/inf as given)."""
        try:
            value = float(arg)
        except OverflowError:  # an int beyond float64
            value = math.inf
        limit = _float_max(dtype)
        assert limit is not None  # (called for float parameters only)
        name = dtype_name(dtype)
        if name == "float8_e4m3fn" and not -limit <= value <= limit and value == value:
            if math.isfinite(value) and _fits_float(value, dtype):
                return value  # rounds down to 448
            raise LaunchError(
                f"{self._where(param)}: {what}{arg!r} does not fit in float8_e4m3fn, which has "
                f"no infinity (it would become NaN; the largest value is {limit:.6g})"
            )
        if -limit <= value <= limit or value != value or _is_inf(arg):
            return value
        if math.isfinite(value) and _fits_float(value, dtype):
            return value  # rounds down to the largest finite value, as C would
        raise LaunchError(
            f"{self._where(param)}: {what}{arg!r} does not fit in {name} (it would "
            f"become inf; the largest finite {name} is {limit:.6g}); pass a "
            "smaller value, or inf itself if that is what you mean"
        )

    @staticmethod
    def _device_of(tensors: list[tuple[Tensor, Param]]) -> Device:
        if not tensors:
            return get_default_device()
        first = tensors[0][0].device
        if all(t.device is first for t, _ in tensors):
            return first
        devices = {t.device for t, _ in tensors}
        if len(devices) > 1:
            listing = ", ".join(f"{p.name} on device {t.device.ordinal}" for t, p in tensors)
            raise LaunchError(f"kernel arguments live on different devices ({listing})")
        return devices.pop() if devices else get_default_device()

    def _grid(self, grid: Dim3 | None, partitions: list[tuple[Partition, Param]]) -> Dim3:
        if grid is None:
            grids = {p.launch_grid for p, _ in partitions}
            if not grids:
                raise LaunchError(
                    f"{self.name}(): pass grid= (or kernel[grid, block]); it can only be inferred "
                    "from a partition argument"
                )
            if len(grids) > 1:
                raise LaunchError(
                    f"partitions with different launch grids {sorted(grids)} in one launch; "
                    "pass grid= explicitly"
                )
            return grids.pop()
        for p, param in partitions:
            p.check_grid(grid, param.name)
        return grid

    # -- enqueuing --------------------------------------------------------------------------
    def _enqueue_trusted(
        self,
        ctx: ExecutionContext,
        grid: Dim3,
        block: Dim3,
        args: Sequence[Any],
        *,
        scoped: bool = True,
    ) -> None:
        """Launch in ``ctx`` with arguments cuasync built itself (built-in and generated
        kernels): tensors of the right dtype and device, no aliasing the launch could
        see (or a null ``DevicePointer``). Only scalars are converted; no op object is
        made. A kernel taking a cancel word gets the current scope's where ``scoped``
        (else 0: it always runs).

        >>> kernel._enqueue_trusted(ctx, (blocks, 1, 1), (256, 1, 1), (out, x, n))
        """
        prepared = self._prepared.get(ctx.device.ordinal) or self._prepare(ctx.device)
        # (a graph being captured must not bake in one scope's word)
        live = scoped and not ctx.stream._capturing
        converted, tensors = self._trusted_worded(args, ctx.device.ordinal, live)
        if tensors:
            self._declare(ctx, tensors)
        get_backend().launch_kernel(
            prepared, grid, block, 0, ctx.stream.handle, converted, ctx.error_box
        )

    def _trusted_worded(
        self, args: Sequence[Any], ordinal: int, live: bool
    ) -> tuple[list[Any], list[tuple[Tensor, Param]]]:
        """:meth:`_trusted` of ``args`` and, where the kernel takes a cancel word, the
        current scope's on device ``ordinal`` (0 where not ``live``: it always runs)."""
        if self._cancel:
            args = (*args, current_word(ordinal) if live else 0)
        return self._trusted(args)

    def _trusted(self, args: Sequence[Any]) -> tuple[list[Any], list[tuple[Tensor, Param]]]:
        """``args`` (cuasync's own) as the launch passes them, and the tensors among them
        with their parameters: scalars in range pass as they are (see :meth:`_make_plan`),
        others are converted; a null ``DevicePointer`` is no tensor (nothing to order)."""
        plan = self._plan_now()
        if len(plan) != len(args):
            raise LaunchError(f"{self.name}: {len(args)} arguments for {len(plan)} parameters")
        converted = []
        tensors = []
        for (param, pointer, _, low, high), arg in zip(plan, args):  # noqa: B905
            if pointer:
                if not isinstance(arg, int):
                    tensors.append((arg, param))
                converted.append(arg)
            elif type(arg) is high.__class__ and low <= arg <= high:
                converted.append(arg)
            else:
                converted.append(self._scalar(param, arg))
        return converted, tensors

    def _declare(self, ctx: ExecutionContext, tensors: Iterable[tuple[Tensor, Param]]) -> None:
        for tensor, param in tensors:
            if param.const:
                ctx.read(tensor._alloc, param.name)
            else:
                ctx.write(tensor._alloc, param.name)


# The kernel's Python paths the native core calls (kernel[config] on a miss of the
# launcher cache, and a Launcher's launches its plan does not take), handed over once.
PROCESS.kernel_configure = _Launchable._configure
PROCESS.kernel_launch = _Launchable._launch
PROCESS.kernel_launch_checked = _Launchable._launch_checked
PROCESS.kernel_check_aliasing = _Launchable._check_aliasing
PROCESS.kernel_device_of = _Launchable._device_of
PROCESS.kernel_prepare = _Launchable._prepare_launch
PROCESS.kernel_null = NULL_POINTER


class _Launch(_NativeLaunchBase[Any], LaunchCore):
    """One kernel launch: the arguments are checked, the kernel prepared for ``device``.

    Its fields are the native base's (``LaunchCore``), which the native core reads."""

    __slots__ = ()

    def __init__(
        self,
        kernel: _Launchable[Any],
        prepared: PreparedKernel | Unprepared,
        device: Device,
        args: Sequence[Any],
        tensors: Sequence[tuple[Tensor, Param]],
        output: Any,
        grid: Dim3,
        block: Dim3,
        shared_mem: int,
    ) -> None:
        self._consumed = False
        self._device = device
        self._kernel = kernel
        self._prepared = prepared
        self._args = tuple(args)  # (tuples, as the native launcher makes them)
        self._tensors = tuple(tensor for tensor, _ in tensors)
        self._params = tuple(param for _, param in tensors)
        self._writes = tuple(not param.const for param in self._params)
        self._output = output
        self._grid = grid
        self._block = block
        self._shared_mem = shared_mem

    def _trace_name(self) -> str:
        return self._prepared.name

    def _first_use(self, device: Device) -> Sequence[tuple[Any, Device]]:
        """Its kernel, where it is not prepared for ``device`` (the launch built in a
        loop before it was; ``warmup(launch, devices=...)``: another device)."""
        kernel = self._prepared.kernel
        if kernel is None or device.ordinal in kernel._prepared:
            return ()
        return ((kernel, device),)

    def _start(self, stream: Stream, notify: bool) -> Completion:
        if notify:  # a future: the express path, when it can take the launch
            comp = express.submit(self, stream)
            if comp is not None:
                return comp
        return DeviceOp._start(self, stream, notify)

    def _sync(self, stream: Stream) -> Any:
        return express.sync_launch(self, stream)

    def _express_launch(self, stream: Stream) -> Any:
        """Handed to asyncio as a future, the core launches it as it is (its kernel
        prepared by then: a first use was prepared on the compile thread)."""
        prepared = self._prepared
        if prepared.__class__ is Unprepared:
            self._prepared = prepared.resolve()
        return self

    def submit(self) -> DeviceFuture[Any]:
        """See :meth:`DeviceOp.submit`: one native call where the express core takes it."""
        if self._consumed:
            self._take()  # raises
        return express.submit_future(self, self._pick_stream())

    #: See :meth:`DeviceOp.submit_on`: one native call where the express core takes it.
    submit_on = express.submit_future

    #: See :meth:`DeviceOp.__await__`; a launch takes the express path when it can: the
    #: native base's (``LaunchCore``'s ``am_await``: ``PROCESS.launch_await``, the native
    #: ``LaunchAwait``), named here so that it comes before ``DeviceOp``'s.
    __await__ = LaunchCore.__await__

    #: Handed to asyncio as a future: ``LaunchAwait.hand_over`` (see
    #: :class:`~cuasync._core.op_future.AsyncioFuture`), the await's preamble in C.
    _hand_over = express.hand_over_launch

    def _enqueue(self, ctx: ExecutionContext) -> Output[Any]:
        kernel = self._kernel
        prepared = self._prepared
        if ctx.device is not self._device:  # run on another device's stream than built for
            prepared = kernel._prepare(ctx.device)
        elif prepared.__class__ is Unprepared:  # built in a loop, executed otherwise
            prepared = self._prepared = prepared.resolve()
        if self._tensors:
            kernel._declare(ctx, zip(self._tensors, self._params, strict=True))
        if kernel._cancel and ctx.fuse is not self:
            # enqueued inside another op's submission: the word of the scope that one is
            # executed in; none in a graph. (Started as a whole, it carries its own, taken
            # where it was executed or handed to asyncio: ``_take_word``.)
            word = 0 if ctx.stream._capturing else current_word(ctx.device.ordinal)
            if self._args[-1] != word:
                self._args = (*self._args[:-1], word)
        launch = (
            prepared,
            self._grid,
            self._block,
            self._shared_mem,
            ctx.stream.handle,
            self._args,
            ctx.error_box,
        )
        if ctx.fuse is self:  # the whole op: launched with its completion's flag write
            ctx.deferred = launch
        else:
            get_backend().launch_kernel(*launch)
        return _Ready(self._output)

    def __repr__(self) -> str:
        consumed = " (consumed)" if self._consumed else ""
        return f"<cuasync.DeviceOp launch {self._kernel.name}{consumed}>"


_LAUNCH_AWAIT: Any = _Launch.__dict__["__await__"]


def trusted_launch(
    kernel: _Launchable[Any],
    prepared: PreparedKernel,
    device: Device,
    args: tuple[Any, ...],
    tensors: tuple[Tensor, ...],
    params: tuple[Param, ...],
    writes: tuple[bool, ...],
    output: Any,
    grid: Dim3,
    block: Dim3,
) -> _Launch:
    """The launch op, not yet taken, of ``kernel`` (``prepared`` for ``device``) on
    arguments cuasync built and checked itself: tensors of the parameters' dtypes on
    ``device`` and nothing aliased (``tensors``, the pointer arguments in order, their
    ``params`` and whether each ``writes``), scalars in range, the current scope's
    cancel word last where the kernel takes one. Nothing is checked again (as a library
    call's op is made: :func:`~cuasync._launch.library_call.library_call`): for ops the
    native core submits as raw launches (``ExpressLaunches.pending_launches``).

    >>> trusted_launch(k, k._prepared[0], device, (out, x, n), (out, x), k.params[:2],
    ...                (True, False), out, (blocks, 1, 1), (256, 1, 1))
    """
    kind = _CancellableLaunch if kernel._cancel else _Launch
    op: _Launch = kind.__new__(kind)
    return launch_fields(
        op, device, kernel, prepared, args, tensors, params, writes, output, grid, block
    )


def launch_fields(
    op: LaunchOp,
    device: Device,
    kernel: _Launchable[Any] | None,
    prepared: PreparedKernel,
    args: tuple[Any, ...],
    tensors: tuple[Tensor, ...],
    params: tuple[Param, ...],
    writes: tuple[bool, ...],
    output: Any,
    grid: Any,
    block: Dim3,
) -> LaunchOp:
    """``op`` (a launch op made with ``__new__``, not yet taken) with every field of
    ``LaunchCore`` set, as :meth:`_Launch.__init__` sets them from checked arguments:
    for the launch ops cuasync makes of its own (:func:`trusted_launch`, a library
    call's)."""
    op._consumed = False
    if debug_origins():  # (where it was built, for a "never executed" warning)
        op._origin = _origin()
    op._device = device
    op._kernel = kernel
    op._prepared = prepared
    op._args = args
    op._tensors = tensors
    op._params = params
    op._writes = writes
    op._output = output
    op._grid = grid
    op._block = block
    op._shared_mem = 0
    return op


class _CancellableLaunch(_Launch):
    """The launch of a kernel taking a cancel word (:mod:`cuasync._launch.cancel`): it
    carries the word of the scope it is *executed* in (built in one task, awaited in
    another: the awaiting task's), none in a graph capture; submitted as a future it
    leaves its scope (others may await a future: it is never skipped)."""

    __slots__ = ()

    def __await__(self) -> Generator[Any, Any, Any]:
        """See :meth:`DeviceOp.__await__`."""
        watched = self._future
        if watched is not None:  # handed to asyncio as a future (its arguments let go of)
            return watched.waiting(self)
        device = self._device
        word = current_word(-1 if device is None else device.ordinal)
        args = self._args
        if args[-1] != word:
            self._args = (*args[:-1], word)
        awaiting: Generator[Any, Any, Any] = _LAUNCH_AWAIT.__get__(self, _Launch)()
        return awaiting

    def _start(self, stream: Stream, notify: bool) -> Completion:
        self._take_word(stream)
        return _Launch._start(self, stream, notify)

    def _sync(self, stream: Stream) -> Any:
        self._take_word(stream)
        return _Launch._sync(self, stream)

    def _express_launch(self, stream: Stream) -> Any:
        self._take_word(stream)
        return self

    def _submit_declined(self, stream: Stream) -> Completion:
        return _Launch._start(self, stream, True)  # (the word it was handed over with)

    def _take_word(self, stream: Stream) -> None:
        """The word of the scope it is executed in on ``stream`` as its last argument
        (none in a graph capture): the native core launches the arguments as they are."""
        word = 0 if stream._capturing else current_word(stream.device.ordinal)
        args = self._args
        if args[-1] != word:
            self._args = (*args[:-1], word)

    def submit(self) -> DeviceFuture[Any]:
        """See :meth:`DeviceOp.submit`; the launch runs to completion."""
        self._detach()
        with detached():
            return _Launch.submit(self)

    def submit_on(self, stream: Stream) -> DeviceFuture[Any]:
        """See :meth:`DeviceOp.submit_on`; the launch runs to completion."""
        self._detach()
        with detached():  # (the generic path, where the core declines, reads the scope)
            return express.submit_future(self, stream)

    def _detach(self) -> None:
        args = self._args
        if args and args[-1]:
            self._args = (*args[:-1], 0)


def _with_word(launcher: Callable[..., DeviceOp[Any]]) -> Callable[..., DeviceOp[Any]]:
    """``launcher`` (a Python one, of a kernel taking a cancel word) given the current
    scope's word, as the native ``Launcher`` gives it (``scoped_launch``: 0 outside any
    scope; the word of the op's device where it is another than the scope's)."""
    scoped_launch = NATIVE.scoped_launch

    def launch(*args: Any) -> DeviceOp[Any]:
        return scoped_launch(SCOPE, launcher, *args)

    return launch


class _LaunchOfOps(DeviceOp[Any]):
    """A launch taking lazy ops where it takes tensors: ``k[g, b](cuasync.zeros(n), x, n)``.

    The ops are consumed now; when the launch runs, each runs first in the same
    submission (on the launch's stream, so the kernel is ordered after it) and its output
    tensor is bound to the parameter. The launch itself is then the checked launch of
    those tensors (:meth:`_Launchable._launch_checked`): its output is the tensor bound
    to the non-const pointer parameter, whether it came from an op or not.

    What can be checked before the ops run is checked here (the number of arguments,
    scalars, tensors, a TensorOp's dtype, the devices); an op's output is checked when it
    is known.
    """

    __slots__ = ("_args", "_block", "_grid", "_kernel", "_shared_mem")

    def __init__(
        self,
        kernel: _Launchable[Any],
        args: tuple[Any, ...],
        grid: Dim3 | None,
        block: Dim3,
        shared_mem: int,
    ) -> None:
        device = _check_op_args(kernel, args, grid)
        kernel._prepared.get(device.ordinal) or kernel._prepare(device)  # now, as a launch
        for a in args:
            if isinstance(a, DeviceOp):
                a._take()  # (one consumed already, or passed twice: OpConsumedError)
        super().__init__(device)  # (last: a launch refused above is no op never executed)
        self._kernel = kernel
        self._args = args
        self._grid = grid
        self._block = block
        self._shared_mem = shared_mem

    def _trace_name(self) -> str:
        return self._kernel.name

    def _enqueue(self, ctx: ExecutionContext) -> Output[Any]:
        kernel = self._kernel
        args = []
        for param, a in zip(kernel.params, self._args, strict=True):
            if isinstance(a, DeviceOp):
                a = a._enqueue(ctx).get()
                if not isinstance(a, Tensor):
                    raise LaunchError(
                        f"{kernel._where(param)} was given an op whose output is "
                        f"{type(a).__name__}, not a tensor"
                    )
                ctx.retain(a)
            args.append(a)
        launch = kernel._launch_checked(tuple(args), self._grid, self._block, self._shared_mem)
        launch._take()
        return launch._enqueue(ctx)

    def __repr__(self) -> str:
        consumed = " (consumed)" if self._consumed else ""
        return f"<cuasync.DeviceOp launch {self._kernel.name} of ops{consumed}>"


def _check_op_args(kernel: _Launchable[Any], args: tuple[Any, ...], grid: Dim3 | None) -> Device:
    """Check a launch with lazy op arguments as far as it can be before they run; its device."""
    stand_ins: list[Any] = []
    devices: list[tuple[Param, Device]] = []
    for param, a in zip(kernel.params, args, strict=True):
        if isinstance(a, DeviceOp) and param.pointer:
            dtype = getattr(a, "dtype", None)  # a TensorOp's, known now
            if dtype is not None and param.dtype is not None and dtype != param.dtype:
                raise LaunchError(
                    f"{kernel._where(param)} expects {dtype_name(param.dtype)} data, got an "
                    f"op producing {dtype_name(dtype)}; convert it first (.astype())"
                )
            if a.device is not None:
                devices.append((param, a.device))
            a = DevicePointer(0, dtype)  # checked as a pointer would be
        elif isinstance(a, (Tensor, Partition)):
            devices.append((param, (a.tensor if isinstance(a, Partition) else a).device))
        stand_ins.append(a)
    _, _, _, partitions = kernel._convert(stand_ins)  # (an op as a scalar: LaunchError)
    if grid is None or partitions:
        kernel._grid(grid, partitions)
    if len({d for _, d in devices}) > 1:
        listing = ", ".join(f"{p.name} on device {d.ordinal}" for p, d in devices)
        raise LaunchError(f"kernel arguments live on different devices ({listing})")
    return devices[0][1] if devices else get_default_device()


def _check_flags(options: CompileOptions) -> list[str] | None:
    """The NVRTC options of a compile that only checks a source: ``options``' with
    ``--Ofast-compile=max`` for the optimization level, or None where that cannot be
    (NVRTC before 12.8; debug, line info or user flags, which it may conflict with)."""
    if options.debug or options.line_info or options.extra or nvrtc_version() < (12, 8):
        return None
    return ["--Ofast-compile=max", *options.flags()[1:]]


#: Compiled images and their kernels' lowered names by ``(source, name expression,
#: options, arch)`` (a program's: its name expressions), shared by every Kernel: a source
#: is compiled once per process, whether for a GPU, for the emulator's check or by
#: ``compile_image``.
_images: dict[tuple[Any, ...], tuple[bytes, tuple[str, ...]]] = {}
_images_lock = threading.Lock()


class Kernel(_Launchable[R]):
    """A CUDA C++ kernel compiled with NVRTC for each device's architecture.

    ``name`` is the ``__global__`` function, or a name expression with explicit template
    arguments (``"axpy<float>"``). ``emulate`` is its numpy twin for the emulator backend:
    it receives the launch arguments with tensors replaced by numpy arrays viewing the
    emulated device memory (writes land in the tensors).

    ``source``, ``options`` (its :class:`CompileOptions`) and ``params`` (the parameters
    parsed from the source) are kept as given and parsed. A source that includes
    ``<cuasync/cancel.cuh>`` is kept with the header expanded and a hidden last
    parameter added, the cancel word, which each launch fills: ``cuasync_cancelled()``
    in the kernel then says whether the scope it was launched in was cancelled
    (docs/cancellation.md).

    A launch produces the argument(s) bound to non-const pointers (None if there are
    none); the type parameter states it for type checkers (default ``Any``):
    ``k: cuasync.Kernel[cuasync.Tensor] = cuasync.Kernel(src, "scale")``.

    >>> k = cuasync.Kernel(src, "scale", emulate=lambda x, a, n: x.__imul__(a))
    >>> await k[(n + 127) // 128, 128](x, 3.0, n)
    """

    def __init__(
        self,
        source: str,
        name: str,
        *,
        emulate: Callable[..., object] | None = None,
        options: CompileOptions | None = None,
    ) -> None:
        if not isinstance(source, str) or not source.strip():
            raise ArgumentError("source must be a non-empty string of CUDA C++")
        if not isinstance(name, str) or not name.strip():
            raise ArgumentError("name must be the kernel's name (or a name expression)")
        if emulate is not None and not callable(emulate):
            raise ArgumentError(f"emulate must be callable, got {type(emulate).__name__}")
        if options is not None and not isinstance(options, CompileOptions):
            raise ArgumentError(
                f"options must be a cuasync.CompileOptions, got {type(options).__name__}"
            )
        self.name = name.strip()
        self.source = source = with_cancel_word(source, self.name)
        self.emulate = emulate
        self.options = options or CompileOptions()
        self.params = parse_params(source, self.name)
        self._cancel = bool(self.params) and self.params[-1].hidden
        self._prepared = {}

    def __repr__(self) -> str:
        sig = ", ".join(p.describe() for p in self.params if not p.hidden)
        return f"<cuasync.Kernel {self.name}({sig})>"

    def __getstate__(self) -> dict[str, Any]:
        """What the kernel is (source, name, options, signature, numpy twin) pickles; what
        this process made of it (functions loaded on its devices, cached launchers) does
        not: those handles mean nothing in another process, which prepares the kernel
        again on its first launch there (a Ray actor, a multiprocessing worker)."""
        state = dict(self.__dict__)  # (no launchers, no plan: the native base's fields;
        state["params"] = self.params  # a plan's dtypes must be this process's own)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        """The kernel of :meth:`__getstate__`'s state, prepared on no device yet."""
        state = dict(state)
        self.params = state.pop("params")
        state.pop("_prepared", None)  # (a state pickled before the params were native)
        self._prepared = {}
        self.__dict__.update(state)

    #: The name expressions compiled in one NVRTC program with this kernel's, its own
    #: among them (:func:`program_kernels`: a source's kernels that launch together);
    #: empty: compiled alone.
    _together: tuple[str, ...] = ()

    def _key(self, arch: str) -> tuple[Any, ...]:
        return (self.source, self._together or self.name, self.options, arch)

    def with_options(self, options: CompileOptions) -> Kernel[R]:
        """This kernel compiled with ``options`` instead: a new ``Kernel`` sharing the
        parsed signature and the numpy twin, compiled and cached under its own key.

        >>> fast = k.with_options(cuasync.CompileOptions(max_registers=64))
        """
        if not isinstance(options, CompileOptions):
            raise ArgumentError(
                f"options must be a cuasync.CompileOptions, got {type(options).__name__}"
            )
        other: Kernel[R] = object.__new__(type(self))
        other.source = self.source
        other.name = self.name
        other.emulate = self.emulate
        other.options = options
        other.params = self.params  # parsed once: options cannot change the signature
        other._cancel = self._cancel
        other._prepared = {}
        if self._together:
            other._together = self._together
        return other

    def specialize(self, **defines: object) -> Kernel[R]:
        """This kernel with more preprocessor ``defines`` (added to its options', which
        they override): ``-DNAME=value`` for each, in its own cache entry.

        The numpy twin is shared: on the emulator it must not depend on the defines.

        >>> k64 = k.specialize(TILE=64)      # compiled with -DTILE=64
        """
        if not defines:
            raise ArgumentError("specialize() needs at least one NAME=value define")
        merged = dict(self.options.defines)
        merged.update((name, str(v)) for name, v in defines.items())
        return self.with_options(dataclasses.replace(self.options, defines=merged))

    def compile_image(self, arch: str) -> tuple[bytes, str]:
        """Compile for ``arch`` (``"sm_90"``) and return ``(cubin, lowered name)``; no GPU needed.

        Each source is compiled once per process, and read back from the on-disk cache
        (:mod:`cuasync.kernel_cache`, on by default) where an earlier process compiled it.
        """
        return self._image(self._key(arch), arch, self.options.flags())

    def check_compiles(self, arch: str) -> None:
        """Compile for ``arch`` only to find errors in the source, as fast as NVRTC can:
        the emulator's check of each kernel it runs (``CUASYNC_EMU_COMPILE``).

        With the default code-generation settings and NVRTC 12.8 or later,
        ``--Ofast-compile=max`` takes the place of the optimization level: the same
        front end and assembler find the same errors in half NVRTC's time; the image,
        never loaded, is kept (in this process and the disk cache) only as the check's.

        >>> k.check_compiles("sm_90")   # KernelCompileError with NVRTC's log, if any
        """
        flags = _check_flags(self.options)
        if flags is None:
            self.compile_image(arch)
        else:
            self._image((*self._key(arch), "check"), arch, flags)

    def _image(self, key: tuple[Any, ...], arch: str, flags: list[str]) -> tuple[bytes, str]:
        found = _images.get(key)
        if found is None:
            with _images_lock:
                found = _images.get(key)
                if found is None:
                    found = _images[key] = self._compile(arch, flags)
        image, lowered = found
        return image, lowered[self._together.index(self.name) if self._together else 0]

    def _compile(self, arch: str, flags: list[str]) -> tuple[bytes, tuple[str, ...]]:
        """The image of this kernel's program and each of its kernels' lowered names: read
        from the disk cache, else compiled (and stored there)."""
        names = self._together or (self.name,)
        joined = "\n".join(names)  # (no name expression holds a newline)
        key = kernel_cache.key_for(self.source, joined, flags, arch)  # None when disabled
        if key is not None and (hit := kernel_cache.lookup(key)) is not None:
            lowered = tuple(hit[1].split("\n"))
            if len(lowered) == len(names):
                return hit[0], lowered
        compiled = compile_cubin(self.source, self._together or self.name, arch, flags)
        lowered = compiled.lowered_names or (compiled.lowered_name,)
        if key is not None:
            kernel_cache.store(key, compiled.image, "\n".join(lowered))
        return compiled.image, lowered

    def compile(self, device: int | Device | None = None) -> None:
        """Compile and load now for ``device`` (default: the default device), in this
        thread: the first launch there then compiles nothing. :func:`cuasync.warmup`
        does it for many kernels and expressions, off the event loop.

        On the emulator this compiles the source as the first launch would (see
        ``CUASYNC_EMU_COMPILE``), so device-code errors show without a GPU.

        >>> saxpy.compile(0)
        """
        dev = get_default_device() if device is None else Device(device)
        backend = get_backend()
        if self.emulate is None and backend.name == "emulator":  # no twin: nothing to launch
            backend.prepare_kernel(dev.ordinal, self, compile_only=True)
        else:
            self._prepare(dev)


def program_kernels(
    source: str, twins: Mapping[str, Callable[..., object] | None]
) -> dict[str, Kernel[Any]]:
    """A :class:`Kernel` of ``source`` for each name expression of ``twins`` (with its
    numpy twin), all compiled in one NVRTC program: the first use of any compiles them
    all, once (a family's kernels that launch together: a sort's four).

    >>> kernels = program_kernels(src, {"ca_sort_init": init_twin, "ca_sort_step": step_twin})
    """
    kernels = {name: Kernel(source, name, emulate=twin) for name, twin in twins.items()}
    names = tuple(k.name for k in kernels.values())
    # (a kernel taking a cancel word has a source of its own: it compiles alone)
    if len(names) > 1 and len({k.source for k in kernels.values()}) == 1:
        for k in kernels.values():
            k._together = names
    return kernels


# Tensor.device_pointer (the tensor module sits below this one).
tensor_methods.device_pointer = DevicePointer._of
