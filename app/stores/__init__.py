"""What ShardChat keeps on disk: SQLite stores (chats, profiles, jobs, the model list) and
atomic files."""
