"""The benchmark pack as a module, for a ``toolcrib serve`` process: ``TOOLCRIB_PLUGINS=math=bench_pack:PACK``.
Its size comes from ``$BENCH_TOOLS`` (default 10)."""

from __future__ import annotations

import os

from peers import BenchPack

PACK = BenchPack(int(os.environ.get("BENCH_TOOLS", "10")))
