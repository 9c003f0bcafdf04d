"""``cuasync.linalg``: linear algebra on device tensors (numpy's ``linalg`` namespace).

>>> n = await cuasync.linalg.norm(x)                 # 2-norm of the flattened tensor
>>> rows = await cuasync.linalg.norm(m, axis=-1)     # the 2-norm of each row
"""

from __future__ import annotations

from ._ops.reductions import norm as norm

__all__ = ["norm"]
