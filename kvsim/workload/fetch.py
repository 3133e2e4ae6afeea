"""Download the public originals of kvsim's real traces, verify them and store them.

kvsim reads its real traces from the data folder (``$KVSIM_DATA``, see
:mod:`kvsim.workload.catalog`). The files may not be committed into the project, so this module
fetches them from their public upstream repositories, each pinned to one commit, and checks every
byte against a SHA-256 fixed here:

- ``copy``: the upstream file is stored unchanged; its SHA-256 is the stored file's.
- ``pickle_pairs``: the vLLM paper's ShareGPT lengths, a pickle of ``(input_len, output_len)``
  tuples, read by an unpickler that resolves no globals (so it can run no code), validated and
  written as CSV.
- ``alpaca_tokens``: the Stanford Alpaca JSON, counted with GPT-2's byte-level BPE (OPT's
  tokenizer has the same merges) through the ``tokenizers`` library.

Every download is first written to a hidden temporary file inside the destination folder and
checked against its pinned SHA-256; a converted file is checked against the SHA-256 of the
reference copy. Only then is the result renamed into place, so a failed or tampered download
never leaves a file under a name that kvsim reads. The checksums of the stored files are those
of the reference data folder's README; those of the downloaded pickle, Alpaca JSON and GPT-2
tokenizer files are of the upstream bytes at the pinned commits (the GPT-2 ones as published in
OpenAI's ``tiktoken``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pickle
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from kvsim.base.extras import require
from kvsim.base.textfile import cached_sha256_file, sha256_file
from kvsim.workload.catalog import ENV_VAR, default_data_dir

if TYPE_CHECKING:
    from tokenizers import Tokenizer

ConversionKind = Literal["copy", "pickle_pairs", "alpaca_tokens"]
FetchStatus = Literal["present", "fetched", "replaced"]
FileState = Literal["verified", "differs", "unreadable", "missing"]

GITHUB_RAW = "https://raw.githubusercontent.com/"
OPENAI_PUBLIC = "https://openaipublic.blob.core.windows.net/"
DEFAULT_TIMEOUT_S = 60.0
README_NAME = "README.md"
README_MARKER = "<!-- written by `kvsim data fetch`; it rewrites this file -->"
_CHUNK_BYTES = 1 << 20
_USER_AGENT = "kvsim-datafetch/1"


class FetchError(OSError):
    """A download or a write failed: network error, HTTP status, timeout, unwritable folder."""


class ChecksumError(ValueError):
    """Downloaded or converted bytes do not have the pinned SHA-256."""


class BadPickleError(ValueError):
    """A pickle is not a plain list of ``(int, int)`` pairs of non-negative ints, or would need
    a global (code) to load."""


@dataclass(frozen=True, slots=True)
class Upstream:
    """One public file that is downloaded.

    Attributes:
        url: the upstream address, pinned to a commit where the host has commits.
        sha256: SHA-256 (hex) of the upstream bytes.
        mirror_name: the name the file has under a mirror (``--mirror URL`` fetches
            ``URL/<mirror_name>``): the local file name for copies, else the upstream basename.
    """

    url: str
    sha256: str
    mirror_name: str


@dataclass(frozen=True, slots=True)
class Source:
    """Where one file of the data folder comes from and how it is made.

    Attributes:
        trace: the catalog's trace name (:data:`kvsim.workload.catalog.TRACES`).
        file_name: the file name in the data folder.
        sha256: SHA-256 (hex) of the stored file (the download itself for ``copy``).
        kind: how the stored file is made from the downloads.
        upstreams: the downloads; the first is the data, any others are tools (a tokenizer).
        licence: the licence terms, as the upstream repository states them.
        citation: what to cite.
    """

    trace: str
    file_name: str
    sha256: str
    kind: ConversionKind
    upstreams: tuple[Upstream, ...]
    licence: str
    citation: str

    @property
    def url(self) -> str:
        """The upstream address of the data (the first download)."""
        return self.upstreams[0].url


def _github(repo: str, commit: str, path: str, sha256: str, mirror_name: str = "") -> Upstream:
    """An :class:`Upstream` on raw.githubusercontent.com at ``commit``."""
    name = mirror_name or path.rsplit("/", 1)[-1]
    return Upstream(f"{GITHUB_RAW}{repo}/{commit}/{path}", sha256, name)


_AZURE_COMMIT = "b469a113cedca53ddc3bdea71a143dc4b7d8700c"
_MOONCAKE_COMMIT = "3b5a594133958449a1feaf1c9e0fc1b553e34a28"
_AZURE_LICENCE = "CC-BY-4.0 (data; attribution required); the repository's code is MIT"
_AZURE_CITE = (
    'Patel et al., "Splitwise: Efficient generative LLM inference using phase splitting", ISCA 2024'
)
_MOONCAKE_LICENCE = "Apache-2.0 (the repository's licence; no separate data licence)"
_MOONCAKE_CITE = (
    'Qin et al., "Mooncake: Trading More Storage for Less Computation - A KVCache-centric '
    'Architecture for Serving LLM Chatbot", FAST 2025'
)
_VLLM_CITE = (
    'Kwon et al., "Efficient Memory Management for Large Language Model Serving with '
    'PagedAttention", SOSP 2023'
)

#: GPT-2's byte-level BPE as OpenAI released it (the vocabulary and the merges); the
#: checksums are the ones OpenAI's ``tiktoken`` pins for its ``gpt2`` encoding.
GPT2_ENCODER_JSON = Upstream(
    f"{OPENAI_PUBLIC}gpt-2/encodings/main/encoder.json",
    "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783",
    "encoder.json",
)
GPT2_VOCAB_BPE = Upstream(
    f"{OPENAI_PUBLIC}gpt-2/encodings/main/vocab.bpe",
    "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5",
    "vocab.bpe",
)

#: One entry per file of the data folder, in the catalog's order.
SOURCES: tuple[Source, ...] = (
    Source(
        "sharegpt_opt",
        "sharegpt_opt_firstturn_lengths.csv",
        "2d010eeaafc9781f639c3af00237b7de51632b20e6aecd8475627c54f4b2c62f",
        "pickle_pairs",
        (
            _github(
                "sosp-ae-39/sosp-ae-astra",
                "3180d2f8c2a2aa1729245f9b0cb75a854746e6a8",
                "datasets/sharegpt_opt_text_completion_length.pkl",
                "e94cab96a24400f43f8e925de61fec20eec47082c7908d26f28cd578a87b8aeb",
            ),
        ),
        "none stated by the repository (integer lengths derived from ShareGPT)",
        f"{_VLLM_CITE} (artifact sosp-ae-39/sosp-ae-astra)",
    ),
    Source(
        "alpaca_opt",
        "alpaca_opt_lengths.csv",
        "1a055297afb8782dcf86972936fa99f2afd7f65ad9112bb67e618bff0e49e17c",
        "alpaca_tokens",
        (
            _github(
                "tatsu-lab/stanford_alpaca",
                "761dc5bfbdeeffa89b8bff5d038781a4055f796a",
                "alpaca_data.json",
                "2eddafc6b977608d778aaab8dfc7e50e547b3af9826dfb9e909d9fc362e4a419",
            ),
            GPT2_ENCODER_JSON,
            GPT2_VOCAB_BPE,
        ),
        "CC-BY-NC-4.0 (non-commercial use only; attribution required); "
        "the GPT-2 tokenizer files are from openai/gpt-2 (Modified MIT)",
        'Taori et al., "Stanford Alpaca: An Instruction-following LLaMA model", 2023',
    ),
    Source(
        "sharegpt_llama2",
        "sharegpt_llama2_8k_lengths.csv",
        "6d6c296302a853e2669a674a96f269283e60c57e60363bd450588a1066919f9f",
        "copy",
        (
            _github(
                "microsoft/sarathi-serve",
                "72339db5b120614033b317880ad3a05a5e4c9415",
                "data/processed_traces/sharegpt_8k_filtered_stats_llama2_tokenizer.csv",
                "6d6c296302a853e2669a674a96f269283e60c57e60363bd450588a1066919f9f",
                "sharegpt_llama2_8k_lengths.csv",
            ),
        ),
        "Apache-2.0",
        'Agrawal et al., "Taming Throughput-Latency Tradeoff in LLM Inference with '
        'Sarathi-Serve", OSDI 2024',
    ),
    Source(
        "arxiv",
        "arxiv_summarization_llama2_lengths.csv",
        "9d3580538d915ca75e4aaaa54590b42dbb17abc6d74c8913310cf07c232adcdc",
        "copy",
        (
            _github(
                "microsoft/vidur",
                "7d47513363ec447a741ac5e47241580b47724fbf",
                "data/processed_traces/arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv",
                "9d3580538d915ca75e4aaaa54590b42dbb17abc6d74c8913310cf07c232adcdc",
                "arxiv_summarization_llama2_lengths.csv",
            ),
        ),
        "MIT",
        'Agrawal et al., "Vidur: A Large-Scale Simulation Framework for LLM Inference", MLSys 2024',
    ),
    Source(
        "azure_conv",
        "azure_llm_2023_conv.csv",
        "2f1e5b666d4e3055fdbba98598ce2ec307767b9064e03e2fa46676dbcc7d0bf8",
        "copy",
        (
            _github(
                "Azure/AzurePublicDataset",
                _AZURE_COMMIT,
                "data/AzureLLMInferenceTrace_conv.csv",
                "2f1e5b666d4e3055fdbba98598ce2ec307767b9064e03e2fa46676dbcc7d0bf8",
                "azure_llm_2023_conv.csv",
            ),
        ),
        _AZURE_LICENCE,
        _AZURE_CITE,
    ),
    Source(
        "azure_code",
        "azure_llm_2023_code.csv",
        "54e9a6d2a4bd06ba1e060304b900abbc74cbea53de96506e60fe5bb4f2277fb6",
        "copy",
        (
            _github(
                "Azure/AzurePublicDataset",
                _AZURE_COMMIT,
                "data/AzureLLMInferenceTrace_code.csv",
                "54e9a6d2a4bd06ba1e060304b900abbc74cbea53de96506e60fe5bb4f2277fb6",
                "azure_llm_2023_code.csv",
            ),
        ),
        _AZURE_LICENCE,
        _AZURE_CITE,
    ),
    Source(
        "mooncake_conversation",
        "mooncake_conversation.jsonl",
        "b8cbb061a85206d729d91cdc2981f43c9e0d99209dce588d3af5f7934408b9df",
        "copy",
        (
            _github(
                "kvcache-ai/Mooncake",
                _MOONCAKE_COMMIT,
                "FAST25-release/traces/conversation_trace.jsonl",
                "b8cbb061a85206d729d91cdc2981f43c9e0d99209dce588d3af5f7934408b9df",
                "mooncake_conversation.jsonl",
            ),
        ),
        _MOONCAKE_LICENCE,
        _MOONCAKE_CITE,
    ),
    Source(
        "mooncake_synthetic",
        "mooncake_synthetic.jsonl",
        "bd070915a98fc0ed264d7cfef2ce746002eb3076a695ec31ba2674c0111ec131",
        "copy",
        (
            _github(
                "kvcache-ai/Mooncake",
                _MOONCAKE_COMMIT,
                "FAST25-release/traces/synthetic_trace.jsonl",
                "bd070915a98fc0ed264d7cfef2ce746002eb3076a695ec31ba2674c0111ec131",
                "mooncake_synthetic.jsonl",
            ),
        ),
        _MOONCAKE_LICENCE,
        _MOONCAKE_CITE,
    ),
)


@dataclass(frozen=True, slots=True)
class FetchResult:
    """What :func:`fetch` did for one file.

    Attributes:
        source: the file's entry of :data:`SOURCES`.
        path: where the verified file now is.
        status: ``present`` (already there with the right SHA-256, not downloaded),
            ``fetched`` (new) or ``replaced`` (a file with another SHA-256 was there: it is
            kept beside as ``NAME.bak``).
    """

    source: Source
    path: Path
    status: FetchStatus


@dataclass(frozen=True, slots=True)
class FileStatus:
    """Whether one file of :data:`SOURCES` is in a folder.

    Attributes:
        source: the file's entry of :data:`SOURCES`.
        path: where the file is looked for.
        state: ``verified`` (present, right SHA-256), ``differs`` (present, another SHA-256),
            ``unreadable`` (present, but it cannot be read: its permissions) or ``missing``.
    """

    source: Source
    path: Path
    state: FileState


# --- selection and destination -----------------------------------------------------------------


def source_named(name: str) -> Source | None:
    """The entry of :data:`SOURCES` of a catalog trace name or a stored file name, or ``None``."""
    return next((s for s in SOURCES if name in (s.trace, s.file_name)), None)


def select_sources(names: Iterable[str] | None = None) -> list[Source]:
    """The entries of :data:`SOURCES` to fetch, in table order.

    Args:
        names: trace names of the catalog (``"azure_conv"``) or file names of the data folder
            (``"azure_llm_2023_conv.csv"``); ``None`` or empty: all of them.

    Raises:
        ValueError: a name is neither.
    """
    wanted = list(names or [])
    if not wanted:
        return list(SOURCES)
    chosen: set[str] = set()
    for name in wanted:
        match = source_named(name)
        if match is None:
            known = ", ".join(s.trace for s in SOURCES)
            raise ValueError(f"unknown trace {name!r}: expected one of {known}")
        chosen.add(match.trace)
    return [s for s in SOURCES if s.trace in chosen]


def destination(dest: Path | str | None = None) -> Path:
    """The folder to store the files in: ``dest`` when given, else ``$KVSIM_DATA``, else the
    default folder kvsim reads traces from (``../shared/data/traces`` beside the clone, or
    beside the current folder when kvsim is installed elsewhere: ``kvsim.workload.catalog``).

    The folder is not created here (see :func:`fetch`).
    """
    if dest is not None and str(dest):
        return Path(dest).expanduser()
    env_value = os.environ.get(ENV_VAR)
    if env_value:
        return Path(env_value).expanduser()
    return default_data_dir()


def mirror_url(upstream: Upstream, base_url: str | None) -> str:
    """The address to download ``upstream`` from.

    Args:
        upstream: the file.
        base_url: ``None`` for the upstream address; else a mirror: an ``http(s)://`` or
            ``file://`` URL, or a local folder, holding the file under
            :attr:`Upstream.mirror_name`.
    """
    import urllib.parse  # the network modules load only when a download is planned or made

    if not base_url:
        return upstream.url
    if "://" not in base_url:
        base_url = Path(base_url).expanduser().resolve().as_uri()
    elif base_url.split("://", 1)[0].lower() not in ("http", "https", "file"):
        raise ValueError(
            f"--mirror: expected an http(s):// or file:// URL or a local folder, got {base_url!r}"
        )
    return f"{base_url.rstrip('/')}/{urllib.parse.quote(upstream.mirror_name)}"


# --- hashing and downloading -------------------------------------------------------------------


def _one_line(text: object) -> str:
    """``text`` with its whitespace runs (newlines too) collapsed to single spaces."""
    return " ".join(str(text).split())


def _temp_file(folder: Path, name: str) -> Path:
    """A new empty hidden file ``.<name>.<random>.part`` in ``folder``.

    Raises:
        FetchError: the folder is not writable.
    """
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".part", dir=folder)
    except OSError as err:
        raise FetchError(
            f"{name}: cannot write in the data folder {folder} ({_one_line(err.strerror or err)})"
        ) from None
    os.close(fd)
    return Path(tmp)


def download(url: str, target: Path, *, expected_sha256: str, label: str, timeout: float) -> None:
    """Stream ``url`` into the existing file ``target`` and check its SHA-256.

    The bytes go to disk in 1 MiB chunks while they are hashed, so no file is held in memory.

    Args:
        url: ``http(s)://`` or ``file://`` address.
        target: the (temporary) file to write; it is deleted on any error.
        expected_sha256: hex SHA-256 the bytes must have.
        label: the file's name, used in messages.
        timeout: seconds to wait for the connection and for each read.

    Raises:
        FetchError: the download failed (network, HTTP status, timeout, disk).
        ChecksumError: the bytes have another SHA-256.
    """
    try:
        actual = _stream(url, target, label=label, timeout=timeout)
        if actual != expected_sha256:
            raise ChecksumError(
                f"{label}: SHA-256 mismatch for {url}: expected {expected_sha256}, got {actual}; "
                "the download was deleted"
            )
    except BaseException:
        with contextlib.suppress(OSError):
            target.unlink(missing_ok=True)
        raise


def _stream(url: str, target: Path, *, label: str, timeout: float) -> str:
    """Copy ``url`` into ``target`` chunk by chunk; return the SHA-256 (hex) of the bytes.

    Raises:
        FetchError: see :func:`download`.
    """
    import http.client
    import urllib.error
    import urllib.request

    digest = hashlib.sha256()
    request = urllib.request.Request(url, headers={"User-Agent": _USER_AGENT})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response, target.open("wb") as out:
            while chunk := response.read(_CHUNK_BYTES):
                out.write(chunk)
                digest.update(chunk)
    except urllib.error.HTTPError as err:
        raise FetchError(
            f"{label}: download from {url} failed (HTTP {err.code} {_one_line(err.reason)})"
        ) from None
    except urllib.error.URLError as err:
        raise FetchError(f"{label}: download from {url} failed ({_one_line(err.reason)})") from None
    except (OSError, http.client.HTTPException, ValueError) as err:
        reason = _one_line(err) or type(err).__name__
        if isinstance(err, TimeoutError):
            reason = f"timed out after {timeout:g} s"
        raise FetchError(f"{label}: download from {url} failed ({reason})") from None
    return digest.hexdigest()


# --- conversions -------------------------------------------------------------------------------


class _NoGlobalsUnpickler(pickle.Unpickler):
    """An unpickler that refuses every global, so loading can construct no class and call no
    function: only plain containers, numbers and strings come out."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refused the global {module}.{name}")


