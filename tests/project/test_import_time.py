"""``import cuasync`` stays light: ml_dtypes (1-2 s to import) loads at the first use of
bfloat16 or FP8, and each way a program can first meet those dtypes works as before.

Each script runs in a fresh interpreter, where nothing has loaded ml_dtypes yet.
"""

from __future__ import annotations

import pytest
from helpers import run_script

pytest.importorskip("ml_dtypes")


def test_import_cuasync_does_not_import_ml_dtypes() -> None:
    out = run_script(
        """
        import sys, cuasync
        print("ml_dtypes" in sys.modules)
        """
    ).stdout
    assert out.split() == ["False"]


#: A program's first use of bfloat16 or FP8, and what it prints.
FIRST_USES = {
    "name": (
        "t = cuasync.full((3,), 1.5, 'bfloat16').sync(); print(t.dtype, t.to_host().sync())",
        "bfloat16 [1.5 1.5 1.5]",
    ),
    "fp8 name": (
        "t = cuasync.zeros((2,), 'float8_e4m3fn').sync(); print(t.dtype, t.to_host().sync())",
        "float8_e4m3fn [0 0]",
    ),
    # an array of ml_dtypes' type: ml_dtypes imported by the program, not yet by cuasync
    "array": (
        "import ml_dtypes; a = np.array([1.5, 2.0], ml_dtypes.bfloat16)\n"
        "t = cuasync.from_host(a).sync(); print(t.dtype, t.to_host().sync())",
        "bfloat16 [1.5 2]",
    ),
    "numpy dtype": (
        "import ml_dtypes; t = cuasync.ones((2,), np.dtype(ml_dtypes.float8_e5m2)).sync()\n"
        "print(t.dtype, t.to_host().sync())",
        "float8_e5m2 [1 1]",
    ),
    # a kernel signature's C type, and a scalar too large for it
    "kernel parameter": (
        "k = cuasync.Kernel('extern \"C\" __global__ void f(__nv_bfloat16 x, float* o) {}',"
        " 'f', emulate=lambda x, o: None)\n"
        "try:\n    k[1, 1](1e39, cuasync.zeros(1).sync())\n"
        "except cuasync.errors.LaunchError as e:\n    print(e)",
        "does not fit in bfloat16",
    ),
    "listing": (
        "from cuasync._dtypes import SUPPORTED; print(list(SUPPORTED)[9:11], len(SUPPORTED))",
        "['float16', 'bfloat16'] 17",
    ),
}


@pytest.mark.parametrize("case", FIRST_USES)
def test_the_first_bfloat16_or_fp8_use_loads_ml_dtypes(case: str) -> None:
    code, expected = FIRST_USES[case]
    out = run_script(
        "import sys, numpy as np, cuasync\nassert 'ml_dtypes' not in sys.modules\n" + code
    ).stdout
    assert expected in out, out
