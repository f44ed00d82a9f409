"""The `shardchat` command line: main parses and dispatches, arguments says what each command
accepts (imports no model, window or network code), commands runs it and prints."""
