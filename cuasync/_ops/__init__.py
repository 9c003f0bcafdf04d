"""Tensor operations: elementwise math on tensors, fused into one kernel per expression.

``expr`` builds the expression tree (numpy's broadcasting and dtype rules, checked as
each node is built), ``codegen`` turns a tree into CUDA C++ and its numpy twin,
``tensorop`` is the lazy :class:`TensorOp` that carries a tree, and ``elementwise`` has
the public functions (``cuasync.add``, ``cuasync.exp``, ...). ``contract`` has the
matrix products (``matmul``, ``tensordot``, ``dot_general``), which ``gemm`` runs as
batches of BLAS-readable matrices through the backend's ``gemm``.
"""
