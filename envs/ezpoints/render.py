"""EZPoints tables as images (Pillow, imported only when an image is asked for).

A green table as in gym_cards: the two cards side by side (white, rank in the corners and
large in the middle, suit written under it, red for hearts and diamonds) and the formula so
far along the bottom ("Formula: 10 + 2"); a card ``("?", "")`` lies face down (its blue
back).  Square, ``size`` pixels (300 by default).
"""

from __future__ import annotations

from functools import lru_cache

TABLE_RGB, CARD_RGB, TEXT_RGB = (53, 101, 77), (250, 250, 245), (255, 255, 255)
INK_RGB, RED_RGB, BACK_RGB = (20, 20, 20), (200, 30, 30), (40, 60, 150)


@lru_cache(maxsize=8)
def _font(size: int):
    from PIL import ImageFont

    try:
        return ImageFont.load_default(size=size)
    except TypeError:  # Pillow < 10.1: one bitmap size
        return ImageFont.load_default()


def draw(cards, formula, size: int = 300):
    """The table with ``cards`` ((rank, suit) pairs) and ``formula`` (tokens) as an RGB
    ``PIL.Image`` of ``size`` x ``size``."""
    from PIL import Image, ImageDraw

    image = Image.new("RGB", (size, size), TABLE_RGB)
    pen = ImageDraw.Draw(image)
    n = max(1, len(cards))
    gap = size // 20
    width = (size - gap * (n + 1)) // n
    height = min(int(width * 1.4), int(size * 0.7))
    top = (int(size * 0.85) - height) // 2
    big, small = _font(max(8, width // 3)), _font(max(6, width // 8))
    for i, (rank, suit) in enumerate(cards):
        x = gap + i * (width + gap)
        ink = RED_RGB if suit in ("hearts", "diamonds") else INK_RGB
        pen.rounded_rectangle((x, top, x + width, top + height), radius=max(2, width // 12),
                              fill=BACK_RGB if rank == "?" else CARD_RGB, outline=INK_RGB,
                              width=max(1, size // 150))
        if rank == "?":
            continue
        pen.text((x + width // 12, top + width // 14), rank, fill=ink, font=small)
        pen.text((x + width // 2, top + height // 2), rank, fill=ink, font=big, anchor="mm")
        pen.text((x + width // 2, top + height * 3 // 4), suit, fill=ink, font=small, anchor="mm")
    pen.text((gap, int(size * 0.88)), "Formula: " + " ".join(formula), fill=TEXT_RGB,
             font=_font(max(6, size // 15)))
    return image
