"""Errors that cannot propagate: destructors report them once, through logging."""

from __future__ import annotations

import gc
import logging
import sys

import pytest

import cuasync
from cuasync import _exceptions
from cuasync._backends import get_backend
from cuasync.errors import DeviceFaultError, DriverError


@pytest.fixture(autouse=True)
def fresh_reports(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_exceptions, "_reported", set())


def test_reported_once_per_kind_with_the_traceback(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="cuasync")
    for _ in range(3):
        _exceptions.report_once("cuasync.memory", "free device memory", DriverError(400))
    _exceptions.report_once("cuasync.memory", "free device memory", ValueError("other kind"))
    records = [r for r in caplog.records if r.name == "cuasync.memory"]
    assert [r.levelno for r in records] == [logging.WARNING, logging.WARNING]
    assert "free device memory" in records[0].getMessage()
    assert records[0].exc_info is not None and records[0].exc_info[0] is DriverError


def test_a_faulted_device_is_expected_and_logged_at_info(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="cuasync")
    _exceptions.report_once("cuasync.device", "destroy a stream", DeviceFaultError(700))
    (record,) = [r for r in caplog.records if r.name == "cuasync.device"]
    assert record.levelno == logging.INFO and "faulted" in record.getMessage()


def test_quiet_while_the_interpreter_finalizes(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "is_finalizing", lambda: True)
    _exceptions.report_once("cuasync.graph", "destroy a graph", DriverError(400))
    assert not [r for r in caplog.records if r.name.startswith("cuasync")]


def test_a_failing_event_destructor_neither_raises_nor_stays_silent(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = get_backend()
    destroy = backend.event_destroy
    leaked: list[int] = []

    def failing(handle: int) -> None:
        leaked.append(handle)
        raise DriverError(400, "cuEventDestroy")

    events = [cuasync.Event() for _ in range(3)]
    monkeypatch.setattr(backend, "event_destroy", failing)
    caplog.set_level(logging.INFO, logger="cuasync")
    del events
    gc.collect()
    monkeypatch.undo()
    for handle in leaked:
        destroy(handle)
    assert len(leaked) == 3
    records = [r for r in caplog.records if r.name == "cuasync.device"]
    assert len(records) == 1 and "destroy an event" in records[0].getMessage()
