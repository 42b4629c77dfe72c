"""numpy arrays <-> bytes for BLOB columns (the portable .npy format, never pickle)."""

from __future__ import annotations

import io

import numpy as np

#: Candidate rows per stored block (about 26 MB at d = 50).
BLOCK_ROWS = 65536


def to_bytes(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, np.ascontiguousarray(array), allow_pickle=False)
    return buffer.getvalue()


def from_bytes(data: bytes) -> np.ndarray:
    return np.load(io.BytesIO(data), allow_pickle=False)


def split_rows(matrix: np.ndarray, block_rows: int = BLOCK_ROWS) -> list[bytes]:
    return [to_bytes(matrix[i : i + block_rows]) for i in range(0, len(matrix), block_rows)]


def join_rows(blocks: list[bytes]) -> np.ndarray:
    return np.concatenate([from_bytes(b) for b in blocks], axis=0)
