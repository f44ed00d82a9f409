"""Models: the model manager (the list on disk, details, import), the picker in the chat's
header, and Discover (the Hub's search, repositories and downloads)."""
