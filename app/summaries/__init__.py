"""Summarising folders of documents: finding and reading them, prompting, the job, its report."""
