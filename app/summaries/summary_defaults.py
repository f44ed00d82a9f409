"""A summary job's default context per document, which `shardchat summarize --help`
shows without importing the job (llama.cpp)."""

from __future__ import annotations

DEFAULT_CONTEXT_PER_SEQUENCE = 2048
