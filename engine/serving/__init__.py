"""Serving many clients at once: their streams in the sequences of one context."""
