"""Tensor operations: elementwise math, reductions and matrix products.

``expr`` builds the expression tree (numpy's broadcasting and dtype rules, checked as
each node is built), ``codegen`` turns a tree into CUDA C++ and its numpy twin,
``tensorop`` is the lazy :class:`TensorOp` that carries a tree, and ``elementwise`` has
the public functions (``cuasync.add``, ``cuasync.exp``, ...). ``reductions``
(``cuasync.sum``, ``argmax``, ``vdot``, ``linalg.norm``, ...) feeds a tree into the
block-reduction kernels of ``reduce_codegen``. ``contract`` has the matrix products
(``matmul``, ``tensordot``, ``dot_general``), which ``gemm`` runs as batches of
BLAS-readable matrices through the backend's ``gemm``.
"""
