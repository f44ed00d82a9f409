"""What ShardChat keeps on disk: SQLite stores (chats, profiles, jobs) and atomic files."""
