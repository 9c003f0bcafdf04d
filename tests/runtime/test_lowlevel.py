"""cuasync.lowlevel: the plumbing, out of the application namespace."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import cuasync
from cuasync import lowlevel

MOVED = ["DevicePointer", "ExecutionContext", "Output", "device_op"]
#: Born in lowlevel: never in the top level.
NEW = ["MemoryPool", "use_memory_pool"]


def test_plumbing_lives_in_lowlevel_not_in_the_top_level() -> None:
    assert sorted(lowlevel.__all__) == sorted(MOVED + NEW)
    for name in MOVED + NEW:
        assert name not in cuasync.__all__
        assert name not in vars(cuasync)
    assert "lowlevel" in cuasync.__all__ and "stats" in cuasync.__all__


@pytest.mark.parametrize("name", MOVED)
def test_old_names_still_import_with_one_deprecation_warning(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cuasync, "_warned", set())
    with pytest.warns(DeprecationWarning, match=rf"cuasync\.lowlevel\.{name}"):
        assert getattr(cuasync, name) is getattr(lowlevel, name)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert getattr(cuasync, name) is getattr(lowlevel, name)  # once is enough


def test_unknown_names_still_raise_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no_such_thing"):
        cuasync.no_such_thing  # noqa: B018


def test_a_custom_op_from_the_lowlevel_pieces() -> None:
    src = cuasync.from_host(np.arange(4.0)).sync()

    def enqueue(ctx: lowlevel.ExecutionContext) -> lowlevel.Output[cuasync.Tensor]:
        ctx.read(src.allocation)
        return lowlevel.Output.ready(src)

    out = lowlevel.device_op(enqueue, name="identity").sync()
    np.testing.assert_array_equal(out.to_host().sync(), np.arange(4.0))
