"""ShardChat composition root: settings, storage, the engine worker and the command line. No Qt."""
