"""The VRAM budget: the slider panel and its controller, which re-plans the model."""
