"""Search over the tools one agent sees (``AgentView.search``).

The index is built from the view's own tools/list, so a tool the agent may not see is never in it: no query, rule
or ranking can bring a hidden tool back. Views are immutable, so the index is built once per view (at its first
search) and a reload builds the next view's.

Ranking is BM25 over each tool's served name (split into words: ``fs__read_file`` is "fs read file",
``getWeather`` "get weather"), its search keywords (``@toolcrib.tool(keywords=[...])``, and an operator's through
curation), its description, and its arguments' names and descriptions, with the name weighed most. The engine is
SQLite's FTS5, from the standard library: a maintained full-text engine with BM25 built in and a stemming tokenizer
(``porter``: "files" finds "file"), so no dependency is added and nothing is hand-written but the weights and a
sum: BM25 scores a query as the sum of its words' scores, so each word's is asked of FTS5 once per index and kept,
and a search adds them up (FTS5 alone would compute ``bm25()`` for every tool a common word matches, every time).
Two other lookups come first: a query that is a served name finds that tool, and ``/pattern/`` is a regular expression
over served names (case-insensitive), in list order, run by the ``regex`` engine under a time limit it enforces.

With the ``toolcrib-vectors`` package installed, ranking adds meaning to words: each tool's name and the start of its
description have a vector (``toolcrib_vectors.DenseIndex``: word-piece vectors summed, no model run), and the
candidates of both rankings (BM25's best and the vectors' best) are ordered by BM25 over the best BM25 score plus
``MEANING`` times the cosine similarity. On the held-out queries of benchmarks/catalog it finds a right tool in the
first five more often than BM25 alone (docs/benchmarks.md, "Tool search").
"""

from __future__ import annotations

import collections
import functools
import heapq
import itertools
import logging
import re
import threading
import time
from array import array
from collections.abc import Mapping, Sequence
from typing import Any

from toolcrib.errors import contained

log = logging.getLogger("toolcrib.search")

WEIGHTS = (2.0, 4.0, 1.0, 0.5)  # BM25 weight of the name, the keywords, the description, the arguments (chosen on
# the first, smaller set; on the tuning split of benchmarks/catalog other weights did no better: docs/benchmarks.md)
MEANING = 2.0  # the weight of the vectors' similarity beside BM25 (chosen on the tuning split of
CANDIDATES = 50  # benchmarks/catalog/queries.tsv, as the number of candidates each ranking gives)
DESCRIBED = 150  # characters of a description a tool's vector reads (its start says what the tool does)
MAX_QUERY_CHARS = 1000
REGEX_SECONDS = 0.25  # what one /regex/ search may take over every name (the regex engine holds it to that)
MAX_KEPT = 1_000_000  # postings (a tool and a score, 12 bytes) an index keeps of the words it was asked, and
MAX_WORDS = 20_000  # words (a word in no tool is kept too, with none): past either, it starts anew

_SPLIT = re.compile(r"[\W_]+|(?<=[a-z0-9])(?=[A-Z])")
_SEPARATORS = re.compile(r"[\W_]+")
# English words that say nothing of a tool ("how do I read a file"): each is in most descriptions, so BM25 gives it
# almost no weight, yet ranking every tool it matches is most of a search's time (Lucene's English stop words,
# with the pronouns and question words a request to an agent is phrased in)
STOP_WORDS = frozenset(("a", "an", "and", "are", "as", "at", "be", "but", "by", "can", "do", "does", "for", "from",
    "how", "i", "if", "in", "into", "is", "it", "its", "me", "my", "no", "not", "of", "on", "or", "our", "please",
    "so", "some", "such", "that", "the", "their", "then", "there", "these", "they", "this", "to", "was", "we",
    "what", "when", "where", "which", "who", "whose", "will", "with", "you", "your"))


def words(text: str) -> list[str]:
    """The words of a name or a text, lower-cased: separators (``__``, ``_``, ``-``, ``.``, spaces, any character
    that is not a letter or a digit) and camelCase humps split them."""
    if text.islower() or not any(char.isupper() for char in text):  # most served names: no humps to find
        if text.isascii() and text.replace("_", "").isalnum():  # and only ASCII letters, digits and "_" (a third
            return text.replace("_", " ").split()  # of the regular expression's time, a fifth of an index's build)
        return [w for w in _SEPARATORS.split(text.lower()) if w]
    return [w.lower() for w in _SPLIT.split(text) if w]


class SearchError(ValueError):
    """A query that cannot be run (an invalid regular expression, a query too long); the message says why."""


