"""A model from the request to load it to its unloading: the planned load, the resident
model and its re-planning, the vision pairing, the automatic budget."""
