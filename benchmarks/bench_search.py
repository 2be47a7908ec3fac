"""Tool search on real catalogs: toolcrib's ranking beside plain baselines, on the labelled set of ``catalog/``.

    python benchmarks/bench_search.py [--sizes 1000,2000,10000] [--engines toolcrib,toolcrib-bm25,bm25,fts5,fastmcp]
                                      [--misses]

The set (``catalog/README.md`` says how it was made): the tools/list of 97 real MCP servers and plugins
(``tools.json``), padded with operations of real public APIs (``distractors.json.gz``); labelled queries written
from users' tasks (``queries.tsv``), each in a split: ``tune`` (what ranking may be tuned on) or ``held`` (held out).
Reported per engine and catalog size: recall@1 and recall@5 (a right tool first, in the first five), MRR@10 (mean of
1/rank of the first right tool in the first ten), on the held-out split, the tuning split and the hard queries (the
right tool among near-duplicates); and the time of a search (p50/p95, toolcrib's).

``toolcrib`` is ``ToolIndex`` as installed (with the toolcrib-vectors package: BM25 and word vectors), ``toolcrib-bm25``
the same without the vectors. The baselines, each run here on the same tools and queries:
- ``bm25``: Okapi BM25 (``rank_bm25``, k1 1.5, b 0.75) over a tool's name split into words, its description and its
  arguments' names, lower-cased, split on what is not a letter or digit;
- ``fts5``: SQLite FTS5 with its defaults (``unicode61`` tokenizer, ``bm25()``) over the same text, one column;
- ``fastmcp``: FastMCP's ``BM25SearchTransform`` (its own tokenizer and index), as FastMCP serves search.
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import re
import sqlite3
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
CATALOG = HERE / "catalog"
SIZES = (1000, 2000, 10_000)
Search = Callable[[str], list[str]]  # a query -> tool names, best first (ten at least)


@dataclass(frozen=True)
class Query:
    text: str
    split: str  # "tune" or "held"
    hard: bool
    answers: frozenset[str]


def load() -> tuple[list[dict[str, Any]], list[Query]]:
    """The catalog's tools and its labelled queries (groups expanded)."""
    tools = json.loads((CATALOG / "tools.json").read_text())["tools"]
    groups: dict[str, list[str]] = {}
    queries = []
    for line in (CATALOG / "queries.tsv").read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        fields = line.split("\t")
        if fields[0].startswith("@"):
            groups[fields[0]] = fields[1].split()
            continue
        split, kind, text, labels = fields
        answers = frozenset(name for label in labels.split() for name in groups.get(label, [label]))
        queries.append(Query(text, split, kind == "hard", answers))
    names = {tool["name"] for tool in tools}
    unknown = sorted({name for query in queries for name in query.answers} - names)
    if unknown:
        raise SystemExit(f"queries.tsv names tools the catalog does not have: {unknown}")
    return tools, queries


def distractors() -> list[dict[str, Any]]:
    with gzip.open(CATALOG / "distractors.json.gz", "rt") as file:
        return json.load(file)["tools"]


def pool(tools: list[dict[str, Any]], queries: list[Query], n: int) -> list[dict[str, Any]]:
    """``n`` tools: every tool a query names, then the catalog's others (a seeded sample when they are more than
    ``n``), then distractors; in a seeded order (toolcrib breaks ties by list order, and so should nothing here)."""
    answers = {name for query in queries for name in query.answers}
    needed = [tool for tool in tools if tool["name"] in answers]
    others = [tool for tool in tools if tool["name"] not in answers]
    random.Random(n).shuffle(others)
    chosen = needed + (others + distractors())[:max(n - len(needed), 0)]
    if len(chosen) < n:
        raise SystemExit(f"only {len(chosen)} tools to make {n} of")
    random.Random(-n).shuffle(chosen)
    return chosen


