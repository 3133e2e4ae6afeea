"""Where trace files live and what the named traces are.

Trace files are public but may not be committed into the project: kvsim reads them from a folder
given by the ``KVSIM_DATA`` environment variable, or by default from ``../shared/data/traces``
beside the repository. :func:`data_dir` finds that folder; :func:`resolve_trace` maps a short
trace name (``"azure_conv"``) or a user path to a file, and says where to download what is missing.
"""

from __future__ import annotations

import errno
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from kvsim.base.names import preset_hint
from kvsim.base.say_once import warn_once

ENV_VAR = "KVSIM_DATA"
_DEFAULT_SUBDIR = Path("shared") / "data" / "traces"
logger = logging.getLogger(__name__)


class DataNotFoundError(FileNotFoundError):
    """A trace file or the trace folder is missing; the message says where to get it."""


@dataclass(frozen=True, slots=True)
class TraceInfo:
    """One named trace of the shared data folder.

    Attributes:
        file_name: file name inside the data folder.
        fmt: reader format: ``"azure"``, ``"mooncake"``, ``"sharegpt_opt"``, ``"alpaca"`` or
            ``"vidur"``.
        has_arrivals: whether rows carry arrival times (``arrival = "trace"`` is allowed, and
            the default: ``WorkloadSpec.arrival``).
        source: public upstream repository and path of the file.
    """

    file_name: str
    fmt: str
    has_arrivals: bool
    source: str


TRACES: dict[str, TraceInfo] = {
    "sharegpt_opt": TraceInfo(
        "sharegpt_opt_firstturn_lengths.csv",
        "sharegpt_opt",
        False,
        "sosp-ae-39/sosp-ae-astra datasets/sharegpt_opt_text_completion_length.pkl "
        "(a pickle of (input_len, output_len) pairs, converted to CSV)",
    ),
    "alpaca_opt": TraceInfo(
        "alpaca_opt_lengths.csv",
        "alpaca",
        False,
        "tatsu-lab/stanford_alpaca alpaca_data.json, tokenized with OPT's tokenizer "
        "(instruction + ' ' + input, plus BOS; output)",
    ),
    "sharegpt_llama2": TraceInfo(
        "sharegpt_llama2_8k_lengths.csv",
        "vidur",
        False,
        "microsoft/sarathi-serve data/processed_traces/"
        "sharegpt_8k_filtered_stats_llama2_tokenizer.csv (branch niyama_asplos2026)",
    ),
    "arxiv": TraceInfo(
        "arxiv_summarization_llama2_lengths.csv",
        "vidur",
        False,
        "microsoft/vidur data/processed_traces/"
        "arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv",
    ),
    "azure_conv": TraceInfo(
        "azure_llm_2023_conv.csv",
        "azure",
        True,
        "Azure/AzurePublicDataset data/AzureLLMInferenceTrace_conv.csv",
    ),
    "azure_code": TraceInfo(
        "azure_llm_2023_code.csv",
        "azure",
        True,
        "Azure/AzurePublicDataset data/AzureLLMInferenceTrace_code.csv",
    ),
    "mooncake_conversation": TraceInfo(
        "mooncake_conversation.jsonl",
        "mooncake",
        True,
        "kvcache-ai/Mooncake FAST25-release/traces/conversation_trace.jsonl",
    ),
    "mooncake_synthetic": TraceInfo(
        "mooncake_synthetic.jsonl",
        "mooncake",
        True,
        "kvcache-ai/Mooncake FAST25-release/traces/synthetic_trace.jsonl",
    ),
}


def _candidate_dirs() -> list[Path]:
    """Default data folders, in search order: beside the repository, then beside the cwd."""
    repo_parent = Path(__file__).resolve().parents[3]  # this file's clone's parent folder
    candidates = [repo_parent / _DEFAULT_SUBDIR, Path.cwd().parent / _DEFAULT_SUBDIR]
    unique: list[Path] = []
    for path in candidates:
        if path not in unique:
            unique.append(path)
    return unique


def default_data_dir() -> Path:
    """Where traces go without ``$KVSIM_DATA``: the first default folder that exists, else the
    one beside the clone when kvsim runs from a clone, else the one beside the current folder."""
    candidates = _candidate_dirs()
    for path in candidates:
        if path.is_dir():
            return path
    from_clone = (Path(__file__).resolve().parents[2] / "pyproject.toml").is_file()
    return candidates[0] if from_clone else candidates[-1]


def _download_hint(looking_for: str | None) -> str:
    """Sentence naming the public upstream source(s) of the trace files."""
    for info in TRACES.values():
        if info.file_name == looking_for:
            return (
                f"{looking_for} comes from the public repository {info.source}; "
                "`kvsim data fetch` downloads and verifies it."
            )
    return (
        "The trace files come from public repositories: Azure/AzurePublicDataset "
        "(azure_llm_2023_*.csv), kvcache-ai/Mooncake (mooncake_*.jsonl), sosp-ae-39/sosp-ae-astra "
        "(sharegpt_opt_firstturn_lengths.csv), microsoft/sarathi-serve "
        "(sharegpt_llama2_8k_lengths.csv) and microsoft/vidur "
        "(arxiv_summarization_llama2_lengths.csv); `kvsim data fetch` downloads and verifies them."
    )


