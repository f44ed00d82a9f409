"""What each `shardchat` command accepts, apart from what it does (app.commands): parsing a
command line imports no model, window or network code."""