def _text_words(text: str) -> list[str]:
    return [w for w in re.split(r"[^a-z0-9]+", re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", text).lower()) if w]


def _document(tool: dict[str, Any]) -> str:
    """What the plain baselines index: the name split into words, the description, the arguments' names."""
    arguments = " ".join((tool.get("inputSchema") or {}).get("properties") or {})
    return " ".join((tool["name"].replace("__", " "), tool.get("description") or "", arguments))


def toolcrib_engine(tools: list[dict[str, Any]]) -> Search:
    from toolcrib.search import ToolIndex

    index = ToolIndex(tools)
    return lambda query: [tool["name"] for tool in index.search(query, 10)]


def toolcrib_bm25_engine(tools: list[dict[str, Any]]) -> Search:
    """toolcrib's ranking without the word vectors (as without the toolcrib-vectors package)."""
    from toolcrib import search

    vectors = search._vectors
    search._vectors = lambda: None  # type: ignore[assignment]
    try:
        index = search.ToolIndex(tools)
    finally:
        search._vectors = vectors  # type: ignore[method-assign]
    return lambda query: [tool["name"] for tool in index.search(query, 10)]


def bm25_engine(tools: list[dict[str, Any]]) -> Search:
    from rank_bm25 import BM25Okapi

    bm25 = BM25Okapi([_text_words(_document(tool)) for tool in tools])
    names = [tool["name"] for tool in tools]

    def search(query: str) -> list[str]:
        scores = bm25.get_scores(_text_words(query))
        best = sorted(range(len(names)), key=lambda i: -scores[i])[:10]
        return [names[i] for i in best if scores[i] > 0]

    return search


def fts5_engine(tools: list[dict[str, Any]]) -> Search:
    db = sqlite3.connect(":memory:")
    db.execute("CREATE VIRTUAL TABLE tools USING fts5(text)")
    db.executemany("INSERT INTO tools (rowid, text) VALUES (?, ?)",
                   [(i, " ".join(_text_words(_document(tool)))) for i, tool in enumerate(tools)])
    names = [tool["name"] for tool in tools]

    def search(query: str) -> list[str]:
        words = _text_words(query)
        if not words:
            return []
        match = " OR ".join(f'"{word}"' for word in words)
        rows = db.execute("SELECT rowid FROM tools WHERE tools MATCH ? ORDER BY bm25(tools) LIMIT 10", (match,))
        return [names[row] for row, in rows]

    return search


def fastmcp_engine(tools: list[dict[str, Any]]) -> Search:
    import anyio
    from fastmcp.server.transforms.search import BM25SearchTransform
    from fastmcp.tools.base import Tool

    objects = [Tool(name=t["name"], description=t.get("description"), parameters=t["inputSchema"]) for t in tools]
    transform = BM25SearchTransform(max_results=10)
    return lambda query: [t.name for t in anyio.run(transform._search, objects, query)]


ENGINES: dict[str, Callable[[list[dict[str, Any]]], Search]] = {
    "toolcrib": toolcrib_engine, "toolcrib-bm25": toolcrib_bm25_engine, "bm25": bm25_engine, "fts5": fts5_engine,
    "fastmcp": fastmcp_engine}


def quality(search: Search, queries: Iterable[Query], misses: list[str] | None = None) -> dict[str, float]:
    """recall@1, recall@5 and MRR@10 of ``search`` over ``queries``."""
    top1 = top5 = reciprocal = 0.0
    count = 0
    for query in queries:
        found = search(query.text)[:10]
        rank = next((i for i, name in enumerate(found, 1) if name in query.answers), None)
        count += 1
        top1 += rank == 1
        top5 += rank is not None and rank <= 5
        reciprocal += 1 / rank if rank else 0.0
        if misses is not None and (rank is None or rank > 5):
            misses.append(f"{query.split} {'hard ' if query.hard else ''}{query.text!r}: "
                          f"{', '.join(found[:5]) or 'nothing'}; wanted {' '.join(sorted(query.answers)[:4])}")
    return {"r1": top1 / count, "r5": top5 / count, "mrr": reciprocal / count}


def timed(search: Callable[[str], Any], queries: list[str], rounds: int = 3,
          first: list[float] | None = None) -> tuple[float, float]:
    """p50 and p95 of a search over ``rounds`` rounds of the queries; the first round's samples go to ``first``."""
    samples: list[float] = []
    for round_ in range(rounds):
        for query in queries:
            started = time.perf_counter()
            search(query)
            samples.append(time.perf_counter() - started)
        if round_ == 0 and first is not None:
            first += samples
    return p50_p95(samples)


def p50_p95(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return ordered[len(ordered) // 2], ordered[int(len(ordered) * 0.95)]


def measure(sizes: Iterable[int] = SIZES, engines: Iterable[str] = tuple(ENGINES),
            misses: list[str] | None = None) -> list[dict[str, Any]]:
    """One row per engine and size: its quality on each split and the hard queries, and (toolcrib's) speed."""
    tools, queries = load()
    rows = []
    for n in sizes:
        tools_n = pool(tools, queries, n)
        for engine in engines:
            if engine == "fastmcp" and n > 2000:
                continue  # (its search builds its index anew on every query: minutes at 10,000 tools)
            started = time.perf_counter()
            search = ENGINES[engine](tools_n)
            search("warm up")
            built = time.perf_counter() - started
            row: dict[str, Any] = {"engine": engine, "tools": n, "build": built}
            for name, subset in (("held", [q for q in queries if q.split == "held"]),
                                 ("tune", [q for q in queries if q.split == "tune"]),
                                 ("hard", [q for q in queries if q.hard])):
                row[name] = quality(search, subset, misses if engine == "toolcrib" and name == "tune"
                                    and n == max(sizes) else None)  # (the held-out split's are never shown)
            if engine == "toolcrib":
                row["p50"], row["p95"] = timed(search, [query.text for query in queries])
            rows.append(row)
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    def cell(q: dict[str, float]) -> str:
        return f"{q['r1']:.3f} / {q['r5']:.3f} / {q['mrr']:.3f}"

    lines = ["| tools | engine | held out: recall@1 / recall@5 / MRR@10 | tuning split | hard queries | search p50 / "
             "p95 |", "|---|---|---|---|---|---|"]
    for row in rows:
        speed = f"{row['p50'] * 1e3:.2f} ms / {row['p95'] * 1e3:.2f} ms" if "p50" in row else ""
        lines.append(f"| {row['tools']:,} | {row['engine']} | {cell(row['held'])} | {cell(row['tune'])} | "
                     f"{cell(row['hard'])} | {speed} |")
    return "\n".join(lines)


def summary() -> str:
    """How many tools, servers and queries the set has, for the report."""
    tools, queries = load()
    sources = json.loads((CATALOG / "tools.json").read_text())["sources"]
    held = sum(q.split == "held" for q in queries)
    return (f"{len(tools):,} real tool definitions from {len(sources)} servers and plugins, "
            f"{len(queries)} labelled queries ({held} held out, {sum(q.hard for q in queries)} hard), "
            "padded with distractors from real public APIs' operations")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)))
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument("--misses", action="store_true",
                        help="print toolcrib's misses on the tuning split at the largest size")
    args = parser.parse_args()
    misses: list[str] = []
    rows = measure([int(n) for n in args.sizes.split(",")], args.engines.split(","), misses)
    print(summary())
    print(table(rows))
    if args.misses:
        print(f"\n{len(misses)} queries without a right tool in toolcrib's first five:", *misses, sep="\n")


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    main()
