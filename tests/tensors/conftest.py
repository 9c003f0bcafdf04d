"""The tensor ops' tests run on asyncio alone: an op's result does not depend on the loop
that awaits it (the loops are the subject of ``tests/runtime``)."""

from __future__ import annotations

import pytest


@pytest.fixture
def anyio_backend() -> tuple[str, dict[str, object]]:
    return ("asyncio", {})
