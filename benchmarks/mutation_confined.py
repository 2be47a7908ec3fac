"""Mutation testing of ``toolcrib/supply/mcp/confined.py``, which ``benchmarks/mutation.sh`` cannot reach: it runs as a
script (``python -I -S``) in the child it confines, where mutmut's trampolines are neither imported nor consulted,
and the tests that use it start processes, which mutmut's run skips. A developer command; it takes hours.

Each mutant mutmut's own operators make of the file (module constants included) is written whole over a copy of the
package, and the confinement tests run against that copy (``PYTHONPATH``, so the host, the processes it starts and
the launcher path they compute are all the copy's). A mutant is killed when a test fails or the run outlives
``--timeout``. Verdicts go to ``mutants-confined/verdicts.json``; a second run goes on where the first stopped.

    .venv/bin/python benchmarks/mutation_confined.py            run (or go on), then list the survivors
    .venv/bin/python benchmarks/mutation_confined.py --show N   what mutant N changes
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from mutmut.mutation.file_mutation import create_mutations

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "host" / "toolcrib" / "supply" / "mcp" / "confined.py"
WORK = ROOT / "mutants-confined"
TESTS = ["tests/test_confinement.py", "tests/test_isolation.py"]


def mutants() -> list[str]:
    """Every mutant of the file, as whole source texts, in mutmut's order."""
    code = SOURCE.read_text()
    module, mutations, _, _ = create_mutations(str(SOURCE), code)
    return [module.deep_replace(m.original_node, m.mutated_node).code for m in mutations]  # type: ignore[attr-defined]


def diff(mutant: str) -> str:
    return "".join(difflib.unified_diff(SOURCE.read_text().splitlines(True), mutant.splitlines(True), n=0))


def verdict(mutant: str, timeout: float) -> str:
    (WORK / "src" / SOURCE.relative_to(ROOT / "host")).write_text(mutant)
    env = {**os.environ, "PYTHONPATH": str(WORK / "src")}
    try:
        done = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *TESTS],
                              cwd=ROOT, env=env, capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "timeout"
    return "survived" if done.returncode == 0 else "killed"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--show", type=int, help="print what mutant N changes")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds a mutant's test run may take")
    args = parser.parse_args()
    made = mutants()
    if args.show is not None:
        print(diff(made[args.show]))
        return
    shutil.copytree(ROOT / "host" / "toolcrib", WORK / "src" / "toolcrib", dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("__pycache__"))
    verdicts_file = WORK / "verdicts.json"
    verdicts: dict[str, str] = json.loads(verdicts_file.read_text()) if verdicts_file.exists() else {}
    imported = subprocess.run([sys.executable, "-c", "import toolcrib; print(toolcrib.__file__)"], text=True,
                              env={**os.environ, "PYTHONPATH": str(WORK / "src")}, capture_output=True).stdout
    if not imported.startswith(str(WORK)):
        sys.exit(f"toolcrib is imported from {imported.strip()}, not the mutated copy")
    if verdict(SOURCE.read_text(), args.timeout) != "survived":
        sys.exit("the confinement tests fail on the unmutated file: nothing to measure")
    keys = [hashlib.sha256(mutant.encode()).hexdigest()[:16] for mutant in made]  # a changed file, new verdicts
    for number, (key, mutant) in enumerate(zip(keys, made, strict=True)):
        if key not in verdicts:
            verdicts[key] = verdict(mutant, args.timeout)
            verdicts_file.write_text(json.dumps(verdicts, indent=1))
            print(number, verdicts[key], flush=True)
    survivors = [n for n, key in enumerate(keys) if verdicts.get(key) == "survived"]
    judged = sum(key in verdicts for key in keys)
    print(f"{judged - len(survivors)} killed, {len(survivors)} survived, {len(made) - judged} not run, of {len(made)}")
    for number in survivors:
        print(f"--- mutant {number}\n{diff(made[number])}")


if __name__ == "__main__":
    main()
