"""Profiling this machine: llama.cpp's kernels timed on micro-models."""
