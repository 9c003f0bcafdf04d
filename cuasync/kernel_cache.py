"""The on-disk cache of compiled kernels (cubins), shared by processes; on by default.

NVRTC takes a few hundred milliseconds per kernel. A kernel compiled once for an
architecture is read back from disk by later processes instead, as CuPy does with
``~/.cupy/kernel_cache``. Entries are keyed by a hash of everything that decides the
cubin: the source, the name expression, the compile flags (:class:`cuasync.CompileOptions`),
the headers it includes from the directories those flags name (``-I``, ``--include-path``,
``--pre-include``: their contents, read at each compile), the architecture and the NVRTC
version, so a changed kernel or header, or a new NVRTC, never gets a stale image.

Where it lives: ``$XDG_CACHE_HOME/cuasync/kernels``, by default
``~/.cache/cuasync/kernels`` (:func:`default_path`), created ``0700`` at first use.
``CUASYNC_KERNEL_CACHE=off`` turns it off, ``CUASYNC_KERNEL_CACHE=/some/dir`` moves it
(read once, at the first compile); :func:`enable` and :func:`disable` change it at run
time.

>>> from cuasync import kernel_cache
>>> kernel_cache.stats()
CacheStats(hits=0, misses=0, entries=12, path=PosixPath('/home/me/.cache/cuasync/kernels'),
           compiles=0)
>>> kernel_cache.disable()                  # this process compiles every kernel itself

Entries are written atomically (a temporary file renamed into place, mode ``0600``), so
concurrent processes of one user can share the directory; an unreadable, truncated or
damaged entry (each holds a SHA-256 of its image) counts as a miss. Delete the directory
(or call :func:`clear`) to drop everything: the next entry stored makes it again.

Trust: an entry is machine code that runs in this process's GPU context, where it can
write any device memory and the host memory mapped into it. So, as CPython does for
``__pycache__`` and pip for its cache, the directory is created ``0700`` and an entry is
only loaded when it and its directory belong to this process's user and no other user
can write to either; anything else is a miss, with one ``RuntimeWarning`` per directory
saying what to fix. Never point the cache at a directory other users can write to.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import stat
import struct
import tempfile
import threading
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ._config import CONFIG
from ._launch.nvrtc import compiles, nvrtc_version
from .errors import ArgumentError

__all__ = [
    "CacheStats",
    "clear",
    "default_path",
    "disable",
    "enable",
    "enabled",
    "key_for",
    "lookup",
    "stats",
    "store",
]

_MAGIC = b"CUASYNC-CUBIN-2\n"  # then: name length, image length, SHA-256 of name + image
_SUFFIX = ".cubin"
#: The prefix of an entry being written (renamed into place once whole).
_TEMPORARY = ".tmp-"
_FORMAT = 2  # bump when the key or the entry layout changes
_DIGEST = 32


@dataclass(frozen=True)
class CacheStats:
    """Counters since :func:`enable` and the number of entries on disk.

    ``hits``/``misses``: lookups that found, or did not find, a compiled kernel;
    ``entries``: kernels in the cache directory; ``path``: that directory, or None while
    the cache is disabled; ``compiles``: NVRTC compilations this process has made, cache
    or no cache (0 in a process that found every kernel on disk).

    >>> cuasync.kernel_cache.stats().hits
    """

    hits: int
    misses: int
    entries: int
    path: Path | None
    compiles: int = 0


class _State:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.path: Path | None = None
        self.configured = False  # CUASYNC_KERNEL_CACHE read (or enable/disable called)
        self.hits = 0
        self.misses = 0
        self.nvrtc: tuple[int, int] | None = None
        self.warned: set[Path] = set()  # directories already warned about


_state = _State()


def default_path() -> Path:
    """``$XDG_CACHE_HOME/cuasync/kernels``, by default ``~/.cache/cuasync/kernels``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "cuasync" / "kernels"