class ToolIndex:
    """BM25 over tool definitions as tools/list has them (wire dicts: ``name``, ``description``,
    ``inputSchema``)."""

    def __init__(self, tools: Sequence[dict[str, Any]], keywords: Mapping[str, Sequence[str]] | None = None) -> None:
        self.tools = list(tools)
        keywords = keywords or {}
        self._by_name = {tool["name"]: i for i, tool in enumerate(self.tools)}
        self._lock = threading.Lock()
        import sqlite3  # imported by the first index (tool search on), not by every start

        self._db = sqlite3.connect(":memory:", check_same_thread=False)
        self._db.execute("CREATE VIRTUAL TABLE tools USING fts5(name, keywords, description, arguments, "
                         "tokenize = 'porter unicode61', content = '')")  # contentless: only rowids and scores
        # are read (the texts are the tool dicts), and keeping a copy of every text was a quarter of its build
        names = [words(tool["name"]) for tool in self.tools]
        self._db.executemany("INSERT INTO tools (rowid, name, keywords, description, arguments) VALUES (?, ?, ?, ?, ?)",
                             [(i, " ".join(name), " ".join(keywords.get(tool["name"], ())),
                               tool.get("description") or "", _arguments(tool))
                              for i, (tool, name) in enumerate(zip(self.tools, names, strict=True))])
        # words in more than half of the names (a namespace, "get"): BM25 gives them almost no weight, yet ranking
        # every tool they match is most of a search's time, so a query with other words leaves them out
        counts = collections.Counter(itertools.chain.from_iterable(map(set, names)))
        self._common = frozenset(word for word, count in counts.items() if count * 2 > len(self.tools))
        self._postings: dict[str, tuple[array[int], array[float]]] = {}
        self._kept = 0
        self._dense = _dense([" ".join((*name, (tool.get("description") or "")[:DESCRIBED]))
                              for tool, name in zip(self.tools, names, strict=True)])

    def search(self, query: str, k: int = 5) -> list[dict[str, Any]]:
        """The ``k`` tools that best match ``query``, best first."""
        if not isinstance(query, str):
            raise SearchError("the query must be a string")
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise SearchError("k must be a positive integer")
        if len(query) > MAX_QUERY_CHARS:
            raise SearchError(f"the query is longer than {MAX_QUERY_CHARS} characters")
        query = query.strip()
        if len(query) > 2 and query.startswith("/") and query.endswith("/"):
            return self._matching(query[1:-1], k)
        found: list[int] = []
        exact = self._by_name.get(query)
        if exact is not None:
            found.append(exact)
        terms = [term for term in words(query) if len(term) > 1 and term not in STOP_WORDS]
        if any(term not in self._common for term in terms):
            terms = [term for term in terms if term not in self._common]
        if terms and self._dense is not None:
            found += [row for row in self._fused(query, terms, k + 1) if row != exact]
        elif terms:
            found += [row for row, _ in self._ranked(terms, k + 1) if row != exact]
        return [self.tools[i] for i in found[:k]]

    def _fused(self, query: str, terms: list[str], k: int) -> list[int]:
        """The ``k`` best tools by BM25 and meaning together: the candidates of both, each scored by its BM25 score
        over the best one's plus ``MEANING`` times its vector's cosine similarity to the query's. A query none of
        whose words is in any tool finds nothing, as with BM25 alone (any text has a nearest vector: "xyzzy" too)."""
        assert self._dense is not None
        scores = dict(self._ranked(terms, max(k, CANDIDATES)))
        if not scores:
            return []
        try:
            similarity = self._dense.similarity(query)
            nearest = self._dense.best(similarity, max(k, CANDIDATES))
        except BaseException as exc:  # a broken vectors package costs this search its meaning, never its answer
            if not contained(exc):
                raise
            log.warning("toolcrib-vectors failed on a query (%s: %s): ranked by BM25 alone", type(exc).__name__, exc)
            return sorted(scores, key=lambda row: (-scores[row], row))[:k]
        for row in nearest:
            scores.setdefault(row, 0.0)
        top = max(scores.values()) or 1.0
        return sorted(scores, key=lambda row: (-(scores[row] / top + MEANING * float(similarity[row])), row))[:k]

    def _ranked(self, terms: list[str], k: int) -> list[tuple[int, float]]:
        """The ``k`` best tools for these words and their scores, best first, a tie in list order: what FTS5 ranks
        for ``"word" OR "word" ...`` by ``bm25()``, which is the sum of each word's score (a word twice counts
        twice). FTS5 computes ``bm25()`` for every tool a query matches, and a query of common words ("get", "file",
        "id") matches most of 10,000 tools (8-11 ms a search); each word's scores are asked of it once and kept, so
        a search of words asked before adds up a few postings."""
        postings = sorted(map(self._posting, terms), key=lambda posting: len(posting[0]), reverse=True)
        if not postings or not postings[0][0]:
            return []
        total = dict(zip(*postings[0], strict=True))
        get = total.get
        for rows, scores in postings[1:]:
            for row, score in zip(rows, scores, strict=True):
                total[row] = get(row, 0.0) + score
        least = heapq.nlargest(k, total.values())[-1]
        best = sorted((row for row, score in total.items() if score >= least), key=lambda row: (-total[row], row))
        return [(row, total[row]) for row in best[:k]]

    def _posting(self, term: str) -> tuple[array[int], array[float]]:
        """The tools a word is in, in list order, and its BM25 score in each: FTS5's ``bm25()`` for a query of that
        one word (stemmed by FTS5 as the index is: "files" finds "file")."""
        posting = self._postings.get(term)
        if posting is not None:
            return posting
        with self._lock:
            posting = self._postings.get(term)  # another thread's search may have asked for it meanwhile
            if posting is None:
                rows = self._db.execute(f"SELECT rowid, bm25(tools, {', '.join(map(str, WEIGHTS))}) FROM tools "
                                        "WHERE tools MATCH ?", (f'"{term}"',)).fetchall()
                posting = array("i", [row for row, _ in rows]), array("d", [-score for _, score in rows])
                if self._kept + len(rows) > MAX_KEPT or len(self._postings) >= MAX_WORDS:  # the agent's words
                    self._postings.clear()
                    self._kept = 0
                self._postings[term] = posting
                self._kept += len(rows)
        return posting

    def _matching(self, pattern: str, k: int) -> list[dict[str, Any]]:
        """The tools whose served names ``pattern`` matches, in list order. The pattern is the agent's, so it runs in
        the ``regex`` engine, which enforces a time limit itself, inside a match (Python's ``re`` has none: one
        pattern of bounded repetitions held the GIL for seconds): every name together gets ``REGEX_SECONDS``."""
        import regex  # type: ignore[import-untyped]  # (types-regex is not a dependency)

        try:
            compiled = regex.compile(pattern, regex.IGNORECASE | regex.VERSION0)
        except (regex.error, OverflowError, RecursionError) as exc:
            raise SearchError(f"/{pattern}/ is not a regular expression: {exc}") from None
        found: list[dict[str, Any]] = []
        deadline = time.perf_counter() + REGEX_SECONDS
        try:
            for tool in self.tools:
                if compiled.search(tool["name"], timeout=max(deadline - time.perf_counter(), 1e-6)):
                    found.append(tool)
                    if len(found) == k:
                        break
        except TimeoutError:
            raise SearchError(f"/{pattern}/ took more than {REGEX_SECONDS} s over the tool names; anchor it "
                              "(^...) or make it more specific") from None
        return found


