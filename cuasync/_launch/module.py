"""Modules you load or borrow: :class:`Module` and the kernels taken from one.

A :class:`Module` either owns a module cuasync loaded from an image (unloaded when the
object goes away) or borrows one another library loaded (:meth:`Module.from_handle`,
never unloaded). :meth:`Module.kernel_from_handle` borrows a single function. Either way
the kernels launch as every :class:`cuasync.Kernel` does: arguments checked against
the C signature you give, tensors ordered across streams and kept alive until the
kernel has run.

On the emulator there are no images; handles are those the emulator issued
(:func:`cuasync.emulator.load_module` registers numpy twins as a module's functions).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._backends import get_backend
from .._backends.base import PreparedKernel
from .._core.device import Device, get_default_device
from .._core.process_local import ProcessLocal
from .._exceptions import report_once
from ..errors import ArgumentError, InvalidDeviceError, UsageError
from .kernel import _Launchable
from .signature import Param, parse_params

__all__ = ["Module"]


def _raw_handle(handle: object, what: str) -> int:
    """An int from a driver handle: an int, or an object ``int()`` accepts (``CUmodule``)."""
    if isinstance(handle, (bool, float)) or not hasattr(handle, "__int__"):
        raise ArgumentError(
            f"{what} must be a driver handle (an int, or a cuda.bindings {what.split()[0]} "
            f"object), got {type(handle).__name__}"
        )
    value = int(handle)
    if value <= 0:
        raise ArgumentError(f"{what} must be a non-null handle, got {value:#x}")
    return value


def _params(name: str, signature: str) -> list[Param]:
    if not isinstance(signature, str):
        raise ArgumentError(
            f'signature must be the C parameter list ("float* x, int n"), got '
            f"{type(signature).__name__}"
        )
    return parse_params(f"__global__ void {name}({signature})", name)


class Module(ProcessLocal):
    """A cubin, fatbin or PTX image you compiled, loaded on one device.

    ``device``: the device it is loaded on; ``handle``: the driver's ``CUmodule``, as an
    int; ``borrowed``: whether it is another library's (:meth:`from_handle`), never unloaded.

    >>> mod = cuasync.Module(open("k.cubin", "rb").read())
    >>> k = mod.kernel("scale", "float* x, float a, int n")
    >>> await k[blocks, 128](x, 2.0, n)
    """

    _local_hint = "send the image bytes and load a Module in the receiving process"

    device: Device
    handle: int
    #: Whether the module is another library's (:meth:`from_handle`): never unloaded.
    borrowed: bool = False
    _owner: Any = None

    def __init__(self, image: bytes, device: int | Device | None = None) -> None:
        if not isinstance(image, (bytes, bytearray)) or not image:
            raise ArgumentError("image must be the non-empty bytes of a cubin, fatbin or PTX file")
        self.device = get_default_device() if device is None else Device(device)
        self.handle = get_backend().module_load(self.device.ordinal, bytes(image))

    @classmethod
    def from_handle(
        cls, handle: int | Any, device: int | Device | None = None, *, owner: Any = None
    ) -> Module:
        """Borrow a module another library loaded (``CUmodule``); cuasync never unloads it.

        ``handle`` must belong to ``device``'s primary context (as PyTorch's, CuPy's and
        cuda.core's do) and stay loaded while kernels taken from it may run: pass its
        Python ``owner`` to keep that alive as long as this object and its kernels. On
        the emulator, handles are those :func:`cuasync.emulator.load_module` issued.

        >>> err, mod = driver.cuModuleLoadData(cubin)      # the other library's module
        >>> k = cuasync.Module.from_handle(mod, 0).kernel("scale", "float* x, int n")
        >>> await k[blocks, 128](x, n)
        """
        module = cls.__new__(cls)
        module.handle = _raw_handle(handle, "CUmodule handle")
        module.device = get_default_device() if device is None else Device(device)
        module.borrowed = True
        module._owner = owner
        return module

    @classmethod
    def kernel_from_handle(
        cls,
        handle: int | Any,
        signature: str,
        *,
        device: int | Device | None = None,
        name: str | None = None,
        emulate: Callable[..., Any] | None = None,
        owner: Any = None,
    ) -> _ModuleKernel:
        """Borrow one function another library loaded (``CUfunction``, or a ``CUkernel``
        of a context-independent library) and launch it with the C ``signature``.

        Never unloaded; ``owner`` is kept alive with the kernel (see :meth:`from_handle`).
        ``name`` is for messages (default: the driver's name of the function, where it
        can tell). On the emulator, handles are the functions of a module that
        :func:`cuasync.emulator.load_module` issued, and their twins run.

        >>> err, fn = driver.cuModuleGetFunction(mod, b"scale")
        >>> k = cuasync.Module.kernel_from_handle(fn, "float* x, int n", device=0)
        >>> await k[blocks, 128](x, n)
        """
        raw = _raw_handle(handle, "CUfunction handle")
        dev = get_default_device() if device is None else Device(device)
        _params("function", signature)  # checked before the driver is asked for the name
        if name is None:
            name = get_backend().function_name(raw)
            name = name if name.isidentifier() else "function"
        elif not isinstance(name, str) or not name.isidentifier():
            raise ArgumentError(f"name must be a C identifier (for messages), got {name!r}")
        if emulate is not None and not callable(emulate):
            raise ArgumentError(f"emulate must be callable, got {type(emulate).__name__}")
        return _ModuleKernel(dev, name, _params(name, signature), emulate, owner, function=raw)

    def kernel(
        self, name: str, signature: str, *, emulate: Callable[..., Any] | None = None
    ) -> _ModuleKernel:
        """The function ``name`` with C parameters ``signature`` (``"float* x, int n"``).

        >>> k = mod.kernel("scale", "float* x, float a, int n")
        """
        return _ModuleKernel(self.device, name, _params(name, signature), emulate, self)

    def __repr__(self) -> str:
        kind = "borrowed " if self.borrowed else ""
        return f"<cuasync.Module {kind}{self.handle:#x} on device {self.device.ordinal}>"

    def __del__(self) -> None:
        if self.borrowed or not hasattr(self, "handle"):
            return  # another library's, or never loaded
        try:
            get_backend().module_unload(self.handle)
        except Exception as exc:
            report_once("cuasync.kernel", "unload a module", exc)


class _ModuleKernel(ProcessLocal, _Launchable[Any]):
    """A function of a loaded or borrowed module, or a borrowed function: no source."""

    _local_hint = "send the image bytes and load a Module in the receiving process"

    def __init__(
        self,
        device: Device,
        name: str,
        params: list[Param],
        emulate: Callable[..., Any] | None,
        owner: Any,
        *,
        function: int = 0,
    ) -> None:
        self.device = device
        self.module = owner if isinstance(owner, Module) else None
        self.owner = owner  # kept alive as long as the kernel: it keeps the code loaded
        self.module_handle = self.module.handle if self.module is not None else 0
        self.function_handle = function
        self.name = name
        self.params = params
        self.emulate = emulate
        self._prepared = {}
        self._prepare(device)  # an unknown name or handle fails here

    def __repr__(self) -> str:
        sig = ", ".join(p.describe() for p in self.params)
        return f"<cuasync.Module kernel {self.name}({sig}) on device {self.device.ordinal}>"

    def compile_image(self, arch: str) -> tuple[bytes, str]:
        raise UsageError(f"{self.name} is a function of a loaded Module: it has no source")

    def _prepare(self, device: Device) -> PreparedKernel:
        if device is not self.device:
            raise InvalidDeviceError(
                f"{self.name} was loaded on device {self.device.ordinal}, the launch runs on "
                f"device {device.ordinal}; load the image on that device too"
            )
        return super()._prepare(device)
