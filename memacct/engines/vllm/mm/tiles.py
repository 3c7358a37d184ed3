"""InternVL's dynamic tiling as vLLM 0.33 counts it, for the models whose processor is its own
InternVL-style one (H2OVL's multi-scale adaptive cropping, Eagle2.5-VL).

Read off ``vllm/transformers_utils/processors/internvl.py`` and ``h2ovl.py``:

* the target grids (``get_internvl_target_ratios``): every ``(i, j)`` with ``min_num <= i x
  j <= max_num``, sorted by ``i x j``; ``resolve_internvl_min_max_num`` takes
  ``min_dynamic_patch`` / ``max_dynamic_patch`` (1 / 1 without ``dynamic_image_size``) and
  adds one to the maximum where ``use_thumbnail`` and the maximum is not 1;
* an image's grid (``find_closest_aspect_ratio``): the closest aspect ratio, a tie going to
  the later grid when the image's area exceeds half the grid's; its tiles ``i x j``, plus a
  thumbnail where ``use_thumbnail`` and more than one tile (``calculate_internvl_targets``);
* H2OVL with ``use_msac`` (``H2OVLProcessor.get_num_image_tokens``, one image a prompt):
  a first pass over grids from 1 tile and a second from 3 tiles, skipping grids that
  divide the first pass's, each with a thumbnail, one thumbnail dropped: ``first + second
  - 1`` tiles;
* the largest image (``BaseInternVLProcessingInfo.get_image_size_with_most_features``):
  of the target grids (thumbnail included in the maximum), the first of ``image_size x
  grid`` pixels with the most tokens; each tile ``image_seq_length = (image_size /
  patch_size)^2 x downsample_ratio^2`` tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["TileRules", "largest_image_tiles", "target_ratios", "tiles_of"]


@dataclass(frozen=True)
class TileRules:
    """The image processor's tiling settings (config.json, ``--mm-processor-kwargs`` first)."""

    image_size: int
    min_dynamic_patch: int
    max_dynamic_patch: int
    dynamic_image_size: bool
    use_thumbnail: bool
    use_msac: bool = False  # H2OVL only

    def min_max(self, use_thumbnail: bool) -> tuple[int, int]:
        """``resolve_internvl_min_max_num`` (H2OVL's ``resolve_h2ovl_min_max_num`` is the same)."""
        low = self.min_dynamic_patch if self.dynamic_image_size else 1
        high = self.max_dynamic_patch if self.dynamic_image_size else 1
        return low, high + 1 if use_thumbnail and high != 1 else high


def target_ratios(min_num: int, max_num: int) -> list[tuple[int, int]]:
    """``get_internvl_target_ratios``."""
    ratios = {(i, j) for n in range(min_num, max_num + 1) for i in range(1, n + 1)
              for j in range(1, n + 1) if min_num <= i * j <= max_num}  # fmt: skip
    return sorted(ratios, key=lambda r: r[0] * r[1])


def _closest(width: int, height: int, ratios: list[tuple[int, int]],
             image_size: int) -> tuple[int, int]:  # fmt: skip
    """``find_closest_aspect_ratio``."""
    aspect, best, best_diff = width / height, (1, 1), float("inf")
    for ratio in ratios:
        diff = abs(aspect - ratio[0] / ratio[1])
        if diff < best_diff:
            best, best_diff = ratio, diff
        elif diff == best_diff and width * height > 0.5 * image_size**2 * ratio[0] * ratio[1]:
            best = ratio
    return best


def _tiles(width: int, height: int, ratios: list[tuple[int, int]], image_size: int,
           thumbnail: bool) -> tuple[int, tuple[int, int]]:  # fmt: skip
    """``calculate_internvl_targets`` / ``calculate_h2ovl_targets``: tiles and the grid."""
    grid = _closest(width, height, ratios, image_size)
    blocks = grid[0] * grid[1]
    return blocks + (1 if thumbnail and blocks != 1 else 0), grid


def tiles_of(width: int, height: int, rules: TileRules) -> int:
    """Tiles of one image of ``width x height`` pixels (the module notes)."""
    size = rules.image_size
    if not rules.use_msac:
        ratios = target_ratios(*rules.min_max(use_thumbnail=False))
        return _tiles(width, height, ratios, size, rules.use_thumbnail)[0]
    _, high = rules.min_max(use_thumbnail=False)
    first, grid = _tiles(width, height, target_ratios(1, high), size, True)
    prior = [r for r in target_ratios(3, high) if grid[0] % r[0] != 0 and grid[1] % r[1] != 0]
    second = _tiles(width, height, prior, size, True)[0]
    return first + second - 1


def largest_image_tiles(rules: TileRules) -> int:
    """Tiles of the largest dummy image (``get_image_size_with_most_features``)."""
    best = 0
    for wr, hr in target_ratios(*rules.min_max(rules.use_thumbnail)):
        best = max(best, tiles_of(rules.image_size * wr, rules.image_size * hr, rules))
    return best
