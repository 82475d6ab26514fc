"""The evaluation's chart, ``savings.png``, drawn without a plotting library.

Two panels: what a fix costs by program size (re-send against replay plus notice,
log scale, one replay bar per call-id shape), and the wall time of the fixes that
resume after a slow step; under them, each shape's break-even. The
PNG is written with ``zlib`` and ``struct`` and the labels with a 5x7 bitmap font
(capitals, digits, a little punctuation), so the evaluation needs no matplotlib
(and its numpy) for one picture, and the same figures give the same bytes.
"""

from __future__ import annotations

import math
import struct
import zlib
from collections.abc import Sequence
from typing import Any

__all__ = ["Canvas", "savings_chart"]

Color = tuple[int, int, int]

WHITE: Color = (255, 255, 255)
INK: Color = (33, 37, 41)
GRID: Color = (222, 226, 230)
MUTED: Color = (108, 117, 125)
OFF: Color = (173, 181, 189)  # re-send, stock kernel
ON: Color = (13, 110, 253)  # ptc-retry, the first id shape
ON_SHAPES: tuple[Color, ...] = (ON, (111, 66, 193))  # one per id shape, in order
WORSE: Color = (220, 53, 69)  # ptc-retry cost more than re-sending

# 5x7 glyphs, one string of 7 rows of 5 pixels each (1 = ink).
_GLYPHS = {
    "0": "01110 10001 10011 10101 11001 10001 01110",
    "1": "00100 01100 00100 00100 00100 00100 01110",
    "2": "01110 10001 00001 00010 00100 01000 11111",
    "3": "11111 00010 00100 00010 00001 10001 01110",
    "4": "00010 00110 01010 10010 11111 00010 00010",
    "5": "11111 10000 11110 00001 00001 10001 01110",
    "6": "00110 01000 10000 11110 10001 10001 01110",
    "7": "11111 00001 00010 00100 01000 01000 01000",
    "8": "01110 10001 10001 01110 10001 10001 01110",
    "9": "01110 10001 10001 01111 00001 00010 01100",
    "A": "01110 10001 10001 11111 10001 10001 10001",
    "B": "11110 10001 10001 11110 10001 10001 11110",
    "C": "01110 10001 10000 10000 10000 10001 01110",
    "D": "11100 10010 10001 10001 10001 10010 11100",
    "E": "11111 10000 10000 11110 10000 10000 11111",
    "F": "11111 10000 10000 11110 10000 10000 10000",
    "G": "01110 10001 10000 10111 10001 10001 01111",
    "H": "10001 10001 10001 11111 10001 10001 10001",
    "I": "01110 00100 00100 00100 00100 00100 01110",
    "J": "00111 00010 00010 00010 00010 10010 01100",
    "K": "10001 10010 10100 11000 10100 10010 10001",
    "L": "10000 10000 10000 10000 10000 10000 11111",
    "M": "10001 11011 10101 10101 10001 10001 10001",
    "N": "10001 10001 11001 10101 10011 10001 10001",
    "O": "01110 10001 10001 10001 10001 10001 01110",
    "P": "11110 10001 10001 11110 10000 10000 10000",
    "Q": "01110 10001 10001 10001 10101 10010 01101",
    "R": "11110 10001 10001 11110 10100 10010 10001",
    "S": "01111 10000 10000 01110 00001 00001 11110",
    "T": "11111 00100 00100 00100 00100 00100 00100",
    "U": "10001 10001 10001 10001 10001 10001 01110",
    "V": "10001 10001 10001 10001 10001 01010 00100",
    "W": "10001 10001 10001 10101 10101 10101 01010",
    "X": "10001 10001 01010 00100 01010 10001 10001",
    "Y": "10001 10001 10001 01010 00100 00100 00100",
    "Z": "11111 00001 00010 00100 01000 10000 11111",
    " ": "00000 00000 00000 00000 00000 00000 00000",
    ".": "00000 00000 00000 00000 00000 01100 01100",
    ",": "00000 00000 00000 00000 01100 00100 01000",
    ":": "00000 01100 01100 00000 01100 01100 00000",
    ";": "00000 01100 01100 00000 01100 00100 01000",
    "%": "11000 11001 00010 00100 01000 10011 00011",
    "-": "00000 00000 00000 11111 00000 00000 00000",
    "+": "00000 00100 00100 11111 00100 00100 00000",
    "(": "00010 00100 01000 01000 01000 00100 00010",
    ")": "01000 00100 00010 00010 00010 00100 01000",
    "/": "00000 00001 00010 00100 01000 10000 00000",
    "=": "00000 00000 11111 00000 11111 00000 00000",
    "_": "00000 00000 00000 00000 00000 00000 11111",
    "'": "01100 00100 01000 00000 00000 00000 00000",
    ">": "01000 00100 00010 00001 00010 00100 01000",
    "<": "00010 00100 01000 10000 01000 00100 00010",
    "?": "01110 10001 00001 00010 00100 00000 00100",
}
_FONT = {char: rows.split() for char, rows in _GLYPHS.items()}


