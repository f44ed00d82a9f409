"""One module per document format, each turning a file's bytes into plain text.

`app.summaries.document_readers` picks the format and calls into here; these modules
know nothing about paths, sizes or which formats exist.
"""
