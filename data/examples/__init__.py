"""Bundled files (no code): read with importlib.resources."""