def load_length_pairs(path: Path, *, label: str | None = None) -> list[tuple[int, int]]:
    """Read a pickle that holds a plain list of ``(input_len, output_len)`` tuples.

    The unpickler resolves no globals, so a pickle that would import or call anything (e.g.
    ``os.system`` through ``__reduce__``) fails before any code runs.

    Args:
        path: the pickle file.
        label: the name used in messages (default: the file name).

    Returns:
        The pairs (tokens), in file order.

    Raises:
        BadPickleError: the pickle needs a global, is malformed, or is not a list of 2-tuples of
            non-negative ints (bools are refused).
        OSError: the file cannot be read.
    """
    name = label or path.name
    with path.open("rb") as f:
        try:
            data = _NoGlobalsUnpickler(f).load()
        except Exception as err:  # the unpickler raises many types on bad input
            raise BadPickleError(
                f"{name}: not a plain pickle of length pairs ({type(err).__name__}: "
                f"{_one_line(err)})"
            ) from None
    if type(data) is not list:
        raise BadPickleError(
            f"{name}: expected a list of (input_len, output_len) tuples, got a "
            f"{type(data).__name__}"
        )
    for index, row in enumerate(data):
        ok = type(row) is tuple and len(row) == 2 and all(type(v) is int and v >= 0 for v in row)
        if not ok:
            raise BadPickleError(
                f"{name}: row {index} is {_one_line(repr(row))[:80]}, expected a tuple of two "
                "non-negative ints"
            )
    return data


