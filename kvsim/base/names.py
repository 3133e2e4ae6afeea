"""Suggestions for a misnamed preset (models, GPUs, workloads, experiments): one rule for every
kind of name kvsim ships."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def preset_hint(kind: str, name: str, presets: Iterable[str]) -> str:
    """``"; did you mean 'h100-80gb'?"`` for a misnamed preset: the presets ``name`` begins (up
    to three: ``a100``), else the one it extends (``meta-llama/Llama-3.1-8B-Instruct``: the end
    of a Hugging Face repository id, lowercased), else those holding it (``4090``), else the
    closest spelling (``difflib``); for a model named by a repository id, also how to read its
    ``config.json``. ``kind``: ``"models"``, ``"gpus"``, ``"workloads"``."""
    names = sorted(presets)
    short = name.lower().rsplit("/", 1)[-1]
    close = [p for p in names if p.startswith(short)]
    if len(close) > 3:  # (too short a name to guess: "llama")
        close = []
    elif not close:
        extends = [p for p in names if short.startswith(p)]
        close = [max(extends, key=len)] if extends else [p for p in names if short in p]
        if not close or len(close) > 3:
            close = difflib.get_close_matches(short, names, n=1)
    hint = f"; did you mean {' or '.join(repr(p) for p in close)}?" if close else ""
    if kind == "models" and "/" in name:
        hint += ' (a Hugging Face model: model.hf_config = "path/to/config.json")'
    return hint
