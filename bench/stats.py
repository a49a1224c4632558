"""Latency figures from a run's samples, the same way in every benchmark."""

from __future__ import annotations


def percentile(ordered: list[float], fraction: float) -> float:
    """The nearest-rank ``fraction`` quantile of ``ordered`` (sorted ascending); NaN when there is none."""
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]
