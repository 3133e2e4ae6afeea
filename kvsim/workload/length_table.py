"""Joint (prompt, output) length tables: a trace's lengths in a few kilobytes, shipped with kvsim.

A table holds ``K`` equal-count bins of the trace's rows sorted by prompt length; for each bin,
``Q + 1`` quantiles (levels ``0, 1/Q, ..., 1``) of its prompt lengths and of its output lengths.
A draw picks a bin uniformly (each holds ``1/K`` of the rows), then a prompt and an output by
geometric interpolation of the bin's quantile functions at two independent uniforms. The marginal
prompt distribution is kept to within a bin's quantile grid, and the prompt-output dependence at
the resolution of the bins. ``scripts/derive_length_table.py`` derives a table from a trace and
records its provenance in the file's ``#`` header lines.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path

import numpy as np

from kvsim.base.textfile import read_text


@dataclass(frozen=True)
class LengthTable:
    """A joint length table (see the module docstring).

    Attributes:
        prompt: float[K, Q + 1] prompt-length quantiles per bin, tokens.
        output: float[K, Q + 1] output-length quantiles per bin, tokens.
        source: the provenance lines of the file.
    """

    prompt: np.ndarray
    output: np.ndarray
    source: str = ""

    @property
    def levels(self) -> np.ndarray:
        """float[Q + 1] quantile levels 0 ... 1."""
        return np.linspace(0.0, 1.0, self.prompt.shape[1])

    def sample(self, rng: np.random.Generator, size: int) -> tuple[np.ndarray, np.ndarray]:
        """Draw ``size`` (prompt, output) pairs, int64[size] each, every length >= 1."""
        bins = rng.integers(0, self.prompt.shape[0], size=size)
        return self._at(self.prompt, bins, rng.random(size)), self._at(
            self.output, bins, rng.random(size)
        )

    def _at(self, table: np.ndarray, bins: np.ndarray, u: np.ndarray) -> np.ndarray:
        q = table.shape[1] - 1
        pos = u * q
        lo = np.minimum(pos.astype(np.int64), q - 1)
        frac = pos - lo
        # geometric interpolation: lengths are heavy-tailed, so a linear one would put a top
        # segment's draws near its (outlying) maximum
        low, high = np.log(table[bins, lo]), np.log(table[bins, lo + 1])
        values = np.exp(low * (1 - frac) + high * frac)
        out: np.ndarray = np.maximum(1, np.rint(values)).astype(np.int64)
        return out

    @classmethod
    def from_pairs(
        cls, prompt: np.ndarray, output: np.ndarray, bins: int, levels: int
    ) -> LengthTable:
        """Derive a table from a trace's lengths: ``bins`` equal-count prompt bins (rows sorted by
        prompt, then output, so ties split deterministically), ``levels + 1`` quantiles each.

        Raises:
            ValueError: fewer rows than bins, or lengths of different sizes.
        """
        if prompt.shape != output.shape or prompt.size < bins:
            raise ValueError(f"need as many rows as bins ({bins}), got {prompt.size}")
        order = np.lexsort((output, prompt))
        p, o = prompt[order].astype(float), output[order].astype(float)
        qs = np.linspace(0.0, 1.0, levels + 1)
        parts = np.array_split(np.arange(p.size), bins)
        prompt_q = np.stack([np.quantile(p[idx], qs) for idx in parts])
        output_q = np.stack([np.quantile(o[idx], qs) for idx in parts])
        return cls(prompt_q, output_q)

    def to_csv(self, path: str | Path, provenance: list[str]) -> None:
        """Write the table: ``#`` provenance lines, then one row per bin and side."""
        import pandas as pd  # only to read or write a table file

        cols = [f"q{i}" for i in range(self.prompt.shape[1])]
        rows = []
        for k in range(self.prompt.shape[0]):
            rows.append(
                {"bin": k, "side": "prompt", **dict(zip(cols, self.prompt[k], strict=True))}
            )
            rows.append(
                {"bin": k, "side": "output", **dict(zip(cols, self.output[k], strict=True))}
            )
        text = "".join(f"# {line}\n" for line in provenance)
        text += pd.DataFrame(rows).to_csv(index=False, float_format="%.6g")
        Path(path).write_text(text, encoding="utf-8")

    @classmethod
    def read_csv(cls, path: str | Path) -> LengthTable:
        """Read a table written by ``to_csv``."""
        import pandas as pd  # only to read or write a table file

        text = Path(path).read_text(encoding="utf-8")
        source = "\n".join(line[2:] for line in text.splitlines() if line.startswith("# "))
        df = pd.read_csv(path, comment="#")
        cols = [c for c in df.columns if c.startswith("q")]
        prompt = df[df["side"] == "prompt"].sort_values("bin")[cols].to_numpy(float)
        output = df[df["side"] == "output"].sort_values("bin")[cols].to_numpy(float)
        return cls(prompt, output, source)


def shipped_table_path(trace: str) -> Path | None:
    """The shipped table of a catalogued trace (``kvsim/data/lengths/TRACE.csv``), if any."""
    path = Path(str(files("kvsim") / "data" / "lengths" / f"{trace}.csv"))
    return path if path.is_file() else None


def load_length_table(path: Path) -> LengthTable:
    """Read a user's table file and check it.

    Raises:
        ValueError: not UTF-8, not a table of ``to_csv``'s columns, or quantiles that are not
            finite token counts >= 1 (naming the file).
    """
    import pandas as pd  # only to read a table file

    read_text(path)  # names the file when it is not UTF-8
    try:
        table = LengthTable.read_csv(path)
    except (KeyError, ValueError, TypeError, pd.errors.ParserError) as err:
        raise ValueError(
            f"workload.length_table {path}: not a kvsim length table (columns bin, side, q0..qN; "
            f"{type(err).__name__}: {err})"
        ) from None
    for side, values in (("prompt", table.prompt), ("output", table.output)):
        if values.size == 0 or values.ndim != 2 or values.shape[1] < 2:
            raise ValueError(
                f"workload.length_table {path}: no {side} rows of two or more quantiles"
            )
        if not (np.isfinite(values).all() and (values >= 1).all() and values.max() <= 2**31):
            raise ValueError(
                f"workload.length_table {path}: {side} quantiles must be finite token counts "
                f"in [1, 2**31], got {values.min():g}..{values.max():g}"
            )
    if table.prompt.shape != table.output.shape:
        raise ValueError(
            f"workload.length_table {path}: prompt and output rows differ in shape "
            f"({table.prompt.shape} vs {table.output.shape})"
        )
    return table
