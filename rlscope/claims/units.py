"""How a claim's numbers are written, by its unit: one place for the table, the reasons and the
explanations."""

from __future__ import annotations

import math

__all__ = ["format_value"]


def format_value(value: float, unit: str) -> str:
    """A number the way a claim's unit is read: 15,900x, 38.1%, 2^18, 1.2e+05 samples/s."""
    if value is None or not math.isfinite(value):
        return "—"
    if unit == "percent":
        return f"{value * 100:.1f}%"
    if unit == "N":
        if value >= 1 and float(value).is_integer() and math.log2(value).is_integer():
            return f"2^{int(math.log2(value))}"
        return f"{value:g}"
    text = f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}" if abs(value) >= 0.01 else f"{value:.2g}"
    if unit == "samples/s":
        return f"{value:.3g} samples/s"
    if unit == "seconds":
        for scale, suffix in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs"), (1e-9, "ns")):
            if abs(value) >= scale or suffix == "ns":
                return f"{value / scale:.3g} {suffix}"
    return text + ("x" if unit == "x" else "")
