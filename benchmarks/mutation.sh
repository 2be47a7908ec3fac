#!/usr/bin/env bash
# Mutation testing of the security-critical modules (patterns, permissions, entries, workspace, HTTP auth, OAuth,
# tool search, approvals and the operator endpoint and console, OpenAPI calls, what a confined server may reach,
# an isolated pack's calls lane and its checks line, the HTTP exchange of 2026-07-28 requests, limits, the shared
# store that counts them, and the sessions and approvals the fleet shares, MCP tasks: whose a task is, and the
# policies of the one decision, Cedar's among them, the sealed state of 2026-07-28's round trips, and what calls a
# source as its caller: token exchange, people's sealed grants, and the scrubbing of credentials from answers),
# as configured in pyproject.toml ([tool.mutmut]). A developer command: it takes tens of minutes.
#   benchmarks/mutation.sh            run, then print the score per module
#   benchmarks/mutation.sh --keep     go on from the last run's mutants, test map and verdicts (a stopped run resumes
#                                     where it stopped; names given run those mutants again, verdicts and all)
#   .venv/bin/mutmut show NAME        what a surviving mutant changed
# mutmut expects the source under src/: the script links src -> host for the run.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/mutmut ] || .venv/bin/pip install -q "mutmut==3.8.1"
ln -sfn host src
trap 'rm -f src' EXIT
if [ "${1:-}" = "--keep" ]; then shift; else rm -rf mutants; fi
.venv/bin/mutmut run "$@" || true
.venv/bin/python benchmarks/mutation_score.py
