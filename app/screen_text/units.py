"""Human-readable sizes, counts, durations and speeds for terminal and window text."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:  # the command line parses sizes without the planner's imports
    from engine.planning.prediction_range import Sureness

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


def format_duration(seconds: float) -> str:
    """42 -> '42 s', 252 -> '4 min 12 s', 4000 -> '1 h 06 min'."""
    whole = int(round(seconds))
    if whole < 60:
        return f"{max(whole, 1)} s"
    minutes, secs = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


SpeedUnit = Literal["tok/s", "tokens/s"]  # short where room is (tables, progress), else spelled


def speed_text(tokens_per_s: float, unit: SpeedUnit = "tok/s") -> str:
    """12.34 -> '12.3 tok/s'; 11835.2 -> '11,835 tok/s'; every speed the app shows is said
    here, so the CLI, the window and the panels give the same figure for the same speed."""
    figure = f"{tokens_per_s:,.0f}" if tokens_per_s >= 100 else f"{tokens_per_s:.1f}"
    return f"{figure} {unit}"


def speed_range_text(tokens_per_s: float, sureness: Sureness) -> str:
    """40 tok/s at ±10 % -> '36-44 tok/s': where the machine's speed is expected."""
    low, high = sureness.bounds(tokens_per_s)
    if high - low < 0.05 * tokens_per_s:
        return speed_text(tokens_per_s)
    return f"{_range_figure(low)}–{_range_figure(high)} tok/s"


def seconds_range_text(seconds: float, sureness: Sureness) -> str:
    """A time, with the spread of the speed it was predicted from: '2.2-2.6 s'."""
    fast, slow = sureness.bounds(1 / max(seconds, 1e-9))
    shortest, longest = 1 / slow, 1 / fast
    if longest < 0.0005 or longest - shortest < 0.05 * seconds:
        return seconds_text(seconds)
    if longest < 1:
        return f"{shortest * 1000:.0f}–{longest * 1000:.0f} ms"
    return f"{_range_figure(shortest)}–{_range_figure(longest)} s"


def _range_figure(value: float) -> str:
    """Two figures or so: a range is not more exact than its ends."""
    return f"{value:,.0f}" if value >= 10 else f"{value:.1f}"


def seconds_text(seconds: float) -> str:
    """2.345 -> '2.3 s'; 0.042 -> '42 ms'; 0.0002 -> '< 1 ms'."""
    if seconds < 0.0005:
        return "< 1 ms"
    return f"{seconds:.1f} s" if seconds >= 1 else f"{seconds * 1000:.0f} ms"
