"""Sokoban maps as images (Pillow, imported only when an image is asked for).

One square ``tile`` per cell: walls dark grey, floor light grey, targets a red ring, boxes
brown squares (green on a target), the player a blue disc.  A 6x6 map at the default 16
pixels per cell is a 96x96 RGB image.
"""

from __future__ import annotations

from envs.sokoban.levels import Board, State

WALL_RGB, FLOOR_RGB = (64, 64, 64), (220, 220, 210)
TARGET_RGB, BOX_RGB, BOX_ON_TARGET_RGB, PLAYER_RGB = (200, 40, 40), (150, 100, 40), (40, 160, 60), (40, 80, 200)


def draw(board: Board, state: State, tile: int = 16):
    """The map of ``state`` as an RGB ``PIL.Image`` of (cols * tile) x (rows * tile)."""
    from PIL import Image, ImageDraw

    image = Image.new("RGB", (board.cols * tile, board.rows * tile), FLOOR_RGB)
    pen = ImageDraw.Draw(image)
    player, boxes = state
    box_set, m = set(boxes), max(1, tile // 8)
    for i in range(board.rows * board.cols):
        x, y = (i % board.cols) * tile, (i // board.cols) * tile
        box = (x, y, x + tile - 1, y + tile - 1)
        inner = (x + m, y + m, x + tile - 1 - m, y + tile - 1 - m)
        if i in board.walls:
            pen.rectangle(box, fill=WALL_RGB)
            continue
        if i in board.targets:
            pen.ellipse(inner, outline=TARGET_RGB, width=m)
        if i in box_set:
            pen.rectangle(inner, fill=BOX_ON_TARGET_RGB if i in board.targets else BOX_RGB)
        elif i == player:
            pen.ellipse((x + 2 * m, y + 2 * m, x + tile - 1 - 2 * m, y + tile - 1 - 2 * m),
                        fill=PLAYER_RGB)
    return image
