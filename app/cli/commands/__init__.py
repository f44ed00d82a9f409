"""The `shardchat` subcommands: each parses its arguments, runs, and prints."""
