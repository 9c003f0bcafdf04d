"""How an elementwise op is built (``reactor/python/apply.c``: ``APPLY`` and ``op_node``).

The native builder makes the TensorOp with every slot ``TensorOp(node, out)`` sets; it
looks seen structures up, and hands what it has not seen (a new structure, an unusual
operand, a dtype, an ``out=`` it cannot accept at once) to the Python rules, which word
the errors. These tests hold it to what a user relies on: the same op, the same errors
on a seen structure as on a new one, and operands left unconsumed by an error.
"""

from __future__ import annotations

import inspect
from typing import Any, cast

import numpy as np
import pytest

import cuasync
from cuasync._ops import expr
from cuasync._ops.tensorop import TensorOp
from cuasync.errors import (
    AliasingError,
    ArgumentError,
    DTypeError,
    InvalidDeviceError,
    OpConsumedError,
    ScalarOverflowError,
    ShapeError,
)


def _slots(op: Any) -> dict[str, Any]:
    """Every ``__slots__`` entry of ``op``'s classes that is set, by name."""
    out: dict[str, Any] = {}
    for cls in type(op).__mro__:
        for name in cls.__dict__.get("__slots__", ()):
            if name != "__weakref__" and hasattr(op, name):
                out[name] = getattr(op, name)
    return out


def _tensor(values: Any, dtype: str = "float32", device: int = 0) -> cuasync.Tensor:
    return cuasync.from_host(np.asarray(values, dtype=dtype), device=device).sync()


def test_the_native_op_has_the_slots_tensorops_init_sets() -> None:
    x = _tensor(np.arange(6).reshape(2, 3))
    o = cuasync.empty((2, 3), "float32").sync()
    for native in (
        cuasync.add(x, 1.0),
        cuasync.add(x, 1.0, out=o),
        cuasync.exp(x * 2.0 + 1),
        cuasync.where(x > 2, x, 0.0),
    ):
        python = TensorOp(native._node, native._out)
        assert type(native) is type(python) is TensorOp
        mine, theirs = _slots(native), _slots(python)
        assert mine.keys() == theirs.keys()
        for name, value in theirs.items():
            assert value is mine[name] or value == mine[name], (name, mine[name], value)
        python._take()
        got = native.sync().to_host().sync()
        np.testing.assert_array_equal(got, TensorOp(native._node, None).sync().to_host().sync())


def test_reductions_and_wrapped_ops_get_the_slots_tensorops_init_sets() -> None:
    """``tensor_op(node, out)`` (the native ``new_op``) gives reductions and wrapped ops
    (creation, copies) what ``TensorOp(node, out)`` would, and refuses what is not a
    Node or an ``out`` that is not a Tensor."""
    from cuasync._ops.elementwise import APPLY

    x = _tensor(np.arange(6).reshape(2, 3))
    s = cuasync.empty((3,), "float32").sync()
    for native, want in (
        (cuasync.sum(x, axis=0), np.arange(6).reshape(2, 3).sum(axis=0)),
        (cuasync.sum(x, axis=0, out=s), np.arange(6).reshape(2, 3).sum(axis=0)),
        (cuasync.zeros((2, 3)), np.zeros((2, 3))),
        (x.astype("float16"), np.arange(6).reshape(2, 3)),
    ):
        python = TensorOp(native._node, native._out)
        mine, theirs = _slots(native), _slots(python)
        assert type(native) is TensorOp and mine.keys() == theirs.keys()
        for name, value in theirs.items():
            assert value is mine[name] or value == mine[name], (name, mine[name], value)
        python._take()
        np.testing.assert_array_equal(native.sync().to_host().sync(), want)
    op = cuasync.sum(x)
    node = op._node
    op._take()  # (built only for its node)
    with pytest.raises(TypeError, match="node must be a Node"):
        APPLY.tensor_op("sum", None)
    with pytest.raises(TypeError, match="out must be a Tensor or None"):
        APPLY.tensor_op(node, np.zeros(3))
    with pytest.raises(TypeError, match="takes 2 arguments"):
        APPLY.tensor_op(node)
    # what the native constructor reads must be set: an error, never a crash
    with pytest.raises(ValueError, match="the output's shape is not set"):
        APPLY.tensor_op(node, cuasync.Tensor.__new__(cuasync.Tensor))
    broken = expr.Node("pending", "sum", (), node.dtype, None, device=node.device)
    del broken.device
    with pytest.raises(ValueError, match="no device"):
        APPLY.tensor_op(broken, None)
    shapeless = expr.Node("pending", "sum", (), node.dtype, None, device=node.device)
    del shapeless.shape
    with pytest.raises(ValueError, match="the output's shape is not set"):
        APPLY.tensor_op(shapeless, None)