def write_pairs_csv(
    pairs: Sequence[tuple[int, int]], target: Path, header: tuple[str, str], newline: str
) -> None:
    """Write integer pairs as a two-column CSV with a header row.

    Args:
        pairs: the rows, written in order.
        target: the file to (over)write.
        header: the two column names.
        newline: the line ending, ``"\\n"`` or ``"\\r\\n"``, after every line including the last.
    """
    with target.open("w", encoding="utf-8", newline="") as out:
        out.write(f"{header[0]},{header[1]}{newline}")
        out.writelines(f"{first},{second}{newline}" for first, second in pairs)


def sharegpt_pickle_to_csv(pickle_path: Path, target: Path, *, label: str | None = None) -> None:
    """Convert the vLLM paper's ShareGPT length pickle to ``input_len,output_len`` CSV.

    Rows keep the pickle's order. Lines end in ``\\r\\n`` as in the reference copy (the README
    there says ``\\n``, but its checksum is of the ``\\r\\n`` file).

    Raises:
        BadPickleError: see :func:`load_length_pairs`.
        OSError: a file cannot be read or written.
    """
    pairs = load_length_pairs(pickle_path, label=label)
    write_pairs_csv(pairs, target, ("input_len", "output_len"), "\r\n")


def gpt2_tokenizer(encoder_json: Path, vocab_bpe: Path) -> Tokenizer:
    """GPT-2's byte-level BPE as a ``tokenizers.Tokenizer`` (no special tokens, no post-processor).

    OPT uses the same merges with renumbered ids, so counts equal OPT's without its BOS.

    Args:
        encoder_json: GPT-2's ``encoder.json`` (token -> id).
        vocab_bpe: GPT-2's ``vocab.bpe`` (the merges, first line ``#version: 0.2``).

    Raises:
        ValueError: the files are not a BPE vocabulary and merge list.
    """
    require("tokenizers", "counting the Alpaca lengths with GPT-2's tokenizer")
    from tokenizers import Tokenizer
    from tokenizers.models import BPE
    from tokenizers.pre_tokenizers import ByteLevel

    try:
        model = BPE.from_file(vocab=str(encoder_json), merges=str(vocab_bpe))
    except Exception as err:  # the library raises its own Exception type
        raise ValueError(
            f"{encoder_json.name}/{vocab_bpe.name}: not a GPT-2 BPE ({_one_line(err)})"
        ) from None
    tokenizer = Tokenizer(model)
    tokenizer.pre_tokenizer = ByteLevel(add_prefix_space=False)
    return tokenizer


