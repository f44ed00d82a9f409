"""Lent computers in the window: the box that lists them and its controller."""
