"""The memos in front of the seen-kind dicts (``reactor/python/memo.c``).

A seen expression's op nodes and launch plan are found by a key compared without
building it: by identity, exact ints by value and tuples item by item. What a user
relies on: equal shapes and strides find the same plan whichever tensors carry them,
different ones never find another's, the memo stays bounded, and it only answers what
the dict it stands before holds.
"""

from __future__ import annotations

from typing import Any

import helpers
import numpy as np
import pytest

import cuasync
from cuasync._native import NATIVE
from cuasync._ops import expr, launch_plan

pytestmark = pytest.mark.anyio


async def upload(a: np.ndarray) -> cuasync.Tensor:
    return await cuasync.from_host(a)


def test_a_memo_starts_empty_and_takes_no_arguments() -> None:
    memo = NATIVE.Memo()
    assert len(memo) == 0
    memo.clear()
    with pytest.raises(TypeError, match="no arguments"):
        NATIVE.Memo(1)


async def test_equal_shapes_of_other_tensors_find_the_same_plan(
    anyio_backend: Any, made: list[Any]
) -> None:
    a = np.arange(6, dtype=np.float32)
    xs = [await upload(a * k) for k in range(4)]  # four shape tuples, equal
    assert len({id(x.shape) for x in xs}) == 4
    for k, x in enumerate(xs):
        got = await cuasync.exp(x * 0.5 + 1.0)
        np.testing.assert_allclose(await got.to_host(), np.exp(a * k * 0.5 + 1), rtol=2e-6)
    assert len(made) == 1
    assert len(launch_plan.LAUNCHES.memo) == 1
    # the node of each op of the tree, found there once seen (not on first sight)
    assert 1 <= len(expr.NODES.memo) <= 3


async def test_shapes_and_strides_that_differ_by_value_get_their_own_plans(
    anyio_backend: Any, made: list[Any]
) -> None:
    a = np.arange(24, dtype=np.float32)
    x = await upload(a)
    cases = [
        (lambda: cuasync.add(x[:3], 1.0), a[:3] + 1),
        (lambda: cuasync.add(x[:4], 1.0), a[:4] + 1),
        (lambda: cuasync.add(x[::2][:4], 1.0), a[::2][:4] + 1),  # same shape, stride 2
        (lambda: cuasync.add(x[::3][:4], 1.0), a[::3][:4] + 1),  # stride 3
        (lambda: cuasync.add(x.reshape((4, 6)), 1.0), a.reshape(4, 6) + 1),
        (lambda: cuasync.add(x.reshape((6, 4)), 1.0), a.reshape(6, 4) + 1),
        (lambda: cuasync.add(x.reshape((6, 4)).T, 1.0), a.reshape(6, 4).T + 1),
    ]
    for _ in range(3):  # first sight, then found again, twice
        for make, want in cases:
            np.testing.assert_array_equal(await (await make()).to_host(), want)
    assert len(made) == len(cases)


async def test_a_reduction_is_found_by_its_own_key_too(anyio_backend: Any, made: list[Any]) -> None:
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    m = await upload(a)
    cases = [
        (lambda: cuasync.sum(m), a.sum()),
        (lambda: cuasync.sum(m, axis=0), a.sum(axis=0)),
        (lambda: cuasync.sum(m, axis=1), a.sum(axis=1)),
        (lambda: cuasync.sum(m, axis=1, keepdims=True), a.sum(axis=1, keepdims=True)),
        (lambda: cuasync.max(m, axis=1), a.max(axis=1)),
    ]
    for _ in range(3):
        for make, want in cases:
            got = await (await make()).to_host()
            assert got.shape == want.shape
            np.testing.assert_allclose(got, want)
    assert len(launch_plan.LAUNCHES.memo) == len(cases)


async def test_the_memo_stays_bounded_and_right_past_its_size(
    anyio_backend: Any, made: list[Any]
) -> None:
    a = np.arange(300, dtype=np.float32)
    x = await upload(a)
    for _ in range(2):  # the second round finds some, and makes the rest again
        for n in range(1, 300):
            got = await cuasync.add(x[:n], 2.0)
            np.testing.assert_array_equal(await got.to_host(), a[:n] + 2)
    assert len(launch_plan.LAUNCHES.memo) <= 256
    assert len(made) == 299  # the dict holds them all: nothing is made twice