def alpaca_lengths(
    records: Sequence[Any], tokenizer: Tokenizer, *, label: str
) -> list[tuple[int, int]]:
    """Token counts of Alpaca records, as the vLLM paper's OPT benchmark sees them.

    ``input_tokens`` counts ``instruction + " " + input`` (the space even when ``input`` is
    empty) and ``output_tokens`` counts ``output``; each gets 1 for the ``</s>`` BOS that OPT's
    tokenizer prepends to every string it encodes. This is the construction that reproduces the
    paper's means (19.31 and 58.45 tokens).

    Args:
        records: the parsed ``alpaca_data.json``: dicts with string ``instruction``, ``input``
            and ``output``.
        tokenizer: a ``tokenizers.Tokenizer`` without special tokens (:func:`gpt2_tokenizer`).
        label: the file name used in messages.

    Returns:
        ``(input_tokens, output_tokens)`` per record, in order.

    Raises:
        ValueError: a record lacks a field or a field is not a string.
    """
    prompts: list[str] = []
    outputs: list[str] = []
    for index, record in enumerate(records):
        if not isinstance(record, dict):
            raise ValueError(f"{label}: record {index} is a {type(record).__name__}, not an object")
        fields = []
        for key in ("instruction", "input", "output"):
            value = record.get(key)
            if not isinstance(value, str):
                raise ValueError(f"{label}: record {index} field {key!r}: expected a string")
            fields.append(value)
        prompts.append(f"{fields[0]} {fields[1]}")
        outputs.append(fields[2])
    counts = [
        [len(e.ids) + 1 for e in tokenizer.encode_batch(texts, add_special_tokens=False)]
        for texts in (prompts, outputs)
    ]
    return list(zip(counts[0], counts[1], strict=True))