def test_seen_and_new_structures_give_the_same_node() -> None:
    x = _tensor([1, 2, 3], "int8")
    expr._NODES.clear()
    expr.NODES.memo.clear()
    ops = [cuasync.add(x, 2) for _ in range(2)]  # a miss, then a hit
    for op in ops:
        op._take()
        node = op._node
        assert (node.kind, node.name, node.shape, node.dtype) == ("op", "add", (3,), np.int8)
        assert node.ins == (np.dtype(np.int8), np.dtype(np.int8))
        assert [c.kind for c in node.children] == ["tensor", "scalar"]
        assert node.children[0].value is x and node.children[1].value == 2
        assert node.device is x.device


def test_a_seen_structure_still_checks_each_weak_int_by_value() -> None:
    x = _tensor([1, 2, 3], "int8")
    cuasync.add(x, 1)._take()  # (the structure seen: int8 with a weak int)
    with pytest.raises(ScalarOverflowError, match="300 does not fit in int8"):
        cuasync.add(x, 300)
    big = cuasync.add(_tensor([1.0]), 2**70)  # past a C long long: a float32 scalar
    assert big._node.children[1].dtype == np.float32
    np.testing.assert_array_equal(big.sync().to_host().sync(), [np.float32(2.0**70)])


def test_a_seen_structure_still_compares_devices() -> None:
    if cuasync.device_count() < 2:
        pytest.skip("needs two devices (the emulator has two)")
    x0, x1 = _tensor([1.0]), _tensor([1.0], device=1)
    cuasync.add(x0, x0)._take()
    for _ in range(2):  # (a miss, then a hit)
        with pytest.raises(InvalidDeviceError, match="different devices"):
            cuasync.add(x0, x1)
    with pytest.raises(ArgumentError, match="at least one operand must be a tensor"):
        expr.op_node("add", [expr.Node("scalar", "x1", (), None, 1.0)] * 2)


def test_an_unsupported_dtype_is_refused_every_time() -> None:
    t = cuasync.empty((2,), "float8_e4m3fn").sync()
    for _ in range(2):
        with pytest.raises(DTypeError, match="float8_e4m3fn"):
            cuasync.add(t, 1.0)


def test_an_error_leaves_every_operand_unconsumed() -> None:
    x = _tensor([1.0, 2.0, 3.0])
    op = x * 2.0
    wrong = cuasync.empty((2,), "float32").sync()
    with pytest.raises(ShapeError, match="out has shape"):
        cuasync.add(op, 1.0, out=wrong)
    with pytest.raises(ShapeError, match="cannot be broadcast"):
        cuasync.add(op, wrong)
    with pytest.raises(ArgumentError, match="numpy array"):
        cuasync.add(op, np.ones(3))  # type: ignore[arg-type]
    np.testing.assert_array_equal(op.sync().to_host().sync(), [2.0, 4.0, 6.0])


def test_an_op_used_twice_in_one_expression_is_refused() -> None:
    op = _tensor([1.0]) * 2.0
    with pytest.raises(OpConsumedError):
        cuasync.add(op, op)