async def test_the_memo_keeps_only_what_the_dict_holds(anyio_backend: Any, made: list[Any]) -> None:
    nothing = await upload(np.zeros((0,), np.float32))  # no elements: no plan recorded
    for _ in range(3):
        got = await cuasync.add(nothing, 1.0)
        assert got.shape == (0,)
    assert len(launch_plan.LAUNCHES.memo) == 0


async def test_a_dict_emptied_when_full_empties_its_memo(
    anyio_backend: Any, made: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The seen-kind dicts start over at ``seen.LIMIT`` entries: their memos with them,
    so that a memo answers only what its dict holds."""
    from cuasync._ops import reductions, seen

    # as in a fresh process: what earlier tests in this one made these kinds of calls
    # record would turn this test's records into hits (nothing then empties)
    for cache in (launch_plan._plans, expr._NODES, reductions._RESOLVED):
        helpers.emptied(monkeypatch, cache)
    a = np.arange(8, dtype=np.float32)
    x = await upload(a)
    for _ in range(2):
        await cuasync.exp(x * 2.0)
        await cuasync.sum(x)
    memos = (launch_plan.LAUNCHES.memo, expr.NODES.memo, reductions.REDUCE.memo)
    assert all(len(memo) for memo in memos)
    monkeypatch.setattr(seen, "LIMIT", 0)  # the next record empties the dict first
    await cuasync.exp(x * 3.0 + 1.0)  # a new plan recorded, the others gone
    assert len(launch_plan._plans) == len(launch_plan.LAUNCHES.memo) == 1
    await cuasync.sum(x, axis=0, keepdims=True)  # new arguments recorded
    assert len(reductions.REDUCE.memo) == 0
    filler = ((), (), np.dtype(np.float32), False)
    expr._NODES.update({(object(),): filler for _ in range(4096)})  # full: the next empties it
    await cuasync.exp(x - 1.0)
    assert len(expr.NODES.memo) == 0
    for got, want in (
        (await cuasync.exp(x * 2.0), np.exp(a * 2)),
        (await cuasync.sum(x), a.sum()),
    ):
        np.testing.assert_allclose(await got.to_host(), want, rtol=1e-6)


async def test_the_native_reduce_op_takes_its_arguments_as_the_python_one_did(
    anyio_backend: Any,
) -> None:
    from cuasync._ops.reductions import reduce_op

    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    x = await upload(a)
    for op in (
        reduce_op("sum", "sum", x, 1),
        reduce_op("sum", "sum", x, axis=1),
        reduce_op(name="sum", op="sum", x=x, axis=1),
        reduce_op("sum", "sum", x=x, axis=1, keepdims=False),
    ):
        np.testing.assert_allclose(await (await op).to_host(), a.sum(axis=1))
    with pytest.raises(TypeError, match="missing required argument 'x'"):
        reduce_op("sum", "sum")
    with pytest.raises(TypeError, match="multiple values for argument 'x'"):
        reduce_op("sum", "sum", x, x=x)
    with pytest.raises(TypeError, match="at most 4 positional"):
        reduce_op("sum", "sum", x, 1, None)


async def test_a_tree_longer_than_a_memo_keeps_is_still_planned_once(
    anyio_backend: Any, made: list[Any]
) -> None:
    """A key past the memo's length (here 80 tensor leaves) is looked up in the dict
    alone: planned once, launched from its plan after."""
    a = np.arange(4, dtype=np.float32)
    x = await upload(a)
    for _ in range(2):
        y = x * 1.0
        for _ in range(79):
            y = y + x
        assert launch_plan.plan_key(y._node, None) is not None
        np.testing.assert_allclose(await (await y).to_host(), a * 80, rtol=1e-6)
    assert len(made) == 1
    assert len(launch_plan.LAUNCHES.memo) == 0