def alpaca_json_to_csv(
    json_path: Path, encoder_json: Path, vocab_bpe: Path, target: Path, *, label: str | None = None
) -> None:
    """Convert ``alpaca_data.json`` to ``input_tokens,output_tokens`` CSV (``\\n`` line ends).

    See :func:`alpaca_lengths` for the counting.

    Raises:
        ValueError: invalid JSON, not a list of records, or a bad tokenizer file.
        OSError: a file cannot be read or written.
    """
    name = label or json_path.name
    try:
        with json_path.open(encoding="utf-8") as f:
            records = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"{name}: not valid JSON ({_one_line(err)})") from None
    if not isinstance(records, list):
        raise ValueError(f"{name}: expected a JSON array of records")
    pairs = alpaca_lengths(records, gpt2_tokenizer(encoder_json, vocab_bpe), label=name)
    write_pairs_csv(pairs, target, ("input_tokens", "output_tokens"), "\n")


# --- fetching ----------------------------------------------------------------------------------


def _make(
    source: Source, folder: Path, base_url: str | None, timeout: float, say: Callable[[str], None]
) -> None:
    """Download, verify and convert ``source`` into ``folder / source.file_name``."""
    temps: list[Path] = []
    try:
        inputs: list[Path] = []
        for upstream in source.upstreams:
            url = mirror_url(upstream, base_url)
            say(f"downloading {upstream.mirror_name} from {url}")
            tmp = _temp_file(folder, upstream.mirror_name)
            temps.append(tmp)
            download(
                url,
                tmp,
                expected_sha256=upstream.sha256,
                label=upstream.mirror_name,
                timeout=timeout,
            )
            inputs.append(tmp)
        if source.kind == "copy":
            output = inputs[0]
        else:
            output = _temp_file(folder, source.file_name)
            temps.append(output)
            urls = ", ".join(mirror_url(u, base_url) for u in source.upstreams)
            say(f"converting to {source.file_name}")
            data = source.upstreams[0]
            label = f"{data.mirror_name} (from {mirror_url(data, base_url)})"
            try:
                if source.kind == "pickle_pairs":
                    sharegpt_pickle_to_csv(inputs[0], output, label=label)
                else:
                    alpaca_json_to_csv(inputs[0], inputs[1], inputs[2], output, label=label)
            except OSError as err:
                raise FetchError(
                    f"{source.file_name}: conversion failed ({_one_line(err)})"
                ) from None
            actual = sha256_file(output)
            if actual != source.sha256:
                raise ChecksumError(
                    f"{source.file_name}: SHA-256 mismatch of the file converted from {urls}: "
                    f"expected {source.sha256}, got {actual}; the output was deleted"
                )
        final = folder / source.file_name
        try:
            os.replace(output, final)
        except OSError as err:
            raise FetchError(
                f"{source.file_name}: cannot move it into {folder} ({_one_line(err)})"
            ) from None
        with contextlib.suppress(OSError):
            final.chmod(0o644)
    finally:
        for tmp in temps:
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)


