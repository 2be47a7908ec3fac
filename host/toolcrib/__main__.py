"""``python -m toolcrib``: the ``toolcrib`` command (an isolated pack's process is started this way)."""

from toolcrib.cli import run

run()
