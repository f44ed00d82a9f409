"""Human-readable sizes and counts for terminal and window text."""

from __future__ import annotations

_BYTE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def format_bytes(n_bytes: int) -> str:
    """1536 -> '1.5 KiB'; binary units, as llama.cpp prints buffer sizes."""
    value = float(n_bytes)
    for unit in _BYTE_UNITS:
        if abs(value) < 1024 or unit == _BYTE_UNITS[-1]:
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def format_count(count: int) -> str:
    """134515008 -> '134.5M' (parameter counts)."""
    for divisor, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if count >= divisor:
            return f"{count / divisor:.1f}{suffix}"
    return str(count)
