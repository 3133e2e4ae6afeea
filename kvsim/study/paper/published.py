"""Numbers published in the PagedAttention paper (Kwon et al., SOSP 2023), typed in from the
paper as data (``kvsim/data/paper/pagedattention.csv``): one row per figure, dataset, system and
metric, with a ``value`` or a ``low``-``high`` band and the ``source`` (figure or section)."""

from __future__ import annotations

from importlib.resources import files

import pandas as pd

PUBLISHED_CSV = files("kvsim") / "data" / "paper" / "pagedattention.csv"


def published(figure: str) -> pd.DataFrame:
    """The published rows of one figure (``"fig2"``, ``"fig12"``, ``"fig13"``, ``"fig15"``).

    Raises:
        ValueError: no published row for ``figure``.
    """
    with PUBLISHED_CSV.open(encoding="utf-8") as handle:
        table = pd.read_csv(handle)
    rows = table[table["figure"] == figure].reset_index(drop=True)
    if rows.empty:
        raise ValueError(
            f"no published numbers for {figure!r}; have {sorted(set(table['figure']))}"
        )
    return rows


def published_value(figure: str, system: str, metric: str, dataset: str | None = None) -> float:
    """One published value (``nan`` when the paper gives none for that cell)."""
    rows = published(figure)
    mask = (rows["system"] == system) & (rows["metric"] == metric)
    if dataset is not None:
        mask &= rows["dataset"] == dataset
    values = rows.loc[mask, "value"]
    return float(values.iloc[0]) if len(values) else float("nan")
