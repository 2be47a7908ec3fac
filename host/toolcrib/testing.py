"""Fixtures for tool-pack authors (a pytest plugin, registered under pytest11; inert until a test asks)."""
