#!/usr/bin/env bash
# Run every benchmark in its own environment (with FastMCP, which the tests never import) and write
# docs/benchmarks.md. Takes a few minutes; the machine should be otherwise idle. With --quick (a few iterations, to
# prove the harness works) the report goes to stdout: the published page is never written from a quick run. With
# --setup it only makes that environment (benchmarks/.venv: toolcrib, the fs pack, FastMCP), for the other scripts here.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv benchmarks/.venv
benchmarks/.venv/bin/pip install -q -e ".[cluster,cedar]" -e plugins/toolcrib-fs -e plugins/toolcrib-vectors "fastmcp>=4.2,<5" "opentelemetry-sdk>=1.30" "rank-bm25==0.2.2"
case " $* " in
  *" --setup "*) exit 0 ;;
  *" --quick "*) benchmarks/.venv/bin/python benchmarks/run.py "$@" ;;
  *) benchmarks/.venv/bin/python benchmarks/run.py --out docs/benchmarks.md "$@" ;;
esac
