"""The first-launch wizard: profiling this machine and suggesting a model for it."""