def fetch(
    dest: Path | str | None = None,
    *,
    names: Iterable[str] | None = None,
    base_url: str | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
    on_progress: Callable[[str], None] | None = None,
) -> list[FetchResult]:
    """Download, verify, convert and store trace files; refresh the folder's README.

    A file already present with the right SHA-256 is left alone (``present``); one with
    another is kept beside as ``NAME.bak`` and replaced (back in place if the fetch fails).
    Files are made one at a time in table order, and the first error stops the run; the files
    finished before it stay, verified.

    Args:
        dest: the folder to fill (created); ``None``: ``$KVSIM_DATA`` (see :func:`destination`).
        names: trace or file names to fetch (:func:`select_sources`); ``None``: all.
        base_url: a mirror to download from instead of the upstream hosts (:func:`mirror_url`).
        timeout: seconds to wait for a connection and for each read.
        on_progress: called with one line per step (download, conversion).

    Returns:
        One :class:`FetchResult` per selected file, in table order.

    Raises:
        ValueError: an unknown name or no destination.
        FetchError: a download failed or the folder is not writable.
        ChecksumError: a download or a converted file has another SHA-256.
        BadPickleError: the ShareGPT pickle is not a plain list of length pairs.
    """
    sources = select_sources(names)
    folder = destination(dest)
    say = on_progress or (lambda _line: None)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise FetchError(
            f"cannot create the data folder {folder} ({_one_line(err.strerror or err)})"
        ) from None
    results: list[FetchResult] = []
    try:
        for source in sources:
            path = folder / source.file_name
            existed = path.is_file()
            if existed and sha256_file(path) == source.sha256:
                results.append(FetchResult(source, path, "present"))
                continue
            kept = _keep_aside(path) if existed else None  # (a user's edit of it, say)
            try:
                _make(source, folder, base_url, timeout, say)
            except BaseException:  # (the download failed: the file goes back where it was)
                if kept is not None and not path.exists():
                    kept.rename(path)
                raise
            if kept is not None:
                say(f"kept the earlier {path.name} (another SHA-256) as {kept.name}")
            results.append(FetchResult(source, path, "replaced" if existed else "fetched"))
    finally:
        with contextlib.suppress(OSError):
            write_readme(folder)
    return results


