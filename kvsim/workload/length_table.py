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

import csv
import itertools
import math
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
        """Read a table written by ``to_csv`` (``load_length_table`` checks it)."""
        return load_length_table(Path(path))


def shipped_table_path(trace: str) -> Path | None:
    """The shipped table of a catalogued trace (``kvsim/data/lengths/TRACE.csv``), if any."""
    path = Path(str(files("kvsim") / "data" / "lengths" / f"{trace}.csv"))
    return path if path.is_file() else None


def load_length_table(path: Path) -> LengthTable:
    """Read a table file (``to_csv``'s shape: ``#`` provenance lines, a header ``bin, side, q0,
    ..., qQ``, one row per bin and side) and check it.

    Raises:
        ValueError: not UTF-8, another header, a row whose ``side`` is not ``prompt`` or
            ``output``, whose bin is not a whole number or repeats a row, quantiles that are not
            finite token counts in [1, 2**31] or that decrease along a row, or a bin without
            both rows (the message names the file, the line and the value).
    """
    text = read_text(path)  # names the file when it is not UTF-8
    where = f"workload.length_table {path}"
    numbered = [
        (n, line)
        for n, line in enumerate(text.splitlines(), start=1)
        if line.strip() and not line.startswith("#")
    ]
    rows = list(csv.reader(line for _, line in numbered))
    if not rows:
        raise ValueError(f"{where}: empty, expected a header bin,side,q0,...,qN and rows")
    header, levels = rows[0], len(rows[0]) - 2
    expected = ["bin", "side", *(f"q{i}" for i in range(max(levels, 2)))]
    if header != expected:
        raise ValueError(
            f"{where} line {numbered[0][0]}: not a kvsim length table header, got "
            f"{','.join(header)!r}; expected bin,side,q0,q1,...,qN (N >= 1, in order)"
        )
    sides: dict[str, dict[int, list[float]]] = {"prompt": {}, "output": {}}
    first_line: dict[int, int] = {}
    for (number, _), fields in zip(numbered[1:], rows[1:], strict=True):
        at = f"{where} line {number}"
        if len(fields) != len(header):
            raise ValueError(f"{at}: {len(fields)} fields, expected {len(header)}")
        side = fields[1].strip()
        if side not in sides:
            raise ValueError(f"{at}: side must be 'prompt' or 'output', got {fields[1]!r}")
        try:
            bin_ = int(fields[0])
        except ValueError:
            bin_ = -1
        if bin_ < 0:
            raise ValueError(f"{at}: bin must be a whole number >= 0, got {fields[0]!r}")
        if bin_ in sides[side]:
            raise ValueError(f"{at}: a second {side} row for bin {bin_}; expected one")
        first_line.setdefault(bin_, number)
        try:
            values = [float(v) for v in fields[2:]]
        except ValueError:
            values = [math.nan]
        if not all(math.isfinite(v) and 1 <= v <= 2**31 for v in values):
            raise ValueError(
                f"{at}: {side} quantiles must be finite token counts in [1, 2**31], got "
                f"{','.join(fields[2:])}"
            )
        if any(b < a for a, b in itertools.pairwise(values)):
            raise ValueError(
                f"{at}: {side} quantiles must not decrease from q0 to q{levels - 1}, got "
                f"{','.join(fields[2:])}"
            )
        sides[side][bin_] = values
    prompt, output = sides["prompt"], sides["output"]
    if not prompt:
        raise ValueError(f"{where}: no prompt rows")
    for bin_ in sorted(prompt.keys() ^ output.keys()):
        lacks = "output" if bin_ in prompt else "prompt"
        raise ValueError(
            f"{where} line {first_line[bin_]}: bin {bin_} has no {lacks} row; expected a "
            "prompt and an output row for each bin"
        )
    source = "\n".join(line[2:] for line in text.splitlines() if line.startswith("# "))
    order = sorted(prompt)
    return LengthTable(
        np.array([prompt[b] for b in order]), np.array([output[b] for b in order]), source
    )
