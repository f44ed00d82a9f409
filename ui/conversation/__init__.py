"""Widgets that show one conversation: the message cards and their HTML, the input box,
attached images and their viewer, the conversation's settings."""
