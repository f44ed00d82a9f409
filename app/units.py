"""Human-readable sizes and counts for terminal and window text."""

from __future__ import annotations

import re

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


_SIZE_UNITS = {
    "": 1, "b": 1,
    "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10,
    "m": 1 << 20, "mb": 1 << 20, "mib": 1 << 20,
    "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30,
    "t": 1 << 40, "tb": 1 << 40, "tib": 1 << 40,
}  # fmt: skip


def parse_size(text: str) -> int:
    """'6GiB', '6G', '6 GB', '512M', '0' -> bytes. GB means GiB, as GPU tools show VRAM."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", text)
    if not match or match.group(2).lower() not in _SIZE_UNITS:
        raise ValueError(f"not a size: {text!r} (try 6GiB, 512MiB or 0)")
    return int(float(match.group(1)) * _SIZE_UNITS[match.group(2).lower()])
