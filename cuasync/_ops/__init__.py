"""Tensor operations: elementwise math and reductions, fused into generated kernels.

``expr`` builds the expression tree (numpy's broadcasting and dtype rules, checked as
each node is built), ``codegen`` turns a tree into CUDA C++ and its numpy twin,
``tensorop`` is the lazy :class:`TensorOp` that carries a tree, ``elementwise`` has
the public functions (``cuasync.add``, ``cuasync.exp``, ...), and ``reductions``
(``cuasync.sum``, ``argmax``, ``vdot``, ``linalg.norm``, ...) feeds a tree into the
block-reduction kernels of ``reduce_codegen``.
"""