def test_out_is_accepted_at_once_only_where_nothing_can_be_wrong() -> None:
    x = _tensor(np.arange(8))
    row = _tensor(np.arange(4))
    with pytest.raises(ShapeError, match="broadcast view"):
        cuasync.add(row, 1.0, out=cuasync.broadcast_to(x[:1], (4,)))
    inner = x[1:] * 2.0
    with pytest.raises(AliasingError, match="out overlaps a tensor x1 reads"):
        cuasync.add(inner, 1.0, out=x[:-1])
    inner._take()  # (left unconsumed by the error)
    with pytest.raises(DTypeError, match="out has dtype int32"):
        cuasync.add(x, 1.0, out=cuasync.empty((8,), "int32").sync())
    with pytest.raises(ArgumentError, match="out must be a cuasync.Tensor"):
        cuasync.add(x, 1.0, out=np.empty(8, np.float32))  # type: ignore[arg-type]
    cuasync.add(x * 2.0, x, out=x).sync()  # in place, through a fused operand: allowed
    np.testing.assert_array_equal(x.to_host().sync(), np.arange(8) * 3)


def test_unusual_operands_take_the_python_rules() -> None:
    x = _tensor([1.0, 2.0])
    cases = ((True, np.float32), (np.float64(2), np.float64), (np.int8(3), np.float32))
    for scalar, dtype in cases:
        op = cuasync.multiply(x, scalar)
        assert op.dtype == dtype
        np.testing.assert_allclose(op.sync().to_host().sync(), np.multiply([1.0, 2.0], scalar))


def test_op_node_refuses_what_is_not_a_node() -> None:
    with pytest.raises(TypeError, match="not a Node"):
        expr.op_node("add", [1.0, 2.0])


def test_operators_take_tensors_ops_and_numbers_and_hand_the_rest_on() -> None:
    a = np.array([1.0, 2.0, 4.0], np.float32)
    x = _tensor(a)
    cases = {
        "x - 1.0": (lambda: x - 1.0, a - 1),
        "3 - x": (lambda: 3 - x, 3 - a),  # reflected: x is the second operand
        "(x * 2.0) / x": (lambda: (x * 2.0) / x, np.full(3, 2, np.float32)),
        "2j * x": (lambda: 2j * x, 2j * a.astype(np.complex64)),
        "x ** np.float32(2)": (lambda: x ** np.float32(2), a**2),  # numpy scalars: Python's way
        "np.float32(2) * x": (lambda: np.float32(2) * x, 2 * a),
        "x * np.array(2.0)": (lambda: x * np.array(2.0, np.float32), 2 * a),  # a 0-d array
        "x + True": (lambda: x + True, a + 1),
    }
    for name, (make, want) in cases.items():
        op = make()
        assert op.dtype == want.dtype, name
        np.testing.assert_allclose(op.sync().to_host().sync(), want, err_msg=name)
    with pytest.raises(cuasync.errors.HostArrayError, match="upload the array first"):
        x * np.ones(3)
    with pytest.raises(TypeError, match="unsupported operand"):
        x - "2"
    bound = x.__mul__
    np.testing.assert_array_equal(bound(2.0).sync().to_host().sync(), 2 * a)
    assert repr(type(x).__rsub__) == "<cuasync operator subtract (reflected)>"
    assert type(x).__mul__.__qualname__ == "TensorOperators.__mul__"
    assert str(inspect.signature(type(x).__mul__)) == "(self, other, /)"
    with pytest.raises(TypeError, match="first operand must be a cuasync Tensor or TensorOp"):
        type(x).__add__(5, x)  # type: ignore[operator]


