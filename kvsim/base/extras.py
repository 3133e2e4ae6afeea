"""The optional parts of kvsim: each heavy library a feature needs is an extra of the package
(``pip install 'kvsim[NAME]'``), and a feature whose extra is missing says which one in one line.

The core (``pip install kvsim``) runs, saves, sweeps, plans, plots and reproduces without them;
``EXTRAS`` lists what each extra brings and which feature asks for it (``docs/install.md`` gives
their installed sizes). ``[all]`` installs every one except ``gpu`` (CuPy needs CUDA).
"""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

# extra -> (the module kvsim imports, what it is for); pyproject.toml's
# [project.optional-dependencies] installs each
EXTRAS: dict[str, tuple[str, str]] = {
    "parquet": ("pyarrow", "results tables as Parquet (CSV without it) and Parquet traces"),
    "report": ("plotly", "kvsim report, the HTML page of runs"),
    "tokenizers": ("tokenizers", "ShareGPT JSON traces counted with a tokenizer.json"),
    "fit": ("scipy", "the paper fits (fig13, fig15), kvsim calibrate --from-runs and --fit-parts"),
    "validate": ("yaml", "kvsim validate: the measured runs' YAML configs"),
    "sweep": ("dask.distributed", "sweeps on a Dask cluster (--scheduler)"),
}


class MissingExtraError(ImportError):
    """A feature needs an optional library that is not installed; the message names the extra
    that installs it (the CLI prints it as one ``error:`` line, exit status 2)."""


def has_extra(extra: str) -> bool:
    """Whether the library of ``extra`` (a key of ``EXTRAS``) is importable, without importing
    it."""
    module = EXTRAS[extra][0]
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a missing parent package of a dotted name
        return False


def require(extra: str, feature: str) -> ModuleType:
    """The library of ``extra`` (a key of ``EXTRAS``), imported.

    Args:
        extra: the extra's name (``"parquet"``, ``"report"``...).
        feature: what asked for it, for the message (``"kvsim report"``).

    Raises:
        MissingExtraError: ``{feature} needs the '{extra}' extra: pip install 'kvsim[{extra}]'
            ({module} is not installed)``.
    """
    module = EXTRAS[extra][0]
    try:
        return importlib.import_module(module)
    except ImportError as err:
        missing = getattr(err, "name", None) or module
        raise MissingExtraError(
            f"{feature} needs the {extra!r} extra: pip install 'kvsim[{extra}]' "
            f"({missing} is not installed)"
        ) from None
