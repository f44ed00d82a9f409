"""Batch jobs: many requests decoding together in a context of their own."""
