"""Partitions: a tensor split into tiles, as a kernel launch's output and grid.

A :class:`Partition` is one block per tile: a launch infers its grid from it and checks
an explicit grid against it. ``Tensor.partition_prefix`` relaxes the check to a per-axis
prefix of the tiles, and :meth:`Partition.map` describes a persistent kernel: a fixed
number of blocks that loop over the tiles (cuTile's ``partition_prefix`` and
``partition.map``). The kernel's CUDA code does its own indexing; a partition gives the
launch its grid and its checks, and marks the tensor as the kernel's output.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from .._tensor import Tensor, check_shape
from .._tensor import methods as tensor_methods
from ..errors import ArgumentError, LaunchError, ShapeError

if TYPE_CHECKING:
    from .._ops.tensorop import ShapeLike

__all__ = ["MappedPartition", "Partition"]

Shape = tuple[int, ...]


def _dim3(shape: Shape) -> tuple[int, int, int]:
    if len(shape) > 3:
        raise LaunchError(f"a partition grid {shape} has more than 3 dimensions")
    return (*shape, *(1,) * (3 - len(shape)))  # type: ignore[return-value]


class Partition:
    """A tensor split into equal tiles; the output wrapper for kernel launches.

    ``tensor`` is the partitioned tensor, ``tile_shape`` the shape of one tile and
    ``grid`` the number of tiles along each axis; ``unpartition()`` gives the tensor
    back. A launch without a grid gets one block per tile; an explicit grid must equal
    ``grid`` (``prefix``: at most ``grid`` on each axis, from ``Tensor.partition_prefix``).

    >>> part = cuasync.zeros((64, 64)).sync().partition((16, 16))   # grid (4, 4)
    >>> out = await tile_kernel.launch(part, block=(16, 16))         # out is part
    """

    __slots__ = ("grid", "prefix", "tensor", "tile_shape")

    def __init__(self, tensor: Tensor, tile_shape: ShapeLike, *, prefix: bool = False) -> None:
        if not isinstance(tensor, Tensor):
            raise ArgumentError(f"tensor must be a cuasync.Tensor, got {type(tensor).__name__}")
        tile = check_shape(tile_shape, "tile_shape")
        if len(tile) != tensor.ndim:
            raise ShapeError(
                f"tile_shape={tile} has {len(tile)} dimensions but the tensor has {tensor.ndim}"
            )
        for axis, (d, t) in enumerate(zip(tensor.shape, tile, strict=True)):
            if t == 0 or d % t:
                raise ShapeError(
                    f"tile_shape={tile} does not divide the tensor's shape {tensor.shape} "
                    f"(axis {axis}: {d} is not a multiple of {t})"
                )
        self.tensor = tensor
        self.tile_shape = tile
        self.grid = tuple(d // t for d, t in zip(tensor.shape, tile, strict=True))
        self.prefix = prefix

    @property
    def tiles(self) -> int:
        """The number of tiles (a persistent kernel's loop bound).

        >>> cuasync.zeros((64, 64)).sync().partition((16, 16)).tiles
        16
        """
        return math.prod(self.grid)

    @property
    def launch_grid(self) -> tuple[int, int, int]:
        """The grid a launch gets when it names none.

        >>> part.launch_grid
        (4, 4, 1)
        """
        return _dim3(self.grid)

    def check_grid(self, grid: tuple[int, int, int], name: str) -> None:
        """Raise :class:`~cuasync.errors.LaunchError` unless a launch with ``grid`` fits
        (``name`` is the kernel parameter, for the message).

        >>> part.check_grid((4, 4, 1), "out")
        """
        full = self.launch_grid
        if self.prefix:
            if any(not 1 <= g <= f for g, f in zip(grid, full, strict=True)):
                raise LaunchError(
                    f"grid={grid} is not a prefix of the {self.grid} tiles of partition argument "
                    f"{name!r} (at most {full} on each axis)"
                )
        elif grid != full:
            raise LaunchError(
                f"grid={grid} does not match the {self.grid} tiles of partition argument "
                f"{name!r}; omit grid= to infer it, or use tensor.partition_prefix() to "
                "launch a prefix of the tiles"
            )

    def map(self, map_shape: ShapeLike, num_tile_blocks: int) -> MappedPartition:
        """This partition for a persistent kernel: ``num_tile_blocks`` blocks (the launch
        grid is ``(num_tile_blocks, 1, 1)``) that loop over the tiles, visited as the index
        space ``map_shape`` (holding exactly :attr:`tiles` tiles).

        >>> p = out.partition((128,)).map((out.size // 128,), num_tile_blocks=132)
        >>> await persistent[p.launch_grid, 128](p, p.tiles)   # grid (132, 1, 1)
        """
        return MappedPartition(self, map_shape, num_tile_blocks)

    def unpartition(self) -> Tensor:
        """The partitioned tensor itself (a kernel's output, after the launch).

        >>> t = (await k.launch(part, block=128)).unpartition()
        """
        return self.tensor

    def __repr__(self) -> str:
        shape, tiles = self.tensor.shape, self.tile_shape
        kind = "prefix partition" if self.prefix else "Partition"
        return f"<cuasync.{kind} of {shape} into tiles {tiles}, grid {self.grid}>"


class MappedPartition(Partition):
    """A partition for a persistent kernel (:meth:`Partition.map`): ``num_tile_blocks``
    blocks loop over the :attr:`tiles` tiles, in the index space ``map_shape``.

    A launch without a grid gets ``(num_tile_blocks, 1, 1)``; an explicit grid must be
    that. The kernel finds its tiles itself, e.g. ``for (t = blockIdx.x; t < tiles; t +=
    gridDim.x)``; pass it ``p.tiles`` (and ``map_shape``) as arguments.

    >>> p = out.partition((128,)).map((64,), num_tile_blocks=132)
    >>> p.launch_grid
    (132, 1, 1)
    """

    __slots__ = ("map_shape", "num_tile_blocks")

    def __init__(self, partition: Partition, map_shape: ShapeLike, num_tile_blocks: int) -> None:
        super().__init__(partition.tensor, partition.tile_shape, prefix=partition.prefix)
        shape = check_shape(map_shape, "map_shape")
        if math.prod(shape) != self.tiles:
            raise ShapeError(
                f"map_shape={shape} holds {math.prod(shape)} tile indices but the partition has "
                f"{self.tiles} tiles (grid {self.grid}); give a shape with {self.tiles}"
            )
        if isinstance(num_tile_blocks, bool) or not isinstance(num_tile_blocks, int):
            raise ArgumentError(
                f"num_tile_blocks must be an int >= 1, got {type(num_tile_blocks).__name__}"
            )
        if not 1 <= num_tile_blocks < 1 << 31:
            raise ArgumentError(
                f"num_tile_blocks must be in 1..2**31-1 (blocks of a 1-D grid), got "
                f"{num_tile_blocks}"
            )
        self.map_shape = shape
        self.num_tile_blocks = num_tile_blocks

    @property
    def launch_grid(self) -> tuple[int, int, int]:
        """``(num_tile_blocks, 1, 1)``: one persistent block per slot."""
        return (self.num_tile_blocks, 1, 1)

    def check_grid(self, grid: tuple[int, int, int], name: str) -> None:
        """Raise :class:`~cuasync.errors.LaunchError` unless ``grid`` is :attr:`launch_grid`."""
        if grid != self.launch_grid:
            raise LaunchError(
                f"grid={grid} does not match the {self.num_tile_blocks} persistent blocks of "
                f"mapped partition argument {name!r} (grid {self.launch_grid}); omit grid= "
                "to infer it"
            )

    def __repr__(self) -> str:
        return (
            f"<cuasync.MappedPartition of {self.tensor.shape} into tiles {self.tile_shape}: "
            f"{self.tiles} tiles as {self.map_shape}, {self.num_tile_blocks} blocks>"
        )


# Tensor.partition and Tensor.partition_prefix (the tensor module sits below this one).
tensor_methods.partition = Partition
