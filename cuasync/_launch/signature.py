"""Reading a ``__global__`` function's parameters out of CUDA C++ source.

Only what a launch needs: for each parameter its name, whether it is a pointer, whether
the pointee is ``const`` (const pointers are inputs, the others outputs) and the numpy
dtype of the scalar or pointee when the C type is a known one. Template parameters are
substituted from the name expression (``"axpy<float>"``).

A source that includes ``<cuasync/cancel.cuh>`` gets the header's text in place of the
include and a hidden trailing parameter, ``unsigned long long cuasync_cancel_word_``,
added to the kernel's declarations (:func:`with_cancel_word`): launches fill it with
the current cancel scope's word (:mod:`cuasync._launch.cancel`).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from importlib import resources
from typing import Any

import numpy as np

from .._backends.base import CANCEL_PARAM
from .._dtypes import DTYPES, SUPPORTED
from ..errors import KernelCompileError

_C_TYPES: dict[str, str] = {ctype: d.name for d in DTYPES.values() for ctype in d.ctypes}

_QUALIFIERS = {"const", "volatile", "__restrict__", "__restrict", "restrict", "struct"}


@dataclass(frozen=True)
class Param:
    """One kernel parameter."""

    name: str
    ctype: str
    pointer: bool
    const: bool
    dtype: np.dtype[Any] | None

    @property
    def is_output(self) -> bool:
        return self.pointer and not self.const

    @property
    def hidden(self) -> bool:
        """Whether launches fill it themselves: the cancel word (``CANCEL_PARAM``)."""
        return self.name == CANCEL_PARAM

    def describe(self) -> str:
        star = "*" if self.pointer else ""
        const = "const " if self.const else ""
        return f"{const}{self.ctype}{star} {self.name}"


def _split_top_level(text: str) -> list[str]:
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for ch in text:
        if ch in "<([":
            depth += 1
        elif ch in ">)]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(current).strip())
            current = []
        else:
            current.append(ch)
    tail = "".join(current).strip()
    if tail:
        parts.append(tail)
    return parts


def _strip_comments(source: str) -> str:
    source = re.sub(r"/\*.*?\*/", " ", source, flags=re.S)
    return re.sub(r"//[^\n]*", " ", source)


def _template_bindings(source: str, base: str, name: str) -> dict[str, str]:
    if "<" not in name:
        return {}
    args = _split_top_level(name[name.index("<") + 1 : name.rindex(">")])
    pattern = re.compile(
        r"template\s*<([^>]*)>\s*(?:__global__|[\w\s]*__global__)[\w\s()]*?\b"
        + re.escape(base)
        + r"\s*\("
    )
    m = pattern.search(source)
    if not m:
        return {}
    names = []
    for decl in _split_top_level(m.group(1)):
        words = decl.replace("=", " = ").split()
        if "=" in words:
            words = words[: words.index("=")]
        names.append(words[-1])
    return dict(zip(names, args, strict=False))


def parse_params(source: str, name: str) -> list[Param]:
    """The parameters of the ``__global__`` function named by ``name``."""
    text = _strip_comments(source)
    base = name.split("<", 1)[0].strip()
    m = re.search(r"__global__[^;{]*?\b" + re.escape(base) + r"\s*\(", text)
    if not m:
        raise KernelCompileError(
            f"no __global__ function named {base!r} in the kernel source; check the name "
            "(for templates pass a name expression like 'axpy<float>')"
        )
    depth, i = 1, m.end()
    while depth and i < len(text):
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        i += 1
    raw = text[m.end() : i - 1].strip()
    if raw in ("", "void"):
        return []
    bindings = _template_bindings(text, base, name)
    params: list[Param] = []
    for decl in _split_top_level(raw):
        decl = re.sub(r"\[[^\]]*\]", "[]", decl.split("=", 1)[0].strip())  # (x[4][4]: x)
        depth = decl.count("*") + ("[" in decl)  # (levels of indirection: an array decays)
        star = decl.find("*")
        before = decl[:star] if star >= 0 else decl
        const = "const" in before.split()
        words = [w for w in re.split(r"[\s*&\[\]]+", decl) if w]
        named = len(words) > 1 and not _unnamed(decl, words)
        pname = words[-1] if named else f"arg{len(params)}"
        type_words = [w for w in (words[:-1] if named else words) if w not in _QUALIFIERS]
        ctype = " ".join(bindings.get(w, w) for w in type_words)
        ctype = _canonical(" ".join(bindings.get(ctype, ctype).split()))
        dtype_name = _C_TYPES.get(ctype)
        if depth > 1:  # a pointer to pointers: its elements are device addresses
            ctype, dtype_name = ctype + "*" * (depth - 1), "uint64"
        dtype = SUPPORTED.get(dtype_name) if dtype_name else None
        params.append(Param(pname, ctype, depth > 0, const, dtype))
    return params


#: The words C spells its integer types with, in any order (``long unsigned int``).
_INTEGER_WORDS = frozenset(("signed", "unsigned", "short", "long", "int", "char"))


def _canonical(ctype: str) -> str:
    """An integer type's spelling as :data:`_C_TYPES` has it (``long long int``: ``long
    long``; ``signed``: ``int``; ``long unsigned int``: ``unsigned long``); another type
    as it is."""
    words = ctype.split()
    if not words or not set(words) <= _INTEGER_WORDS:
        return ctype
    unsigned = "unsigned" in words
    if "char" in words:
        return "unsigned char" if unsigned else "signed char" if "signed" in words else "char"
    size = "short" if "short" in words else " ".join(["long"] * words.count("long"))
    if unsigned:
        return f"unsigned {size or 'int'}"
    return size or "int"


def _unnamed(decl: str, words: list[str]) -> bool:
    """Whether a parameter declaration gives no name (``const float*``, ``unsigned int``):
    nothing after its last ``*``, or every word a type's."""
    if "*" in decl and not decl.rsplit("*", 1)[1].strip():
        return True
    kept = [w for w in words if w not in _QUALIFIERS]
    return bool(kept) and (set(kept) <= _INTEGER_WORDS or " ".join(kept) in _C_TYPES)


