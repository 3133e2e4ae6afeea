"""Results tables on disk: Parquet when pyarrow is installed (the ``parquet`` extra), CSV beside
it otherwise.

A table is named by its Parquet path (``folder/requests.parquet``); without pyarrow it is
written as ``folder/requests.csv`` instead, with one warning a process saying so, and every
reader here takes whichever of the two the folder holds (Parquet first). CSV keeps the values
(numbers to the last bit: pandas writes floats with ``repr``'s round-trip digits) but not every
dtype: a column of integers with a gap reads back as floats, and categoricals as strings; a
column of lists is written as their JSON text and read back as lists where the reader names it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from kvsim.base.extras import has_extra, require
from kvsim.base.say_once import warn_once

if TYPE_CHECKING:
    import pandas as pd

logger = logging.getLogger(__name__)

CSV_SUFFIX = ".csv"


def csv_twin(path: Path) -> Path:
    """Where the table named by the Parquet path ``path`` is written without pyarrow."""
    return path.with_suffix(CSV_SUFFIX)


def stored_table(path: str | Path) -> Path | None:
    """The file holding the table named by ``path`` (its ``.parquet`` path): the Parquet file, or
    its CSV twin, or ``None`` when neither exists."""
    path = Path(path)
    for candidate in (path, csv_twin(path)):
        if candidate.is_file():
            return candidate
    return None


def table_target(path: Path) -> Path:
    """The file ``write_table`` writes for the Parquet path ``path``: ``path``, or its CSV twin
    without pyarrow."""
    return path if has_extra("parquet") else csv_twin(path)


def write_table(frame: pd.DataFrame, path: Path) -> Path:
    """Write ``frame`` (without its index) as the table named by the Parquet path ``path``.

    With pyarrow: ``path``, converted to Arrow in this thread and written in one call (a run's
    tables are small: Arrow's thread pool cost more than it saved, about 1.5 ms of CPU a sweep
    point, and Arrow writes a file in ~80 small writes and seeks a table). Without it: its CSV
    twin, and a warning once a process naming the extra.

    Returns:
        the file written.
    """
    if table_target(path) != path:
        warn_once(
            logger,
            "pyarrow is not installed: results tables are written as CSV (NAME.csv for "
            "NAME.parquet); pip install 'kvsim[parquet]' for Parquet",
        )
        target = csv_twin(path)
        frame.to_csv(target, index=False)
        return target
    import pyarrow as pa
    import pyarrow.parquet as pq

    buffer = pa.BufferOutputStream()
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False, nthreads=1), buffer)
    with open(path, "wb") as file:
        file.write(buffer.getvalue())
    return path


def read_table(path: str | Path, list_columns: Sequence[str] = ()) -> pd.DataFrame:
    """The table named by the Parquet path ``path`` (see ``stored_table``); from CSV, the
    ``list_columns`` (lists of integers, written as JSON text) are read back as lists.

    Raises:
        FileNotFoundError: neither the Parquet file nor its CSV twin exists.
        MissingExtraError: the table is Parquet and pyarrow is not installed.
        ValueError: not a readable Parquet or CSV file (truncated, corrupt, another format).
    """
    import pandas as pd

    path = Path(path)
    stored = stored_table(path)
    if stored is None:
        raise FileNotFoundError(f"{path}: no such file")
    if stored.suffix == CSV_SUFFIX:
        try:
            frame = pd.read_csv(stored)
            for column in list_columns:
                if column in frame.columns:
                    frame[column] = [json.loads(text) for text in frame[column]]
        except (
            pd.errors.ParserError,
            pd.errors.EmptyDataError,
            UnicodeDecodeError,
            json.JSONDecodeError,
            TypeError,
        ) as err:
            reason = " ".join(str(err).split())[:200]
            raise ValueError(f"{stored}: not a readable CSV table ({reason})") from None
        return frame
    require("parquet", f"reading {stored}")
    try:
        return pd.read_parquet(stored)
    except (OSError, ValueError) as err:  # pyarrow's ArrowInvalid is a ValueError
        reason = " ".join(str(err).split())[:200]
        raise ValueError(f"{path}: not a readable Parquet file ({reason})") from None
