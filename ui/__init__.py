"""ShardChat widgets (PySide6). Renders state; never imports llama_cpp."""