class Canvas:
    """An RGB image in memory: rectangles and text, then ``png()``."""

    def __init__(self, width: int, height: int, background: Color = WHITE) -> None:
        self.width, self.height = width, height
        self.pixels = bytearray(bytes(background) * (width * height))

    def rect(self, x0: float, y0: float, x1: float, y1: float, color: Color) -> None:
        """Fill the rectangle [x0, x1) x [y0, y1), clipped to the image."""
        left, right = max(0, round(min(x0, x1))), min(self.width, round(max(x0, x1)))
        top, bottom = max(0, round(min(y0, y1))), min(self.height, round(max(y0, y1)))
        if left >= right:
            return
        row = bytes(color) * (right - left)
        for y in range(top, bottom):
            start = (y * self.width + left) * 3
            self.pixels[start : start + len(row)] = row

    @staticmethod
    def text_width(text: str, scale: int = 2) -> int:
        return max(0, len(text) * 6 * scale - scale)

    def text(
        self, x: float, y: float, text: str, color: Color = INK, scale: int = 2, align: str = "left"
    ) -> None:
        """Draw ``text`` (upper-cased) with its top at ``y``; ``align`` is about ``x``."""
        text = text.upper()
        width = self.text_width(text, scale)
        if align == "center":
            x -= width / 2
        elif align == "right":
            x -= width
        # Whole pixels: at half a pixel, rounding each glyph pixel's edges would drop rows.
        x, y = math.floor(x), math.floor(y)
        for index, char in enumerate(text):
            rows = _FONT.get(char, _FONT["?"])
            left = x + index * 6 * scale
            for r, bits in enumerate(rows):
                for c, bit in enumerate(bits):
                    if bit == "1":
                        px, py = left + c * scale, y + r * scale
                        self.rect(px, py, px + scale, py + scale, color)

    def png(self) -> bytes:
        """The image as PNG bytes (8-bit RGB, no filtering, zlib level 9)."""
        stride = self.width * 3
        raw = b"".join(
            b"\x00" + bytes(self.pixels[y * stride : (y + 1) * stride]) for y in range(self.height)
        )

        def chunk(kind: bytes, data: bytes) -> bytes:
            body = kind + data
            return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

        header = struct.pack(">IIBBBBB", self.width, self.height, 8, 2, 0, 0, 0)
        return (
            b"\x89PNG\r\n\x1a\n"
            + chunk(b"IHDR", header)
            + chunk(b"IDAT", zlib.compress(raw, 9))
            + chunk(b"IEND", b"")
        )


def _short(value: float) -> str:
    """1234 -> 1.2K, 56 -> 56: labels that fit above a bar."""
    if value >= 10_000:
        return f"{value / 1000:.0f}K"
    if value >= 1000:
        return f"{value / 1000:.1f}K"
    return f"{value:.0f}"


def _decade(value: float) -> str:
    """10 -> 10, 1000 -> 1K: axis labels of a log scale."""
    return f"{value / 1000:.0f}K" if value >= 1000 else f"{value:.0f}"


def _bars(
    canvas: Canvas,
    box: tuple[int, int, int, int],
    groups: Sequence[tuple[str, str, Sequence[float]]],
    colors: Sequence[Color],
    scale: Any,
    label: Any,
) -> None:
    """A bar per value (OFF first, then ON per id shape) in each group of ``box``;
    ``scale(v)`` maps a value to 0..1.

    A group's note (the change from OFF to ON) is blue when ON costs less, red otherwise.
    """
    left, top, right, bottom = box
    width = (right - left) / max(1, len(groups))
    count = max([1, *(len(values) for _, _, values in groups)])
    bar = min(48.0, width * 0.8 / count)
    small = 2 if bar >= 36 else 1  # value labels that fit above their bar
    for index, (name, note, values) in enumerate(groups):
        center = left + width * (index + 0.5)
        x = center - (bar * len(values) + 3 * (len(values) - 1)) / 2
        for value, color in zip(values, colors):
            y = bottom - scale(value) * (bottom - top)
            canvas.rect(x, y, x + bar, bottom, color)
            canvas.text(x + bar / 2, y - 9 * small, label(value), INK, small, "center")
            x += bar + 3
        canvas.text(center, bottom + 10, name, INK, 2, "center")
        if note:
            cheaper = all(v < values[0] for v in values[1:])
            canvas.text(center, bottom + 32, note, ON if cheaper else WORSE, 2, "center")
    canvas.rect(left, bottom, right, bottom + 2, INK)