def _configure() -> Path | None:
    """The cache directory ``CUASYNC_KERNEL_CACHE`` asks for (read once): the default
    one unless ``off``. A directory named there that cannot be made raises
    ``ArgumentError``; the default one that cannot (a read-only home) leaves it off."""

    raw = CONFIG.kernel_cache
    target: Path | None = None
    if raw.lower() != "off":
        named = raw.lower() not in ("", "on")
        target = Path(raw).expanduser() if named else default_path()
        try:
            target.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            if named:
                raise ArgumentError(
                    f"CUASYNC_KERNEL_CACHE={raw!r} cannot be used as a kernel cache: {exc}; "
                    "name a directory you can write, or set it to off"
                ) from None
            target = None
    with _state.lock:
        if not _state.configured:  # (enable() or disable() may have come first)
            _state.path = target
            _state.configured = True
        return _state.path


def _path() -> Path | None:
    """The cache directory in use, or None while the cache is off."""
    if not _state.configured:
        return _configure()
    return _state.path


def enable(path: str | os.PathLike[str] | None = None) -> Path:
    """Cache compiled kernels in ``path`` (default: :func:`default_path`; created
    ``0700`` if missing) from now on; returns it.

    Resets the hit and miss counters. Calling it again switches to another directory.
    The directory must belong to you and be writable by you only, or its entries are
    ignored (a ``RuntimeWarning`` says so).
    """
    if path is not None and not isinstance(path, (str, os.PathLike)):
        raise ArgumentError(f"path must be a str, a path or None, got {type(path).__name__}")
    target = Path(path).expanduser() if path is not None else default_path()
    try:
        target.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise ArgumentError(
            f"path={str(target)!r} cannot be used as a kernel cache: {exc}"
        ) from None
    if not os.access(target, os.W_OK):
        raise ArgumentError(f"path={str(target)!r} is not writable")
    with _state.lock:
        _state.path = target
        _state.configured = True
        _state.hits = 0
        _state.misses = 0
    problem = _untrusted_directory(target)
    if problem is not None:
        _warn_once(target, problem)
    return target


def disable() -> None:
    """Stop using the disk cache (the files stay where they are)."""
    with _state.lock:
        _state.path = None
        _state.configured = True


def enabled() -> bool:
    """Whether the cache is in use (by default, or since :func:`enable`)."""
    return _path() is not None


def _entries(path: Path | None) -> int:
    if path is None:
        return 0
    try:
        return sum(1 for p in path.iterdir() if p.suffix == _SUFFIX)
    except OSError:
        return 0


def stats() -> CacheStats:
    """Hits and misses since :func:`enable`, and the entries in the cache directory."""

    path = _path()
    with _state.lock:
        hits, misses = _state.hits, _state.misses
    return CacheStats(
        hits=hits, misses=misses, entries=_entries(path), path=path, compiles=compiles()
    )


def clear() -> int:
    """Delete every entry of the cache in use, and what a writer that crashed left
    (``.tmp-*``; one writing now stores nothing); returns how many entries were removed."""
    path = _path()
    if path is None:
        return 0
    removed = 0
    try:
        entries = list(path.iterdir())
    except FileNotFoundError:  # (deleted: nothing to remove; the next store makes it again)
        return 0
    for entry in entries:
        if entry.suffix == _SUFFIX:
            with contextlib.suppress(OSError):
                entry.unlink()
                removed += 1
        elif entry.name.startswith(_TEMPORARY):
            with contextlib.suppress(OSError):
                entry.unlink()
    return removed


def _normal(path: Path) -> Path:
    """``path`` with its ``..`` folded in (two headers including each other through
    ``../`` name one file each time, not a path growing without end)."""
    return Path(os.path.normpath(path))


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except OSError:  # (a name too long, a loop of links: not a header it can read)
        return False


def _digest(body: bytes) -> bytes:
    """An entry's check of its name and image (a damaged entry is a miss)."""
    return hashlib.sha256(body).digest()