_CANCEL_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*[<"]cuasync/cancel\.cuh[>"][^\n]*$', re.M)


@functools.cache
def cancel_header() -> str:
    """The text of ``cuasync/cancel.cuh`` (package data: ``cuasync/kernels/cancel.cuh``)."""
    return resources.files("cuasync.kernels").joinpath("cancel.cuh").read_text(encoding="utf-8")


def with_cancel_word(source: str, name: str) -> str:
    """``source`` with ``#include <cuasync/cancel.cuh>`` expanded and the hidden cancel-word
    parameter appended to every ``__global__`` declaration of ``name``; ``source`` as it
    is when it does not include the header (or already declares the parameter).

    >>> with_cancel_word('#include <cuasync/cancel.cuh>\n__global__ void k(int n) {}', "k")
    '...__global__ void k(int n, unsigned long long cuasync_cancel_word_) {}'
    """
    if not _CANCEL_INCLUDE.search(source) or CANCEL_PARAM in source:
        return source
    text = source
    base = re.escape(name.split("<", 1)[0].strip())
    ends: list[tuple[int, bool]] = []  # the closing parenthesis of each declaration
    for m in re.finditer(r"__global__[^;{]*?\b" + base + r"\s*\(", text):
        depth, i = 1, m.end()
        while depth and i < len(text):
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        inner = _strip_comments(text[m.end() : i - 1]).strip()
        ends.append((i - 1, inner in ("", "void")))
    for end, empty in reversed(ends):
        start = text.rindex("(", 0, end) + 1 if empty else end
        head = "" if empty else ", "
        text = f"{text[:start]}{head}unsigned long long {CANCEL_PARAM}{text[end:]}"
    return _CANCEL_INCLUDE.sub(lambda _: cancel_header(), text)