def savings_chart(figures: dict[str, Any]) -> bytes:
    """The PNG for the figures of :func:`ptc_retry.eval.report.analyse`."""
    canvas = Canvas(1000, 560)
    unit = figures["unit"]
    shapes = list(figures["id_shapes"].values())
    colors = (OFF, *ON_SHAPES[: len(shapes)])
    canvas.text(30, 20, "ptc-retry eval: what fixing a failed program costs", INK, 3)

    # Left: mean cost of a fix per scenario, by program size, log scale.
    sizes = []
    for size, first in shapes[0]["by_size"].items():
        buckets = [s["by_size"][size] for s in shapes]
        n = max(1, first["scenarios"])
        notes = [b["saved_with_notice"] for b in buckets]
        shown = sorted({f"{-saved:+.0%}" for saved in notes if saved is not None})
        values = [first["off_fix"] / n, *((b["on_fix"] + b["on_notice"]) / n for b in buckets)]
        sizes.append((size, "/".join(shown), values))
    box = (90, 130, 560, 430)
    highest = max([1.0, *(max(values) for _, _, values in sizes)])
    top_decade = max(2, math.ceil(math.log10(highest * 1.25)))

    def log_scale(value: float) -> float:
        return max(0.0, min(1.0, (math.log10(max(value, 10.0)) - 1) / (top_decade - 1)))

    canvas.text(30, 72, f"{unit} per fix, by program size (log scale)", INK, 2)
    canvas.text(30, 96, "mean per scenario; ptc-retry counts the notice it shows", MUTED, 1)
    for decade in range(1, top_decade + 1):
        y = box[3] - (decade - 1) / (top_decade - 1) * (box[3] - box[1])
        canvas.rect(box[0], y, box[2], y + 1, GRID)
        canvas.text(box[0] - 8, y - 7, _decade(10.0**decade), MUTED, 2, "right")
    _bars(canvas, box, sizes, colors, log_scale, _short)

    # Right: wall time of the fixes that resume after a slow step.
    resumed = [
        [s["scenarios"][i] for s in shapes]
        for i, row in enumerate(shapes[0]["scenarios"])
        if row["resume"]
    ]
    canvas.text(620, 72, "wall time of the fix (s)", INK, 2)
    canvas.text(620, 96, "the program failed after a slow step", MUTED, 1)
    if resumed:
        groups = [
            (
                rows[0]["size"],
                "",
                [rows[0]["off_fix_seconds"], *(r["on_fix_seconds"] for r in rows)],
            )
            for rows in resumed
        ]
        highest_s = max([0.5, *(max(values) for _, _, values in groups)])
        step = next(s for s in (0.5, 1, 2, 5, 10, 20, 60, 120) if highest_s / s <= 5)
        ceiling = step * math.ceil(highest_s * 1.25 / step)
        rbox = (650, 130, 970, 430)
        ticks = int(round(ceiling / step))
        for tick in range(ticks + 1):
            y = rbox[3] - tick / ticks * (rbox[3] - rbox[1])
            canvas.rect(rbox[0], y, rbox[2], y + 1, GRID)
            canvas.text(rbox[0] - 8, y - 7, f"{tick * step:g}", MUTED, 2, "right")
        _bars(canvas, rbox, groups, colors, lambda v: min(1.0, v / ceiling), lambda v: f"{v:.1f}")
        for index, rows in enumerate(resumed):
            width = (rbox[2] - rbox[0]) / len(resumed)
            why = "time limit" if "time limit" in rows[0]["shape"] else "slow step"
            canvas.text(rbox[0] + width * (index + 0.5), rbox[3] + 32, why, MUTED, 1, "center")

    # Legend: one entry per bar colour, then each id shape's break-even.
    entries = ["re-send, stock kernel"]
    entries += [f"replay, {s['label'].split(' (')[0]}" for s in shapes]
    x = 30
    for text, color in zip(entries, colors):
        canvas.rect(x, 490, x + 20, 506, color)
        canvas.text(x + 28, 492, text, INK, 2)
        x += 28 + canvas.text_width(text) + 36
    even = []
    for s in shapes:
        be = s["break_even"]
        if be.get("available"):
            name = s["label"].split()[0]
            even.append(f"{name} {be['every_failure_replayed']['bytes']:,} B")
    if even:
        recommended = figures.get("recommended_notice_min_bytes")
        text = "break-even: " + ", ".join(even)
        if recommended is not None:
            text += f"; notice_min_bytes {recommended}"
        canvas.text(30, 526, text, MUTED, 2)
    return canvas.png()
