"""Folder summaries: the panel that starts a job, the jobs' list and their controller."""