@functools.cache
def _vectors() -> Any:
    """The ``toolcrib_vectors`` module when that package is installed, else None (BM25 alone). One that cannot be
    imported (numpy missing or broken, whatever it raises) is reported once and searches rank by BM25 alone."""
    try:
        import toolcrib_vectors  # type: ignore[import-not-found,unused-ignore]
    except ModuleNotFoundError as exc:
        if exc.name != "toolcrib_vectors":
            log.warning("toolcrib-vectors cannot be imported (%s): tool search ranks by BM25 alone", exc)
        return None
    except BaseException as exc:
        if not contained(exc):
            raise
        log.warning("toolcrib-vectors cannot be imported (%s: %s): tool search ranks by BM25 alone",
                    type(exc).__name__, exc)
        return None
    return toolcrib_vectors


def _dense(texts: list[str]) -> Any:
    """The vectors of ``texts`` (``toolcrib_vectors.DenseIndex``), or None without the package or when it fails."""
    vectors = _vectors()
    if vectors is None:
        return None
    try:
        return vectors.DenseIndex(texts)
    except BaseException as exc:
        if not contained(exc):
            raise
        log.warning("toolcrib-vectors failed to index %d tools (%s: %s): tool search ranks by BM25 alone",
                    len(texts), type(exc).__name__, exc)
        return None


def ranking() -> str:
    """How searches rank here, for ``toolcrib check``: BM25 alone, or with the toolcrib-vectors package's vectors."""
    vectors = _vectors()
    if vectors is None:
        return "BM25 (install toolcrib-vectors to rank by meaning too)"
    return f"BM25 and word vectors (toolcrib-vectors {vectors.__version__})"


def _arguments(tool: dict[str, Any]) -> str:
    """The words of a tool's arguments: each name and its description (FTS5 splits ``repo_path`` itself; a
    camelCase name is split here)."""
    properties = (tool.get("inputSchema") or {}).get("properties") or {}
    parts = []
    for name, schema in properties.items():
        parts.append(name if name.islower() or not any(char.isupper() for char in name) else " ".join(words(name)))
        if isinstance(schema, dict) and isinstance(schema.get("description"), str):
            parts.append(schema["description"])
    return " ".join(parts)


__all__ = ["SearchError", "ToolIndex", "ranking", "words"]
