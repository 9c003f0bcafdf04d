"""The slot ledger is the only owner of the completion slab's slots.

Every await, blocking wait, upload, readback, gate and cancellation claims, arms,
releases and retires its flag slot through ``SlotLedger`` (``reactor/python/ledger.c``): the
native core through ``ledger.h``'s functions, Python through ``hub.slots``. These tests
read the sources: no other C file touches the ledger's fields, and no Python module
keeps a free list, generations or a table of its own.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import cuasync
from cuasync._core import completion

ROOT = Path(__file__).resolve().parents[2]

#: A read or write of the ledger's own fields (``SlotLedger`` in reactor/python/ledger.h).
_FIELDS = re.compile(r"(slots|ledger|\bl)->(gens|state|free|nfree|table|retired|claims)\b")


def test_no_c_file_but_the_ledger_touches_its_fields() -> None:
    for path in sorted((ROOT / "reactor").rglob("*.[ch]")):
        if path.name not in ("ledger.c", "ledger.h"):
            hits = [m.group(0) for m in _FIELDS.finditer(path.read_text())]
            assert not hits, f"{path.name} touches the slot ledger's fields: {hits}"


def test_claiming_and_releasing_go_through_the_ledger_in_c() -> None:
    callers = {
        path.name
        for path in (ROOT / "reactor").rglob("*.[ch]")
        if re.search(r"\bledger_(claim|release|arm)\(", path.read_text())
    }
    # (completion.c: a finished completion's slot given back, HubCore.release)
    assert callers <= {"ledger.c", "ledger.h", "express.c", "express.h", "upload.c", "completion.c"}
    assert {"express.c", "express.h"} <= callers  # (the native core: claim, arm, settle)


def test_no_python_module_keeps_slots_of_its_own() -> None:
    pattern = re.compile(r"\.(free\.(pop|append)|gens\[|table\[|_free_slot\()")
    for path in sorted((ROOT / "cuasync").rglob("*.py")):
        hits = [line.strip() for line in path.read_text().splitlines() if pattern.search(line)]
        assert not hits, f"{path.relative_to(ROOT)} handles slots itself: {hits}"
    hub = completion.get_hub()
    for name in ("free", "gens", "table", "retired"):
        assert not hasattr(hub, name), f"Hub.{name}: the ledger owns it"


def test_a_slot_is_released_once() -> None:
    ledger = completion.get_hub().slots
    claimed = ledger.claim()
    assert claimed is not None
    slot, gen, address = claimed
    assert ledger.generation(slot) == gen and address == ledger.slab + 4 * slot
    ledger.release(slot)
    with pytest.raises(RuntimeError, match=f"slot {slot} is not claimed"):
        ledger.release(slot)
    with pytest.raises(IndexError):
        ledger.completion(ledger.nslots)


def test_every_slot_comes_back_after_work() -> None:
    ledger = completion.get_hub().slots
    before = ledger.in_use
    cuasync.zeros((16,)).sync()
    assert ledger.in_use == before
