"""The resident model: loading it, its conversation, and its steps set beside the plan."""
