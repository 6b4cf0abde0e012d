"""Reading dataset files: one bounded reader for paths and uploads (regular files only, at most a size), and the
check for NUL bytes in texts that names the row."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from .. import _disk
from .._disk import read_file
from ..errors import DatasetError

MAX_DATASET_BYTES = 4 * 2**30  # a dataset file read into memory; larger ones go through `longviz precompute` shards
_FILES = ("give a CSV, TSV, Parquet or JSONL file (over 4 GiB: split it, or compute it with `longviz precompute`, "
          "docs/dataset-scale.md)")
_TOO_LARGE = "split it, or compute it with `longviz precompute` (docs/dataset-scale.md)"


def read_dataset_file(path: Path, limit: int = MAX_DATASET_BYTES) -> bytes:
    """The bytes of the dataset file at `path`: a regular file of at most `limit` bytes, else DatasetError. The one
    reader of dataset paths (by _disk.read_file's policy), so a folder, a device such as /dev/zero, a FIFO or an
    endless stream is refused by name instead of failing deep inside (IsADirectoryError) or reading until memory
    runs out."""
    try:
        return read_file(path, f"The dataset '{path}'", limit, DatasetError, fix=_FILES)
    except FileNotFoundError:
        raise DatasetError(f"Cannot open the dataset '{path}': no such file.") from None


def read_bounded(stream, what: str, limit: int = MAX_DATASET_BYTES) -> bytes:
    """At most `limit` bytes of an uploaded dataset (_disk.read_bounded), else DatasetError naming `what`."""
    return _disk.read_bounded(stream, what, limit, DatasetError, _TOO_LARGE)


def check_no_nul(texts: pd.Series, column: str) -> None:
    """A NUL byte anywhere in a text (past the 4 KiB the binary check reads, or in a Parquet cell) names its row."""
    bad = texts.map(lambda t: "\x00" in t)
    if bad.any():
        rows = bad[bad].index
        raise DatasetError(f"{len(rows)} text(s) in column '{column}' contain NUL bytes, first in row {rows[0]} "
                           f"(0-based, header not counted; in a CSV about line {_line(rows[0])}): the file holds "
                           "binary data there. Remove those rows.")


def _line(row) -> str:
    return str(row + 2) if isinstance(row, (int, np.integer)) else "?"
