"""The CUDA error codes: one table names and explains them for both backends."""

from __future__ import annotations

import pytest

from cuasync._backends.base import EmulatedFault
from cuasync._curesult import STICKY, Code
from cuasync.errors import STICKY_CODES, DeviceFaultError, DriverError, driver_error


@pytest.mark.parametrize("code", list(Code), ids=lambda c: c.name)
def test_every_known_code_has_its_driver_name_and_an_explanation(code: Code) -> None:
    error = driver_error(int(code), "cuSomething", "detail")
    assert type(error.code) is int and error.code == code
    assert error.name == f"CUDA_ERROR_{code.name}" and error.explanation
    assert str(error) == f"cuSomething: {error.name}: {error.explanation} (detail)"
    # sticky codes poison the context: they are DeviceFaultErrors, the others are not
    assert isinstance(error, DeviceFaultError) == (code in STICKY)


def test_the_sticky_codes_are_the_context_killing_ones() -> None:
    assert STICKY_CODES is STICKY
    assert {700, 702, 710, 714, 715, 716, 719} == STICKY
    assert EmulatedFault.code == Code.LAUNCH_FAILED == 719


def test_an_unknown_code_still_says_which() -> None:
    error = DriverError(12345, "cuX")
    assert error.name == "CUresult 12345" and "CUDA driver API documentation" in str(error)