@pytest.mark.anyio
async def test_an_awaited_op_takes_its_raw_launch_or_the_long_way(anyio_backend: str) -> None:
    # TensorOp.__await__ is native: a seen expression is launched as its raw launch; a
    # pending operand (an op writing out=, run first) takes the long way; an op awaited
    # twice raises as any op does, and nothing is left half done.
    a = np.arange(6, dtype=np.float32)
    x = await cuasync.from_host(a)
    o = await cuasync.empty((6,), "float32")
    for _ in range(2):  # (the first use prepares the kernel: the long way)
        got = await cuasync.exp(x * 0.5, out=o)
        assert got is o
    np.testing.assert_allclose(await o.to_host(), np.exp(a * 0.5), rtol=2e-6)
    chained = cuasync.add(cuasync.multiply(x, 2.0, out=o), 1.0)  # o is written, then read
    np.testing.assert_array_equal(await (await chained).to_host(), a * 2 + 1)
    op = x + 1.0
    await op
    with pytest.raises(OpConsumedError, match="already used"):
        await op


def _work_fields(op: Any) -> dict[str, Any]:
    work = op._node.value
    return {
        name: getattr(work, name)
        for name in ("_key", "_out", "_strides", "_shape", "_name", "_dtype")
    }


@pytest.mark.parametrize(
    ("name", "kwargs"),
    [
        ("sum", {}),
        ("sum", {"axis": 1}),
        ("sum", {"axis": (0, 1), "keepdims": True}),
        ("max", {"axis": -1}),
        ("mean", {"axis": 0}),
        ("argmax", {"axis": 1}),
        ("sum", {"dtype": "float64"}),
    ],
)
def test_a_seen_reduction_is_built_natively_as_the_long_way_builds_it(
    name: str, kwargs: dict[str, Any]
) -> None:
    """The native ``reduce_op`` (``reactor/python/reduce.c``) of arguments seen before
    gives the node, work and TensorOp that ``reductions._reduce_op`` gives."""
    from cuasync._ops import reductions

    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    x = _tensor(a)
    fn = getattr(cuasync, name)
    fn(x, **kwargs)._take()  # seen: recorded in _RESOLVED
    reductions.REDUCE.memo.clear()
    ops = [fn(x, **kwargs) for _ in range(2)]  # from _RESOLVED, then from the memo
    assert len(reductions.REDUCE.memo) >= 1
    axis, dtype = kwargs.get("axis"), kwargs.get("dtype")
    long_way = reductions._reduce_op(
        name, name, x, axis, dtype, None, kwargs.get("keepdims", False)
    )
    for native in ops:
        assert type(native) is TensorOp and type(native._node.value) is reductions._Reduction
        mine, theirs = _slots(native), _slots(long_way)
        assert mine.keys() == theirs.keys()
        assert (native.shape, native.dtype) == (long_way.shape, long_way.dtype)
        assert _work_fields(native) == _work_fields(long_way)
        pending, leaf = native._node, native._node.value._node
        want_pending, want_leaf = long_way._node, long_way._node.value._node
        for node, want in ((pending, want_pending), (leaf, want_leaf)):
            fields = ("kind", "name", "shape", "dtype", "children", "ins", "device")
            assert [getattr(node, f) for f in fields] == [getattr(want, f) for f in fields]
        assert leaf.value is x
        want = getattr(np, name)(a, **{k: v for k, v in kwargs.items() if k != "dtype"})
        np.testing.assert_allclose(native.sync().to_host().sync(), want, rtol=1e-6)
    long_way._take()


def test_a_reduction_the_native_builder_does_not_take_goes_the_long_way() -> None:
    """A TensorOp to reduce, an ``out=``, an axis list and a keepdims that is not a bool
    take ``reductions._reduce_op``: its results, and its errors worded as before."""
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    x = _tensor(a)
    s = cuasync.empty((3,), "float32").sync()
    for _ in range(2):  # (seen, the second time)
        np.testing.assert_allclose(
            cuasync.sum(x * 2.0, axis=0).sync().to_host().sync(), (a * 2).sum(0)
        )
        np.testing.assert_allclose(cuasync.sum(x, axis=0, out=s).sync().to_host().sync(), a.sum(0))
        with pytest.raises(ArgumentError, match="keepdims must be a bool"):
            cuasync.sum(x, keepdims=1)  # type: ignore[arg-type]
        with pytest.raises(ArgumentError):
            cuasync.sum(x, axis=[0])  # type: ignore[arg-type]
        with pytest.raises(ArgumentError, match="numpy array"):
            cuasync.sum(a)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="unexpected keyword argument 'axes'"):
        cuasync._ops.reductions.reduce_op("sum", "sum", x, axes=0)


