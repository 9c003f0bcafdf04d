"""The ``cuasync`` pytest plugin (registered through the ``pytest11`` entry point).

Fixtures:

* ``cuasync_backend`` -- ``"cuda"`` or ``"emulator"``: which backend the tests run on.
* ``cuasync_no_leaks`` -- fails the test if device memory or completion slots are not back
  to where they were when it started (see :func:`cuasync.testing.no_leaks`).

Marker:

* ``@pytest.mark.cuasync_loops`` on an anyio test (``@pytest.mark.anyio``) runs it on
  asyncio, uvloop and trio; a loop whose package is missing is skipped with a reason.

>>> @pytest.mark.anyio
... @pytest.mark.cuasync_loops
... async def test_handler(cuasync_no_leaks):
...     with cuasync.testing.gate() as g:
...         ...
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator

import pytest

from .._backends import backend_name
from . import _leaks

_LOOPS: tuple[tuple[str, tuple[str, dict[str, object]], str | None], ...] = (
    ("asyncio", ("asyncio", {}), None),
    ("uvloop", ("asyncio", {"use_uvloop": True}), "uvloop"),
    ("trio", ("trio", {}), "trio"),
)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "cuasync_loops: run this anyio test on asyncio, uvloop and trio"
    )


@pytest.hookimpl(tryfirst=True)  # before the fixture params of anyio_backend apply
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if metafunc.definition.get_closest_marker("cuasync_loops") is None:
        return
    if "anyio_backend" not in metafunc.fixturenames:
        return
    params = []
    for name, value, module in _LOOPS:
        marks: tuple[pytest.MarkDecorator, ...] = ()
        if module is not None and importlib.util.find_spec(module) is None:
            marks = (pytest.mark.skip(reason=f"{module} is not installed"),)
        params.append(pytest.param(value, id=name, marks=marks))
    metafunc.parametrize("anyio_backend", params)


@pytest.fixture
def cuasync_backend() -> str:
    """Which backend this process uses: ``"cuda"`` or ``"emulator"``."""

    return backend_name()


@pytest.fixture
def cuasync_no_leaks() -> Iterator[_leaks.Snapshot]:
    """Asserts that memory and completion slots return to their starting point."""
    with _leaks.no_leaks() as before:
        yield before
