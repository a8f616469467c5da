"""The 128x4 scale swizzle: a hand-built layout, padding, inverse, batches, and torchao's ``to_blocked``."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from pytest_sskj.numerics.swizzle import swizzle_128x4, swizzled_offsets, unswizzle_128x4  # noqa: E402


def hand_built_tile(tile: torch.Tensor) -> list[int]:
    """cuBLAS block-scaling layout of one 128x4 tile, written from its description: the 512-byte block holds
    32 lines of 16 bytes; line i carries rows i, i+32, i+64, i+96, four scale columns each."""
    out: list[int] = []
    for i in range(32):
        for j in range(4):
            for c in range(4):
                out.append(int(tile[j * 32 + i, c]))
    return out


def test_single_tile_matches_hand_built_layout() -> None:
    tile = (torch.arange(512) % 251).to(torch.uint8).view(128, 4)
    got = swizzle_128x4(tile).flatten().tolist()
    assert got == hand_built_tile(tile), "128x4 tile layout differs from the cuBLAS description"


def test_tiles_are_row_tile_major_then_column_tile() -> None:
    g = torch.Generator().manual_seed(0)
    scale = torch.randint(0, 256, (256, 8), generator=g, dtype=torch.uint8)
    flat = swizzle_128x4(scale).flatten()
    expected: list[int] = []
    for rt in range(2):
        for ct in range(2):
            expected += hand_built_tile(scale[rt * 128 : (rt + 1) * 128, ct * 4 : (ct + 1) * 4])
    assert flat.tolist() == expected
    offsets = swizzled_offsets(256, 8)
    for (r, c), off in {
        (0, 0): 0,
        (0, 3): 3,
        (1, 0): 16,
        (32, 0): 4,
        (127, 3): 511,
        (0, 4): 512,
        (128, 0): 1024,
    }.items():
        assert int(offsets[r, c]) == off, f"offset of ({r}, {c}) is {int(offsets[r, c])}, expected {off}"


def test_padding_rows_and_columns_with_zeros() -> None:
    scale = torch.full((200, 3), 7, dtype=torch.uint8)
    swz = swizzle_128x4(scale)
    assert tuple(swz.shape) == (256, 4), f"padded shape {tuple(swz.shape)}"
    assert int((swz == 7).sum()) == 600 and int((swz == 0).sum()) == 256 * 4 - 600, "padding must be zero bytes"
    assert torch.equal(unswizzle_128x4(swz, 200, 3), scale)


def test_batches_are_swizzled_independently_and_invert() -> None:
    g = torch.Generator().manual_seed(1)
    scale = torch.randint(0, 256, (3, 130, 28), generator=g, dtype=torch.uint8)
    swz = swizzle_128x4(scale)
    for e in range(3):
        assert torch.equal(swz[e], swizzle_128x4(scale[e])), f"expert {e} depends on its neighbours"
    assert torch.equal(unswizzle_128x4(swz, 130, 28), scale)
    assert torch.equal(unswizzle_128x4(swz.flatten(), 130, 28), scale), "flat multi-expert buffer must invert"


def test_unswizzle_rejects_a_wrong_size() -> None:
    with pytest.raises(ValueError, match="not a multiple of the padded size"):
        unswizzle_128x4(torch.zeros(1000, dtype=torch.uint8), 128, 4)


@pytest.mark.parametrize(("rows", "cols"), [(128, 4), (256, 112), (200, 3), (1, 1), (768, 112), (3584, 12)])
def test_matches_torchao_to_blocked(rows: int, cols: int) -> None:
    utils = pytest.importorskip("torchao.prototype.mx_formats.utils")
    g = torch.Generator().manual_seed(rows + cols)
    scale = torch.randint(0, 256, (rows, cols), generator=g, dtype=torch.uint8)
    assert torch.equal(swizzle_128x4(scale).flatten(), utils.to_blocked(scale).flatten())
