"""ShareGPT JSON conversations (the vLLM benchmark's dataset format), tokenized locally.

The file is one JSON array of ``{"id": ..., "conversations": [{"from": "human", "value": "..."},
{"from": "gpt", "value": "..."}, ...]}``. Text is counted with a Hugging Face ``tokenizer.json``
through the ``tokenizers`` library (``workload.tokenizer``: the file or its folder; no hub).

- ``sharegpt`` (first turn): what vLLM v0.20.0's ``ShareGPTDataset.sample``
  (``vllm/benchmarks/datasets/datasets.py``) measures: prompt = message 0, output = message 1,
  each ``len(tokenizer(text).input_ids)``, special tokens included (a Llama tokenizer adds BOS).
- ``sharegpt_multiturn``: one request per model reply that follows at least one other message:
  prompt = every earlier message of the conversation (the history grows turn by turn), output =
  the reply; texts are counted without special tokens and the prompt gets the tokenizer's
  special tokens once (``num_special_tokens_to_add``). So turn ``t + 1``'s prompt is turn ``t``'s
  prompt + output + the new messages, and rows share ``session_id`` = the conversation's index.

Roles: replies are ``gpt``, ``chatgpt``, ``bard``, ``bing``, ``assistant``, ``model``; inputs
``human``, ``user``, ``system``; other roles count as input, with a warning. Conversations of fewer
than two messages are skipped (vLLM's benchmark skips them too), with a warning giving the count.
No chat template is applied. vLLM's benchmark length filter (prompt >= 4, output >= 4, prompt <=
1024, total <= 2048) is the user's to set (``min_prompt_tokens``...); kvsim applies none.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from kvsim.base.extras import require
from kvsim.base.textfile import parse_json, read_text
from kvsim.workload.trace_table import Trace

if TYPE_CHECKING:
    from tokenizers import Tokenizer

logger = logging.getLogger(__name__)

REPLY_ROLES = frozenset({"gpt", "chatgpt", "bard", "bing", "assistant", "model"})
INPUT_ROLES = frozenset({"human", "user", "system"})


def tokenizer_file(value: str | Path) -> Path:
    """The ``tokenizer.json`` that ``workload.tokenizer`` names (the file, or a folder holding it).

    Raises:
        ValueError: no such file.
    """
    path = Path(value).expanduser()
    if path.is_dir():
        path = path / "tokenizer.json"
    if not path.is_file():
        raise ValueError(
            f"workload.tokenizer: expected a Hugging Face tokenizer.json (or its folder), got "
            f"{str(value)!r} (no such file: {path})"
        )
    return path.resolve()


def load_tokenizer(path: Path) -> Tokenizer:
    """A ``tokenizers.Tokenizer`` from ``path``, with any truncation or padding it sets turned off
    (whole texts are counted; a warning says so). Read at each call: the trace it counts is
    what ``kvsim.workload.traces`` keeps, by both files' modification times.

    Raises:
        MissingExtraError: the ``tokenizers`` extra is not installed.
        ValueError: ``path`` is not a tokenizer.json.
    """
    tokenizers = require("tokenizers", "workload.tokenizer (counting a ShareGPT JSON trace)")
    try:
        tokenizer: Tokenizer = tokenizers.Tokenizer.from_file(str(path))
    except Exception as exc:  # the library raises its own Exception subclass
        raise ValueError(f"workload.tokenizer: {path} is not a tokenizer.json ({exc})") from None
    if tokenizer.truncation is not None or tokenizer.padding is not None:
        logger.warning(
            "%s sets truncation %s / padding %s; kvsim turns both off to count whole texts",
            path,
            tokenizer.truncation,
            tokenizer.padding,
        )
        tokenizer.no_truncation()
        tokenizer.no_padding()
    return tokenizer


def read_sharegpt(path: Path, tokenizer_path: Path, *, multiturn: bool) -> Trace:
    """Read a ShareGPT JSON file into a lengths-only :class:`Trace` (see the module docstring).

    Raises:
        ValueError: invalid JSON or a malformed conversation, naming file, line and field.
    """
    text = read_text(path)
    try:
        entries = parse_json(text, str(path))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path} line {exc.lineno}: invalid JSON ({exc.msg})") from None
    if not isinstance(entries, list):
        raise ValueError(
            f"{path}: expected a JSON array of conversations, got a {type(entries).__name__}"
        )
    conversations = _conversations(path, text, entries)
    tokenizer = load_tokenizer(tokenizer_path)
    if multiturn:
        prompt, output, sessions = _multiturn(tokenizer, conversations)
    else:
        firsts = [m for conv in conversations for m in (conv[0][1], conv[1][1])]
        counts = [len(e.ids) for e in tokenizer.encode_batch(firsts, add_special_tokens=True)]
        prompt, output, sessions = counts[0::2], counts[1::2], None
    return Trace(
        path,
        "sharegpt_multiturn" if multiturn else "sharegpt",
        np.asarray(prompt, dtype=np.int64),
        np.asarray(output, dtype=np.int64),
        session_ids=sessions,
    )


def _conversations(path: Path, text: str, entries: list[Any]) -> list[list[tuple[str, str]]]:
    """``[(role, text), ...]`` per conversation of two or more messages, in file order."""
    out: list[list[tuple[str, str]]] = []
    short = 0
    odd_roles: dict[str, int] = {}
    for index, entry in enumerate(entries):
        messages = entry.get("conversations") if isinstance(entry, dict) else None
        if not isinstance(messages, list):
            got = entry if not isinstance(entry, dict) else entry.get("conversations")
            raise ValueError(
                f"{path} line {_entry_line(text, index)}: conversation {index}: "
                f"conversations must be a list of messages, got {_short(got)}"
            )
        if len(messages) < 2:
            short += 1
            continue
        conv: list[tuple[str, str]] = []
        for k, message in enumerate(messages):
            role, value = _message(path, text, index, k, message)
            if role not in REPLY_ROLES and role not in INPUT_ROLES:
                odd_roles[role] = odd_roles.get(role, 0) + 1
            conv.append((role, value))
        out.append(conv)
    if short:
        logger.warning(
            "%s: skipped %d of %d conversations with fewer than two messages",
            path,
            short,
            len(entries),
        )
    if odd_roles:
        logger.warning(
            "%s: %d message(s) of unknown role %s counted as input (replies: %s)",
            path,
            sum(odd_roles.values()),
            sorted(odd_roles),
            sorted(REPLY_ROLES),
        )
    return out


def _message(path: Path, text: str, index: int, k: int, message: Any) -> tuple[str, str]:
    def where() -> str:  # not str.format: the path may hold braces
        return f"{path} line {_entry_line(text, index)}: conversation {index}: conversations[{k}]"

    if not isinstance(message, dict):
        raise ValueError(
            f"{where()} must be an object with 'from' and 'value', got {_short(message)}"
        )
    for key in ("from", "value"):
        if not isinstance(message.get(key), str):
            raise ValueError(f"{where()}.{key} must be a string, got {_short(message.get(key))}")
    return str(message["from"]).lower(), str(message["value"])


def _multiturn(
    tokenizer: Tokenizer, conversations: list[list[tuple[str, str]]]
) -> tuple[list[int], list[int], tuple[int | None, ...]]:
    texts = [value for conv in conversations for _, value in conv]
    counts = iter(len(e.ids) for e in tokenizer.encode_batch(texts, add_special_tokens=False))
    specials = tokenizer.num_special_tokens_to_add(is_pair=False)
    prompt: list[int] = []
    output: list[int] = []
    sessions: list[int | None] = []
    for session, conv in enumerate(conversations):
        history = 0
        seen_input = False
        for role, _ in conv:
            tokens = next(counts)
            if role in REPLY_ROLES and history > 0 and seen_input:
                prompt.append(specials + history)
                output.append(tokens)
                sessions.append(session)
            seen_input = seen_input or role not in REPLY_ROLES
            history += tokens
    return prompt, output, tuple(sessions)


def _entry_line(text: str, index: int) -> int:
    """1-based line on which element ``index`` of the top-level JSON array starts."""
    decoder = json.JSONDecoder()
    pos = text.index("[") + 1
    for i in range(index + 1):
        while text[pos] in " \t\r\n,":
            pos += 1
        if i == index:
            break
        _, pos = decoder.raw_decode(text, pos)
    return text.count("\n", 0, pos) + 1


def _short(value: Any) -> str:
    shown = repr(value)
    return shown if len(shown) <= 60 else shown[:57] + "..."
