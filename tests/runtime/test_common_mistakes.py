"""Common first-time mistakes raise typed errors that say what to do.

numpy data mixed with device data (``HostArrayError``), an op used where its result is
needed, a forgotten ``await`` (``NotAwaitedError``), and an op awaited after a bigger
expression took it over (``OpConsumedError`` saying so). No message names a private class.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import cuasync
from cuasync.errors import HostArrayError, NotAwaitedError, OpConsumedError

HOST = np.arange(4, dtype=np.float32)


def _to_host(t: Any) -> Any:
    return t.to_host()


def _twice(t: Any) -> Any:
    return t * 2


#: name -> (the mistake, given a tensor; the error; what the message must say)
MIXES: dict[str, tuple[Callable[[Any], Any], str]] = {
    "tensor + ndarray": (lambda t: t + HOST, r"cuasync\.from_host\(array\)"),
    "ndarray + tensor": (lambda t: HOST + t, r"cuasync\.from_host\(array\)"),
    "ndarray * op": (lambda t: HOST * _op(t), r"cuasync\.from_host\(array\)"),
    "op < ndarray": (lambda t: _op(t) < HOST, r"cuasync\.from_host\(array\)"),
    "np.exp(op)": (lambda t: np.exp(_op(t)), r"cuasync\.exp\(\.\.\.\)"),
    "np.add(tensor, ndarray)": (lambda t: np.add(t, HOST), r"cuasync\.from_host\(array\)"),
    "np.exp(tensor)": (lambda t: np.exp(t), r"cuasync\.exp\(\.\.\.\)"),
    "np.sum(tensor)": (lambda t: np.sum(t), r"cuasync\.sum\(\.\.\.\)"),
    "np.concatenate": (lambda t: np.concatenate([t, t]), r"cuasync\.concatenate"),
    "np.asarray(tensor)": (lambda t: np.asarray(t), r"await t\.to_host\(\)"),
}

#: name -> (the op, given a tensor; the mistake made with it; what the message must say)
FORGOTTEN_AWAITS: dict[str, tuple[Callable[[Any], Any], Callable[[Any], Any], str]] = {
    "np.asarray(t.to_host())": (_to_host, np.asarray, r"np\.asarray\(await op\)"),
    "np.asarray(op)": (_twice, np.asarray, r"np\.asarray\(await op\)"),
    "t.to_host()[0]": (_to_host, lambda op: op[0], r"\(await op\)\[\.\.\.\]"),
    "(t * 2)[0]": (_twice, lambda op: op[0], r"\(await op\)\[\.\.\.\]"),
    "t.to_host().sum()": (_to_host, lambda op: op.sum(), r"no attribute 'sum'.*\(await op\)\.sum"),
    "op.map(f).tolist()": (
        lambda t: t.to_host().map(list),
        lambda op: op.tolist(),
        r"no attribute 'tolist'",
    ),
    "ndarray + t.to_host()": (_to_host, lambda op: HOST + op, r"np\.asarray\(await op\)"),
}


_built: list[Any] = []


def _op(t: Any) -> Any:
    """An op of a mistake that raises before taking it: kept, to be run afterwards."""
    _built.append(t * 2)
    return _built[-1]


def _message_names_no_private_class(exc: BaseException) -> None:
    for private in ("_FnOp", "_Then", "_Map", "_Zip", "_Value", "_Launch", "_Wait"):
        assert private not in str(exc)


@pytest.mark.parametrize("name", list(MIXES))
async def test_numpy_and_device_data_mixed_say_what_to_do(anyio_backend, name: str) -> None:
    t = await cuasync.from_host(HOST)
    mistake, hint = MIXES[name]
    with pytest.raises(HostArrayError, match=hint) as info:
        mistake(t)
    assert isinstance(info.value, TypeError)  # numpy's own refusals were TypeErrors
    while _built:
        await _built.pop()  # (untouched by the refusal)


@pytest.mark.parametrize("name", list(FORGOTTEN_AWAITS))
async def test_a_forgotten_await_says_to_await(anyio_backend, name: str) -> None:
    t = await cuasync.from_host(HOST)
    build, mistake, hint = FORGOTTEN_AWAITS[name]
    op = build(t)
    with pytest.raises(NotAwaitedError, match=f"(?s)await it first.*{hint}|{hint}") as info:
        mistake(op)
    _message_names_no_private_class(info.value)
    await op  # the op itself is untouched


def test_hasattr_on_an_op_still_answers() -> None:
    op = cuasync.zeros((4,))
    assert not hasattr(op, "data_ptr") and not hasattr(op, "__cuda_array_interface__")
    assert hasattr(op, "shape")
    op.sync()


def test_numpy_scalars_still_build_ops() -> None:
    t = cuasync.from_host(HOST).sync()
    cases: list[tuple[Any, Any]] = [
        (np.float32(2) * t, 2 * HOST),
        (np.float32(10) - t, 10 - HOST),
        (np.float32(1.5) < t, HOST > 1.5),
        (t + np.array(1.0, np.float32), HOST + 1),  # a 0-d array is its scalar
    ]
    for op, want in cases:
        np.testing.assert_array_equal(op.to_host().sync(), want)


def test_private_op_classes_show_their_public_type() -> None:
    t = cuasync.from_host(HOST).sync()
    then = t.to_host().then(lambda a: cuasync.value(len(a)))
    for op in (t.to_host(), then, t.to_host().map(len), cuasync.value(1)):
        assert type(op).__name__ == "DeviceOp"
        with pytest.raises(TypeError, match="'DeviceOp'"):
            op + 1  # type: ignore[operator]  # Python's own message names the type
        assert repr(op).startswith("<cuasync.DeviceOp ")
        op.sync()
        with pytest.raises(OpConsumedError, match="this DeviceOp was already used"):
            op.sync()


async def test_an_op_absorbed_into_an_expression_says_so(anyio_backend) -> None:
    t = await cuasync.from_host(HOST)
    op = t * 2
    y = op + 1
    with pytest.raises(OpConsumedError, match=r"used in a bigger expression.*await that"):
        await op
    np.testing.assert_array_equal(await (await y).to_host(), HOST * 2 + 1)


def test_an_op_becomes_a_task_through_create_task_or_ensure_future() -> None:
    # An op runs as a task's coroutine (docs/troubleshooting.md), on asyncio and uvloop.
    t = cuasync.from_host(HOST).sync()

    async def main() -> None:
        task = asyncio.ensure_future(t * 2)
        np.testing.assert_array_equal(await (await task).to_host(), HOST * 2)
        made = asyncio.create_task(t * 3)
        np.testing.assert_array_equal(await (await made).to_host(), HOST * 3)

    asyncio.run(main())
