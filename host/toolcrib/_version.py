"""toolcrib's version, in a module of its own so that any module may read it without importing the package's
public surface (``toolcrib/__init__.py`` imports most of the host)."""

__version__ = "0.1.0"
