"""Partitions as launch grids: partition, partition_prefix and map (persistent kernels)."""

from __future__ import annotations

import numpy as np
import pytest

import cuasync
from cuasync.errors import ArgumentError, LaunchError, ShapeError

TILES_UPTO = r"""
// one block per 16-element tile; `blocks` (the launched grid) is for the numpy twin
extern "C" __global__ void add_tile_index(float* x, int blocks) {
    x[blockIdx.x * 16 + threadIdx.x] += (float)blockIdx.x;
}
"""


def tiles_upto_twin(x: np.ndarray, blocks: np.int32) -> None:
    n = int(blocks) * 16
    x[:n] += np.repeat(np.arange(int(blocks), dtype=x.dtype), 16)


PERSISTENT = r"""
// a persistent kernel: gridDim.x blocks loop over `tiles` tiles of 16 elements
extern "C" __global__ void persistent_tiles(float* x, int tiles) {
    for (int t = blockIdx.x; t < tiles; t += gridDim.x)
        x[t * 16 + threadIdx.x] += (float)t;
}
"""


def persistent_twin(x: np.ndarray, tiles: np.int32) -> None:
    x += np.repeat(np.arange(int(tiles), dtype=x.dtype), 16)


@pytest.fixture(scope="module")
def upto() -> cuasync.Kernel:
    return cuasync.Kernel(TILES_UPTO, "add_tile_index", emulate=tiles_upto_twin)


@pytest.fixture(scope="module")
def persistent() -> cuasync.Kernel:
    return cuasync.Kernel(PERSISTENT, "persistent_tiles", emulate=persistent_twin)


@pytest.mark.anyio
async def test_a_prefix_partition_launches_the_first_tiles_only(upto: cuasync.Kernel) -> None:
    x = await cuasync.zeros((64,))
    part = x.partition_prefix((16,))
    assert part.prefix and part.grid == (4,) and part.tiles == 4
    out = await upto[2, 16](part, 2)
    assert out is part and out.unpartition() is x
    expected = np.zeros(64, np.float32)
    expected[16:32] = 1.0
    np.testing.assert_array_equal(await x.to_host(), expected)
    await upto.launch(part, 4, block=16)  # no grid: every tile, as a plain partition
    expected += np.repeat(np.arange(4, dtype=np.float32), 16)
    np.testing.assert_array_equal(await x.to_host(), expected)


@pytest.mark.anyio
async def test_a_mapped_partition_launches_its_persistent_blocks(
    persistent: cuasync.Kernel,
) -> None:
    x = await cuasync.zeros((8 * 16,))
    p = x.partition((16,)).map((2, 4), num_tile_blocks=3)
    assert isinstance(p, cuasync.MappedPartition) and isinstance(p, cuasync.Partition)
    assert (p.launch_grid, p.tiles, p.map_shape) == ((3, 1, 1), 8, (2, 4))
    out = await persistent.launch(p, p.tiles, block=16)  # grid (3, 1, 1): each block loops
    assert out is p and out.unpartition() is x
    expected = np.repeat(np.arange(8, dtype=np.float32), 16)
    np.testing.assert_array_equal(await x.to_host(), expected)
    await persistent[3, 16](p, p.tiles)  # the explicit grid it wants
    np.testing.assert_array_equal(await x.to_host(), 2 * expected)
    assert "3 blocks" in repr(p)


def test_grids_that_do_not_fit_are_refused_before_anything_runs(
    upto: cuasync.Kernel, persistent: cuasync.Kernel
) -> None:
    x = cuasync.zeros((64,)).sync()
    with pytest.raises(LaunchError, match="not a prefix"):
        upto[5, 16](x.partition_prefix((16,)), 5)
    with pytest.raises(LaunchError, match="partition_prefix"):
        upto[2, 16](x.partition((16,)), 2)  # a plain partition wants every tile
    with pytest.raises(LaunchError, match="persistent blocks"):
        persistent[4, 16](x.partition((16,)).map((4,), 2), 4)
    grid2d = cuasync.zeros((64, 64)).sync().partition_prefix((16, 16))
    grid2d.check_grid((2, 4, 1), "x")  # a prefix on each axis
    with pytest.raises(LaunchError, match="not a prefix"):
        grid2d.check_grid((2, 5, 1), "x")
    assert "prefix partition" in repr(grid2d)


def test_map_checks_its_arguments() -> None:
    part = cuasync.zeros((64,)).sync().partition((16,))
    with pytest.raises(ShapeError, match="holds 6 tile indices but the partition has 4"):
        part.map((2, 3), 2)
    for bad in (0, -1, True, 2.0):
        with pytest.raises(ArgumentError, match="num_tile_blocks"):
            part.map((4,), bad)  # type: ignore[arg-type]
    assert part.map((2, 2), 132).launch_grid == (132, 1, 1)  # more blocks than tiles is fine
