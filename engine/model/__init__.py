"""GGUF model files and what is read from them: inventory, chat templates, images, synthetic models."""
