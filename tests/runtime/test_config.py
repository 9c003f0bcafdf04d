"""The ``CUASYNC_*`` environment variables: each numeric one is checked against its
documented range at first read, with an ``ArgumentError`` naming it and the range."""

from __future__ import annotations

import pytest
from helpers import run_script

from cuasync import _config
from cuasync.errors import ArgumentError

#: Each numeric variable and the ``Config`` field it sets.
FIELDS = {
    "CUASYNC_EMU_DEVICES": "emu_devices",
    "CUASYNC_EMU_DELAY_US": "emu_delay_us",
    "CUASYNC_EMU_MEMORY": "emu_memory",
    "CUASYNC_SPIN_BUDGET_US": "spin_budget_us",
    "CUASYNC_SLOTS": "slots",
    "CUASYNC_STALE_US": "stale_us",
    "CUASYNC_PINNED_IDLE_S": "pinned_idle_s",
    "CUASYNC_STAGING_THREADS": "staging_threads",
}


def test_every_numeric_variable_has_a_range() -> None:
    assert set(_config.RANGES) == set(FIELDS)


@pytest.mark.parametrize("name", sorted(FIELDS))
def test_a_numeric_variable_is_read_at_both_ends_of_its_range(monkeypatch, name: str) -> None:
    low, high = _config.RANGES[name]
    for value in (low, high):
        monkeypatch.setenv(name, str(value))
        assert getattr(_config._read(), FIELDS[name]) == value


@pytest.mark.parametrize("name", sorted(FIELDS))
def test_a_numeric_variable_past_its_range_is_refused_naming_it(monkeypatch, name: str) -> None:
    low, high = _config.RANGES[name]
    for raw in (str(low - 1), str(high + 1), "100000000000000000000", "abc", "nan", "1e400"):
        monkeypatch.setenv(name, raw)
        with pytest.raises(ArgumentError) as info:
            _config._read()
        assert f"{name} must be" in str(info.value)
        assert f"from {low} to {high}" in str(info.value)
        assert repr(raw) in str(info.value)


def test_the_pinned_idle_time_takes_fractions_and_off(monkeypatch) -> None:
    monkeypatch.setenv("CUASYNC_PINNED_IDLE_S", "86400.5")
    with pytest.raises(ArgumentError, match="from 0 to 86400 or off"):
        _config._read()
    for raw, value in (("2.5", 2.5), ("OFF", None), ("", 60.0)):
        monkeypatch.setenv("CUASYNC_PINNED_IDLE_S", raw)
        assert _config._read().pinned_idle_s == value


def test_a_huge_spin_budget_is_refused_at_the_first_op() -> None:
    """Was a bare ``OverflowError`` from deep inside the first await."""
    out = run_script(
        """
        import numpy as np, cuasync
        from cuasync.errors import ArgumentError
        try:
            cuasync.from_host(np.arange(4.0)).sync()
        except ArgumentError as exc:
            print(exc)
        """,
        CUASYNC_SPIN_BUDGET_US="100000000000000000000",
    ).stdout
    assert "CUASYNC_SPIN_BUDGET_US must be an integer from 0 to 1000000" in out


@pytest.mark.emulator_only(reason="the emulator's command delay")
def test_an_emulator_delay_past_its_range_is_refused() -> None:
    """A delay too long for ``time.sleep`` stopped a stream's worker thread: later ops hung."""
    import cuasync.emulator as emu

    high = _config.RANGES["CUASYNC_EMU_DELAY_US"][1]
    with pytest.raises(ArgumentError, match="us must be an int from 0 to 10000000"):
        emu.set_delay(10**20)
    with pytest.raises(ArgumentError):
        emu.set_delay(high + 1)
    assert emu.get_delay() == 0


def test_cuasync_native_is_on_or_off(monkeypatch) -> None:
    for raw, value in (("", True), ("on", True), ("OFF", False), (" off ", False)):
        monkeypatch.setenv("CUASYNC_NATIVE", raw)
        assert _config._read().native is value
    monkeypatch.setenv("CUASYNC_NATIVE", "no")
    with pytest.raises(ArgumentError, match="CUASYNC_NATIVE must be one of on, off; got 'no'"):
        _config._read()


def test_guarded_regions_follow_the_backend_unless_told(monkeypatch) -> None:
    """``CUASYNC_GUARDS``: ``auto`` keeps each backend's choice (memsets and cuBLAS calls
    on CUDA), ``on``/``off``/``memsets`` override it; anything else is refused."""
    import types

    from cuasync._launch.guard import guards_on

    on = types.SimpleNamespace(guards=frozenset(("memset", "library", "copy")))
    memsets = types.SimpleNamespace(guards=frozenset(("memset",)))
    off = types.SimpleNamespace(guards=frozenset())
    backends = (on, memsets, off)
    for raw, want in (  # (memset, library, copy) for each backend
        ("", ((True, True, True), (True, False, False), (False, False, False))),
        ("auto", ((True, True, True), (True, False, False), (False, False, False))),
        ("ON", ((True, True, True),) * 3),
        ("off", ((False, False, False),) * 3),
        ("memsets", ((True, False, False),) * 3),
    ):
        monkeypatch.setenv("CUASYNC_GUARDS", raw)
        monkeypatch.setattr(_config, "CONFIG", _config._read())
        got = tuple(tuple(guards_on(b, k) for k in ("memset", "library", "copy")) for b in backends)
        assert got == want, raw
    monkeypatch.setenv("CUASYNC_GUARDS", "maybe")
    with pytest.raises(ArgumentError, match="CUASYNC_GUARDS must be one of auto, on, off, memsets"):
        _config._read()
