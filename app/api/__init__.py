"""The OpenAI-compatible server: what clients send and get back, in OpenAI's shapes.

No Qt here: the server runs beside the app and from the CLI alike.
"""
