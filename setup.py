"""Declares the native extension; everything else lives in pyproject.toml.

The build stamps the module with a hash of its sources (``SOURCE_HASH``), so that
``cuasync._native`` can refuse a build left over from other sources in a checkout.
"""

import hashlib
from pathlib import Path

from setuptools import Extension, setup

NATIVE = Path(__file__).parent / "reactor"


def source_hash(folder: Path) -> str:
    """The hash cuasync/_native.py compares: every .c and .h file of ``folder``, by name."""
    digest = hashlib.sha256()
    for path in sorted(folder.glob("*.[ch]")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


setup(
    ext_modules=[
        Extension(
            "cuasync._reactor",
            sources=[
                f"reactor/{name}.c"
                for name in (
                    *("module", "reactor", "queue", "driver", "submit"),
                    *("ledger", "cores", "express", "upload", "alloc", "launcher", "dlpack"),
                )
            ],
            depends=[str(p) for p in sorted(NATIVE.glob("*.h"))],
            define_macros=[("CUASYNC_SOURCE_HASH", f'"{source_hash(NATIVE)}"')],
            extra_compile_args=["-O2", "-std=c11", "-Wall", "-Wextra"],
            libraries=["pthread"],
        )
    ]
)