def _keep_aside(path: Path) -> Path:
    """Move ``path`` to a free ``NAME.bak`` (``NAME.bak.1``, ...) beside it, so that the file a
    fetch replaces is not lost; returns the new path.

    Raises:
        FetchError: it cannot be moved.
    """
    kept, n = path.with_name(f"{path.name}.bak"), 0
    while kept.exists() or kept.is_symlink():
        n += 1
        kept = path.with_name(f"{path.name}.bak.{n}")
    try:
        path.rename(kept)
    except OSError as err:
        raise FetchError(
            f"cannot keep {path} aside as {kept.name} before replacing it "
            f"({_one_line(err.strerror or err)})"
        ) from None
    return kept


def status(folder: Path | None) -> list[FileStatus]:
    """Whether each file of :data:`SOURCES` is in ``folder`` with its pinned SHA-256.

    A missing folder, or ``None`` (no data folder at all), gives ``missing`` for every file.
    """
    out: list[FileStatus] = []
    for source in SOURCES:
        path = Path(source.file_name) if folder is None else folder / source.file_name
        state: FileState = "missing"
        if folder is not None and path.is_file():
            try:
                state = "verified" if sha256_file(path) == source.sha256 else "differs"
            except OSError:  # (no permission: not a file of other data)
                state = "unreadable"
        out.append(FileStatus(source, path, state))
    return out


