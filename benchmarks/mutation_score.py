"""The mutation score per module, from mutmut's results (run by benchmarks/mutation.sh)."""

from __future__ import annotations

import collections
import subprocess
import sys


def main() -> None:
    out = subprocess.run([sys.executable, "-m", "mutmut", "results", "--all", "true"], capture_output=True,
                         text=True).stdout
    counts: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for line in out.splitlines():
        name, _, status = line.strip().rpartition(": ")
        if not name:
            continue
        module = name.split(".x")[0].split(".xǁ")[0]
        counts[module][status] += 1
    print(f"{'module':<28} {'killed':>7} {'survived':>9} {'other':>6} {'score':>7}")
    for module, by_status in sorted(counts.items()):
        killed = by_status["killed"]
        survived = by_status["survived"]
        other = sum(by_status.values()) - killed - survived
        score = killed / (killed + survived) if killed + survived else 0.0
        print(f"{module:<28} {killed:>7} {survived:>9} {other:>6} {score:>7.1%}")


if __name__ == "__main__":
    main()
