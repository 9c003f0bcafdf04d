"""Objects of one process refuse pickling with a typed error; a Kernel pickles as what it is.

Sending a tensor, an op, a stream, ... to another process (a Ray actor, a multiprocessing
worker) used to fail deep inside pickle (a lock) or, for a Kernel already launched here,
to succeed with this process's loaded-function handles, which the other process would
then launch. Ray itself is exercised in test_ray.py; this file needs no Ray.
"""

from __future__ import annotations

import copy
import pickle
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import cuasync
from cuasync.errors import ProcessLocalError, UsageError

SOURCE = r"""
extern "C" __global__ void twice(float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= 2.0f;
}
"""


def twice_twin(x: np.ndarray, n: int) -> None:  # module level: plain pickle finds it
    x[:n] *= 2.0


def _tensor() -> Any:
    return cuasync.arange(4, dtype="float32").sync()


def _op() -> Any:
    op = cuasync.arange(4, dtype="float32")
    op.sync()  # executed: collecting it later warns about nothing
    return op


def _future() -> Any:
    fut = cuasync.arange(4, dtype="float32").submit()
    fut.wait()
    return fut


def _graph() -> Any:
    x = cuasync.zeros((8,)).sync()
    kernel = cuasync.Kernel(SOURCE, "twice", emulate=twice_twin)
    return kernel[1, 32](x, 8).graph()


PROCESS_LOCAL: dict[str, Callable[[], Any]] = {
    "Tensor": _tensor,
    "TensorOp": _op,
    "DeviceFuture": _future,
    "Stream": lambda: cuasync.Device(0).new_stream(),
    "Event": lambda: cuasync.Event(),
    "CudaGraph": _graph,
    "PinnedHostBuffer": lambda: cuasync.PinnedHostBuffer(64, "float32"),
    "Allocation": lambda: _tensor()._alloc,
}


@pytest.mark.parametrize("name", sorted(PROCESS_LOCAL))
def test_pickling_an_object_of_this_process_raises_a_typed_error(name: str) -> None:
    obj = PROCESS_LOCAL[name]()
    with pytest.raises(ProcessLocalError, match=rf"a cuasync\.{name} cannot be pickled") as info:
        pickle.dumps(obj)
    assert isinstance(info.value, UsageError) and isinstance(info.value, TypeError)
    with pytest.raises(ProcessLocalError):
        copy.copy(obj)
    with pytest.raises(ProcessLocalError):
        copy.deepcopy(obj)


def test_the_message_names_what_to_send_instead() -> None:
    with pytest.raises(ProcessLocalError, match=r"await t\.to_host\(\).*cuasync\.from_host"):
        pickle.dumps(_tensor())
    with pytest.raises(ProcessLocalError, match="build the op in the process that awaits it"):
        pickle.dumps(_op())


def test_an_unexecuted_op_refuses_before_it_could_be_duplicated() -> None:
    op = cuasync.arange(4, dtype="float32")
    with pytest.raises(ProcessLocalError):
        pickle.dumps(op)
    assert op.sync().shape == (4,)  # still usable (and executed: no warning)


def test_a_device_pickles_as_its_ordinal() -> None:
    assert pickle.loads(pickle.dumps(cuasync.Device(0))) is cuasync.Device(0)


def test_a_launched_kernel_pickles_without_this_process_s_handles() -> None:
    kernel = cuasync.Kernel(SOURCE, "twice", emulate=twice_twin)
    x = cuasync.from_host(np.arange(8, dtype=np.float32)).sync()
    kernel[1, 32](x, 8).sync()
    assert kernel._prepared and kernel._launchers  # prepared for device 0, launcher cached

    clone = pickle.loads(pickle.dumps(kernel))
    assert clone._prepared == {} and clone._launcher_cache is None and clone._plan is None
    assert kernel._prepared  # the original keeps its own
    assert (clone.source, clone.name, clone.options) == (kernel.source, kernel.name, kernel.options)
    assert [p.describe() for p in clone.params] == [p.describe() for p in kernel.params]
    clone[1, 32](x, 8).sync()  # prepared again, here for the same device
    np.testing.assert_array_equal(x.to_host().sync(), np.arange(8, dtype=np.float32) * 4)


def test_a_kernel_specialized_with_options_keeps_them_through_pickle() -> None:
    kernel = cuasync.Kernel(SOURCE, "twice", emulate=twice_twin).specialize(TILE=64)
    clone = pickle.loads(pickle.dumps(kernel))
    assert clone.options == kernel.options and dict(clone.options.defines) == {"TILE": "64"}
