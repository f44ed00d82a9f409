"""ShardChat engine: everything that touches models and hardware. Never imports Qt."""
