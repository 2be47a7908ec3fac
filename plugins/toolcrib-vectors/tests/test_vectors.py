"""toolcrib_vectors: word pieces as BERT spells them, and texts' vectors compared by meaning."""

from __future__ import annotations

import numpy as np
import toolcrib_vectors
from toolcrib_vectors import DenseIndex, pieces


def _spelt(text: str) -> list[str]:
    vocabulary = {i: piece for piece, i in toolcrib_vectors._table()[1].items()}
    return [vocabulary[i] for i in pieces(text)]


def test_words_are_spelt_in_word_pieces_as_bert_spells_them() -> None:
    assert _spelt("list_directory") == ["list", "directory"]
    assert _spelt("getWeatherForecast") == ["get", "weather", "forecast"]
    assert _spelt("kubeconfig") == ["ku", "##be", "##con", "##fi", "##g"]
    assert _spelt("") == [] and _spelt("__ --") == []
    assert _spelt("日本") == []  # a word it cannot spell is left out (BERT's [UNK])
    assert _spelt("a" * 100) != [] and _spelt("a" * 101) == []  # as is a word longer than BERT spells
    assert _spelt("read " + "x" * 5000 + " file") == ["read", "file"]


def test_a_query_is_nearest_the_text_that_means_what_it_says_even_with_no_word_in_common() -> None:
    index = DenseIndex(["sleep: pause for a number of seconds", "list_directory: the entries of a folder",
                        "send_email: send a message to an address", ""])
    assert index.best(index.similarity("wait a moment"), 1) == [0]
    assert index.best(index.similarity("show what is in this folder"), 1) == [1]
    assert index.best(index.similarity("mail my manager"), 1) == [2]
    similarity = index.similarity("wait a moment")
    assert similarity.shape == (4,) and similarity[3] == 0.0 and -1.0 <= similarity.min() <= similarity.max() <= 1.0
    assert index.best(similarity, 10) == [int(i) for i in np.argsort(-similarity, kind="stable")]  # all, best first


def test_nothing_to_compare_gives_nothing() -> None:
    empty = DenseIndex([])
    assert empty.similarity("anything").shape == (0,) and empty.best(empty.similarity("anything"), 3) == []
    index = DenseIndex(["sleep for seconds"])
    assert list(index.similarity("")) == [0.0] and list(index.similarity("日本")) == [0.0]
    assert index.best(index.similarity("sleep"), 0) == []
