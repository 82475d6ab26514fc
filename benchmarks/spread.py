"""The one way the benchmarks print a figure: its spread over the runs that measured it.

A figure measured on a shared machine moves from one run to the next; its minimum, median
and maximum over ``N`` runs say how far, where one number would not. The scripts beside this
module import it (``python benchmarks/<name>.py`` puts this directory on ``sys.path``).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence


def spread(values: Sequence[float], unit: str = "", scale: float = 1.0, digits: int = 2) -> str:
    """``values`` times ``scale`` as ``min / median / max <unit> (of N)``, each rounded to
    ``digits`` decimals; ``ValueError`` for no values."""
    if not values:
        raise ValueError("spread() needs at least one value")
    low, middle, high = (
        f"{value * scale:.{digits}f}"
        for value in (min(values), statistics.median(values), max(values))
    )
    suffix = f" {unit}" if unit else ""
    return f"{low} / {middle} / {high}{suffix} (min / median / max of {len(values)})"


def ratios(numerators: Sequence[float], denominators: Sequence[float]) -> list[float]:
    """The ratio of each run's pair, for figures measured in interleaved pairs."""
    return [a / b for a, b in zip(numerators, denominators, strict=True)]