def _not_found(looking_for: str | None, where: str) -> DataNotFoundError:
    what = f"trace file {looking_for!r}" if looking_for else "the trace data folder"
    return DataNotFoundError(
        f"Could not find {what}: looked in {where}. Set the environment variable {ENV_VAR} to "
        f"the folder that holds the trace files. {_download_hint(looking_for)}"
    )


def data_dir(*, looking_for: str | None = None) -> Path:
    """Return the folder holding the trace files.

    ``$KVSIM_DATA`` when set; otherwise ``<repo>/../shared/data/traces`` found relative to the
    installed package, then relative to the current directory.

    Args:
        looking_for: file name the caller wants, used only to make the error message precise.

    Returns:
        An existing directory.

    Raises:
        DataNotFoundError: no such folder exists.
    """
    env_value = os.environ.get(ENV_VAR)
    if env_value:
        path = Path(env_value).expanduser()
        if path.is_dir():
            return path
    else:
        for path in _candidate_dirs():
            if path.is_dir():
                return path
    raise _not_found(looking_for, data_dir_searched())


def data_dir_searched() -> str:
    """Where ``data_dir`` looks, in words (for messages when it finds nothing)."""
    env_value = os.environ.get(ENV_VAR)
    if env_value:
        return f"{ENV_VAR}={env_value} (not a directory)"
    unset = "is set but empty" if env_value == "" else "is not set"
    # (a trailing slash: the folders read as folders where a message is cut to file names)
    return " and ".join(f"{p}/" for p in _candidate_dirs()) + f" ({ENV_VAR} {unset})"


def _refuse_link_loop(trace: str, path: Path) -> None:
    """Refuse a path whose symbolic links lead back to themselves (``Path.resolve`` would raise
    ``RuntimeError``, and ``is_file`` says only "no").

    Raises:
        ValueError: naming the trace and the links followed.
    """
    try:
        path.stat()
    except OSError as err:
        if err.errno != errno.ELOOP:
            return
        chain, seen = [str(path)], {os.path.abspath(path)}
        link = path
        while link.is_symlink() and len(chain) < 8:
            link = link.parent / os.readlink(link)
            chain.append(str(link))
            if os.path.abspath(link) in seen:
                break
            seen.add(os.path.abspath(link))
        raise ValueError(
            f"workload.trace {trace!r}: a loop of symbolic links ({' -> '.join(chain)}), not a "
            "file; point workload.trace at the trace file itself"
        ) from None


def _catalogued_path(info: TraceInfo) -> Path:
    """The catalogued trace's file in the data folder.

    Raises:
        DataNotFoundError: no data folder, or no file (or a folder) of its name there."""
    folder = data_dir(looking_for=info.file_name)
    path = folder / info.file_name
    if path.is_dir():
        raise DataNotFoundError(
            f"{path} is a directory, expected the trace file {info.file_name!r} there. "
            f"{_download_hint(info.file_name)}"
        )
    if not path.is_file():
        env_note = f"{ENV_VAR}={os.environ[ENV_VAR]}" if os.environ.get(ENV_VAR) else str(folder)
        raise _not_found(info.file_name, env_note)
    return path


def resolve_trace(trace: str) -> tuple[Path, TraceInfo | None]:
    """Map a short trace name or a file path to an existing file.

    Args:
        trace: a key of :data:`TRACES` (``"azure_conv"``), a file name of the data folder
            (``"azure_llm_2023_conv.csv"``), or a path to a user file.

    Returns:
        ``(path, info)``; ``info`` is ``None`` for a user file (its format is detected later).

    Raises:
        DataNotFoundError: the file does not exist, or is a directory.
    """
    info = TRACES.get(trace)
    if info is None:
        info = next((i for i in TRACES.values() if i.file_name == trace), None)
    if info is not None:
        local = Path(trace)  # a file of the catalogued name beside the user: not the one read
        try:
            path = _catalogued_path(info)
        except DataNotFoundError as exc:
            if local.is_file():
                raise DataNotFoundError(
                    f"{exc} (The file {trace!r} in the current folder is not read: "
                    f"{trace!r} names the catalogued trace; write './{trace}' to read that file.)"
                ) from None
            raise
        if local.is_file() and local.resolve() != path.resolve():
            warn_once(
                logger,
                "workload.trace = %r names the catalogued trace, read from %s, not the file of "
                "that name in the current folder; write './%s' to read that file",
                trace,
                path,
                trace,
            )
        return path, info
    path = Path(trace).expanduser()
    if path.is_file():
        return path, None
    _refuse_link_loop(trace, path)
    names = ", ".join(sorted(TRACES))
    if path.is_dir():
        raise DataNotFoundError(
            f"Trace {trace!r} is a directory ({path.resolve()}), expected a trace file (CSV, "
            f"Parquet, JSON Lines or ShareGPT JSON) or a known trace name ({names})"
        )
    if path.exists():  # (a pipe or a device: read whole, twice, by the trace cache's keys)
        raise DataNotFoundError(
            f"Trace {trace!r} is not a regular file (a pipe or a device), expected a trace file "
            "(CSV, Parquet, JSON Lines or ShareGPT JSON); save it to a file first"
        )
    # (a name, not a path: the closest trace names)
    close = "" if "/" in trace or Path(trace).suffix else preset_hint("traces", trace, TRACES)
    raise DataNotFoundError(
        f"Trace {trace!r} is neither a known trace name ({names}) nor an existing file "
        f"(looked for {path.resolve()}){close or '.'} Named traces are read from the folder in "
        f"{ENV_VAR}. {_download_hint(None)}"
    )