def _nvrtc_version() -> tuple[int, int]:
    if _state.nvrtc is None:
        _state.nvrtc = nvrtc_version()
    return _state.nvrtc


def key_for(
    source: str,
    name_expression: str,
    flags: Sequence[str],
    arch: str,
    nvrtc_version: tuple[int, int] | None = None,
) -> str | None:
    """The cache key of one compilation, or ``None`` while the cache is disabled.

    A SHA-256 over the source, name expression, NVRTC flags, the headers the source
    includes from the directories the flags name (each one's path and contents, read
    now), architecture and NVRTC version (asked from NVRTC when not given).
    """
    if _path() is None:
        return None
    version = _nvrtc_version() if nvrtc_version is None else nvrtc_version
    h = hashlib.sha256()
    fields: list[str | bytes] = [
        str(_FORMAT),
        source,
        name_expression,
        "\0".join(flags),
        arch,
        "{}.{}".format(*version),
    ]
    for header, contents in _user_headers(source, flags):
        fields += [header, contents]
    for f in fields:
        data = f.encode() if isinstance(f, str) else f
        h.update(struct.pack("<Q", len(data)))
        h.update(data)
    return h.hexdigest()


_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*([<"])([^>"\n]+)[>"]', re.M)
_HEADERS_MAX = 4096  # headers read for one key, at most (then the rest are named only)


def _user_headers(source: str, flags: Sequence[str]) -> list[tuple[str, bytes]]:
    """The headers ``source`` includes (and they include, in turn) that resolve in the
    include directories ``flags`` name, and the files they pre-include: each one's path
    and contents (``b"?"`` where it cannot be read). Headers found nowhere there (CUDA's
    own) are left to the NVRTC version. Nothing to read without such flags."""
    dirs: list[Path] = []
    pre: list[Path] = []
    items = iter(flags)
    for flag in items:
        for prefix, into in (("--include-path=", dirs), ("-I", dirs), ("--pre-include=", pre)):
            if flag.startswith(prefix):
                value = flag[len(prefix) :] or next(items, "")
                if value:
                    into.append(Path(value))
                break
        else:
            if flag in ("--include-path", "--pre-include", "-include"):
                value = next(items, "")
                if value:
                    (dirs if flag == "--include-path" else pre).append(Path(value))
    if not dirs and not pre:
        return []
    found: list[tuple[str, bytes]] = []
    seen: set[Path] = set()
    pending: list[tuple[str, Path | None]] = [(str(p), None) for p in reversed(pre)]
    pending += [(m.group(2), None) for m in reversed(list(_INCLUDE.finditer(source)))]
    while pending and len(found) < _HEADERS_MAX:
        name, beside = pending.pop()
        where = [beside, *dirs] if beside is not None else dirs
        tried = [Path(name)] if Path(name).is_absolute() else [d / name for d in where]
        path = next((p for t in tried if _is_file(p := _normal(t))), None)
        if path is None or path in seen:
            continue
        seen.add(path)
        try:
            contents = path.read_bytes()
        except OSError:
            found.append((str(path), b"?"))
            continue
        found.append((str(path), contents))
        text = contents.decode(errors="replace")
        pending += [
            (m.group(2), path.parent if m.group(1) == '"' else None)
            for m in reversed(list(_INCLUDE.finditer(text)))
        ]
    return found


def _entry_path(key: str) -> Path | None:
    path = _path()
    if path is None:
        return None
    if not (len(key) == 64 and all(c in "0123456789abcdef" for c in key)):
        raise ArgumentError(f"key must be a key_for() digest, got {key!r}"[:120])
    return path / f"{key}{_SUFFIX}"


def _foreign(st: os.stat_result) -> str | None:
    """Why a file or directory with this ``stat`` may hold another user's code, or None."""
    uid = os.geteuid() if hasattr(os, "geteuid") else None
    if uid is not None and st.st_uid != uid:
        return f"is owned by uid {st.st_uid}, not by this process's user (uid {uid})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"can be written by other users (mode {stat.filemode(st.st_mode)})"
    return None


def _untrusted_directory(path: Path) -> str | None:
    try:
        st = path.stat()
    except OSError:
        return None  # gone: every lookup misses anyway
    problem = _foreign(st)
    if problem is None:
        return None
    return (
        f"the directory {problem}; use a directory only you can write "
        f"(chmod 700 {str(path)!r} if it is yours, or kernel_cache.enable() without a path)"
    )


def _warn_once(path: Path, problem: str) -> None:
    with _state.lock:
        if path in _state.warned:
            return
        _state.warned.add(path)
    warnings.warn(
        f"cuasync.kernel_cache: not loading kernels from {str(path)!r}: {problem}. A cached "
        "kernel runs in this process's GPU context, so entries that another user could "
        "have written are treated as misses",
        RuntimeWarning,
        stacklevel=3,
    )


def _read_trusted(entry: Path) -> tuple[bytes, str | None]:
    """The entry's bytes (``b""`` if unreadable), or why it must not be loaded."""
    try:
        with open(entry, "rb") as f:
            # fstat the file actually opened, so it cannot be swapped after the check.
            problem = _foreign(os.fstat(f.fileno()))
            if problem is not None:
                return b"", (
                    f"its entry {entry.name} {problem}; delete the entries you did not write "
                    "(kernel_cache.clear())"
                )
            return f.read(), None
    except OSError:
        return b"", None


def lookup(key: str) -> tuple[bytes, str] | None:
    """The ``(cubin, lowered name)`` stored under ``key``, or ``None`` (counted as a miss).

    Also ``None`` while the cache is disabled (not counted). An entry another user could
    have written is a miss too (see the module's docstring).
    """
    entry = _entry_path(key)
    if entry is None:
        return None
    found: tuple[bytes, str] | None = None
    problem = _untrusted_directory(entry.parent)
    data = b""
    if problem is None:
        data, problem = _read_trusted(entry)
    if problem is not None:
        _warn_once(entry.parent, problem)
    start = len(_MAGIC) + 12 + _DIGEST
    if data.startswith(_MAGIC) and len(data) >= start:
        name_len, image_len = struct.unpack_from("<IQ", data, len(_MAGIC))
        digest = data[start - _DIGEST : start]
        body = data[start:]
        if len(body) == name_len + image_len and image_len and _digest(body) == digest:
            try:
                name = body[:name_len].decode()
            except UnicodeDecodeError:
                name = ""
            if name:
                found = (body[name_len:], name)
    with _state.lock:
        if found is None:
            _state.misses += 1
        else:
            _state.hits += 1
    return found


def store(key: str, image: bytes, lowered_name: str) -> None:
    """Save a compiled ``image`` and its lowered kernel name under ``key``.

    Does nothing while the cache is disabled or its directory is not private to this
    user. Write failures (a full disk, a read-only directory) are ignored: the cache is an
    optimization, never a reason to fail.
    """
    entry = _entry_path(key)
    if entry is None:
        return
    if not isinstance(image, (bytes, bytearray)) or not image:
        raise ArgumentError("image must be the non-empty bytes of a compiled kernel")
    if not isinstance(lowered_name, str) or not lowered_name:
        raise ArgumentError("lowered_name must be the kernel's non-empty lowered name")
    if _untrusted_directory(entry.parent) is not None:
        return  # lookups would refuse it anyway
    name = lowered_name.encode()
    body = name + bytes(image)
    payload = _MAGIC + struct.pack("<IQ", len(name), len(image)) + _digest(body) + body
    try:
        # mkstemp: a new file in the same directory (so the rename is atomic), mode 0600.
        try:
            fd, tmp = tempfile.mkstemp(prefix=_TEMPORARY, dir=entry.parent)
        except FileNotFoundError:  # (the directory was deleted: made again, private)
            entry.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=_TEMPORARY, dir=entry.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(payload)
            os.replace(tmp, entry)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    except OSError:
        pass
