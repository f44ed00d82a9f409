"""The machine: its hardware, its measured (or described) profile."""
