"""MCP front ends over agent views: the only part of toolcrib that imports ``mcp``.

``adapter`` turns one agent's view into an SDK low-level ``Server``; ``stdio`` and ``http`` put those on a wire;
``state`` holds the host being served and swaps it whole on reload.
"""
