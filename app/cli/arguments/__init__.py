"""What each `shardchat` command accepts, apart from what it does (app.cli.commands): parsing a
command line imports no model, window or network code."""
