"""The one token loop: a scheduler that runs every stream as a sequence of a llama context."""
