"""Getting models from Hugging Face: search, plan before download, download verified.

No Qt here: the CLI (`shardchat models`) and the model manager's Discover page
both call these modules, the page on worker threads.
"""
