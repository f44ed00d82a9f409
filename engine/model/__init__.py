"""GGUF model files and what is read from them: inventory, templates, images, synthetic models."""
