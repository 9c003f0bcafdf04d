"""Caches of what the ops have seen: bounded dicts that start over when full.

The tensor ops keep what a seen kind of call decided (a launch plan, checked arguments,
a layout) in a dict keyed by what decides it; shapes computed per request would grow
such a dict without end, so each starts over at :data:`LIMIT` entries (:func:`remember`).

>>> plan = remember(_plans, key, make_plan())
"""

from __future__ import annotations

from typing import Any, TypeVar

__all__ = ["LIMIT", "remember"]

V = TypeVar("V")

#: The entries a cache of seen kinds holds before it starts over.
LIMIT = 4096


def remember(cache: dict[Any, Any], key: Any, value: V, memo: Any = None) -> V:
    """``value`` recorded as ``key``'s in ``cache`` (emptied first when it holds
    :data:`LIMIT` entries, with ``memo``: the native ``Memo`` of its recent answers, which
    only answers what the dict holds), and returned.

    >>> layout = remember(_GENERIC, key, make_layout())
    """
    if len(cache) >= LIMIT:
        cache.clear()
        if memo is not None:
            memo.clear()
    cache[key] = value
    return value