def reference_mismatch(trace: str, path: Path) -> str | None:
    """A warning when ``path``, read as the catalog trace ``trace``, is not its reference copy
    (another SHA-256 than :data:`SOURCES` pins): legal (a user's own edit), but its results
    are not those kvsim documents. ``None`` when it is, or when ``trace`` has no pinned copy.

    Raises:
        OSError: the file cannot be read.
    """
    source = source_named(trace)
    if source is None:
        return None
    actual = cached_sha256_file(path)
    if actual == source.sha256:
        return None
    return (
        f"{path} is not the reference copy of trace {trace!r} (SHA-256 {actual[:12]}..., "
        f"the reference {source.sha256[:12]}...): its results are not those kvsim documents; "
        f"`kvsim data fetch --only {trace}` stores the reference copy"
    )


def readme_text(sources: Sequence[Source]) -> str:
    """The Markdown README that describes ``sources`` (see :func:`write_readme`)."""
    lines = [
        README_MARKER,
        "# kvsim trace data",
        "",
        "`kvsim data fetch` downloaded these files from the public repositories below, each at",
        "a pinned commit, and checked their SHA-256 before storing them. Files marked *converted*",
        "were computed from the download; their SHA-256 is of the result. Keep the licence terms",
        "and cite the work when you use a file.",
        "",
    ]
    how = {
        "copy": "unchanged",
        "pickle_pairs": "converted: the pickle's (input_len, output_len) pairs as CSV",
        "alpaca_tokens": "converted: Alpaca texts counted with GPT-2/OPT byte-level BPE "
        "(instruction + ' ' + input, output; each + 1 BOS)",
    }
    for source in sources:
        lines += [
            f"## {source.file_name}",
            "",
            f"- trace name: `{source.trace}`",
            f"- source: <{source.url}> ({how[source.kind]})",
        ]
        lines += [f"- also downloaded: <{u.url}>" for u in source.upstreams[1:]]
        lines += [
            f"- licence: {source.licence}",
            f"- cite: {source.citation}",
            f"- SHA-256: `{source.sha256}`",
            "",
        ]
    if not sources:
        lines += ["No file has been fetched yet.", ""]
    return "\n".join(lines)


def write_readme(folder: Path) -> Path | None:
    """Write or refresh ``folder/README.md`` listing the verified files of :data:`SOURCES`.

    A README that this module did not write (no marker line) is left alone.

    Returns:
        The README's path, or ``None`` when an unrelated README was kept.

    Raises:
        OSError: the folder is not writable.
    """
    path = folder / README_NAME
    if path.exists():
        try:
            first = path.read_text(encoding="utf-8").split("\n", 1)[0]
        except (OSError, UnicodeDecodeError):
            return None
        if first != README_MARKER:
            return None
    present = [s.source for s in status(folder) if s.state == "verified"]
    tmp = _temp_file(folder, README_NAME)
    try:
        tmp.write_text(readme_text(present), encoding="utf-8", newline="\n")
        tmp.chmod(0o644)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path