def test_a_constant_operand_shares_its_leaf_and_each_value_is_its_own() -> None:
    """A Python number passed again as the same argument shares its leaf node (nodes
    are never changed); the same constant twice in one tree, and new values, still give
    numpy's results."""
    a = np.arange(6, dtype=np.float32)
    x = _tensor(a)
    c = 2.5
    first, second = cuasync.multiply(x, c), cuasync.multiply(x, c)
    assert first._node.children[1] is second._node.children[1]
    for op in (first, second):
        np.testing.assert_array_equal(op.sync().to_host().sync(), a * np.float32(c))
    twice = (x * c + c) * c  # the leaf three times in one tree
    want = (a * np.float32(c) + np.float32(c)) * np.float32(c)
    np.testing.assert_array_equal(twice.sync().to_host().sync(), want)
    for k in range(40):  # more values than the leaves kept: each bound as itself
        v = float(k) / 3
        got = cuasync.add(x * v, k).sync().to_host().sync()
        np.testing.assert_allclose(got, a * np.float32(v) + k, rtol=1e-6)


def test_elementwise_functions_are_their_declarations_applied_natively() -> None:
    """``cuasync.exp``, ``cuasync.where``, ... are native (no Python frame a call) and
    behave as the defs that declare them: signature, docstring and name, keyword operands
    where the def allows them, Python's own errors for a call that does not fit, pickled
    by name; and they apply their op (``pow`` applies ``power``)."""
    import pickle
    import typing
    import weakref

    x = cuasync.from_host(np.arange(4, dtype=np.float32)).sync()
    where: Any = cuasync._ops.elementwise.where  # (cuasync.where is sets.where, which calls it)
    for fn in (cuasync.exp, cuasync.add, where, cuasync.pow, cuasync.hypot):
        declared = inspect.unwrap(fn)
        assert inspect.isfunction(declared) and declared is not fn
        assert inspect.signature(fn) == inspect.signature(declared)
        assert fn.__doc__ == declared.__doc__ and fn.__doc__
        assert (fn.__name__, fn.__qualname__, fn.__module__) == (
            declared.__name__,
            declared.__qualname__,
            declared.__module__,
        )
        assert pickle.loads(pickle.dumps(fn)) is fn
        assert weakref.ref(fn)() is fn
        assert typing.get_type_hints(fn) == typing.get_type_hints(declared)
    assert cuasync.pow.op == "power"  # type: ignore[attr-defined]
    want = np.arange(4, dtype=np.float32)
    np.testing.assert_allclose(cuasync.pow(x, 2).sync().to_host().sync(), want**2)
    by_keyword = where(x > 1, x2=0.0, x1=x)
    np.testing.assert_array_equal(by_keyword.sync().to_host().sync(), np.where(want > 1, want, 0))
    out = cuasync.empty((4,)).sync()
    assert cuasync.exp(x, out=out).sync() is out
    np.testing.assert_allclose(out.to_host().sync(), np.exp(want), rtol=1e-6)
    pending = x * 2.0
    exp, add = cast(Any, cuasync.exp), cast(Any, cuasync.add)  # (calls mypy refuses too)
    for call, words in [
        (lambda: exp(pending, x), "takes 1 positional argument but 2 were given"),
        (lambda: exp(x, outs=x), "unexpected keyword argument 'outs'"),
        (lambda: exp(x=x), "positional-only arguments passed as keyword"),
        (lambda: add(x), "missing 1 required positional argument: 'x2'"),
        (lambda: where(x, x, x1=x), "multiple values for argument"),
    ]:
        with pytest.raises(TypeError, match=words):
            call()
    np.testing.assert_array_equal(pending.sync().to_host().sync(), want * 2)  # not consumed
