"""What the window and the terminal say: plans, profiles, models, VRAM, the server, jobs,
units, in words, computed without Qt so the CLI and the GUI say the same."""
