"""Reading a ``__global__`` function's parameters out of CUDA C++ source.

Only what a launch needs: for each parameter its name, whether it is a pointer, whether
the pointee is ``const`` (const pointers are inputs, the others outputs) and the numpy
dtype of the scalar or pointee when the C type is a known one. Template parameters are
substituted from the name expression (``"axpy<float>"``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np

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
        decl = decl.split("=", 1)[0].strip()
        pointer = "*" in decl or "[" in decl
        star = decl.find("*")
        before = decl[:star] if star >= 0 else decl
        const = "const" in before.split()
        words = [w for w in re.split(r"[\s*&\[\]]+", decl) if w]
        pname = words[-1] if len(words) > 1 else f"arg{len(params)}"
        type_words = [w for w in (words[:-1] if len(words) > 1 else words) if w not in _QUALIFIERS]
        ctype = " ".join(bindings.get(w, w) for w in type_words)
        ctype = " ".join(bindings.get(ctype, ctype).split())
        dtype_name = _C_TYPES.get(ctype)
        dtype = SUPPORTED.get(dtype_name) if dtype_name else None
        params.append(Param(pname, ctype, pointer, const, dtype))
    return params
