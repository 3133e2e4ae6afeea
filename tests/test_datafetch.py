"""``kvsim data fetch`` / ``kvsim data list`` against a local HTTP mirror of the reference data.

A thread serves a temporary copy of ``shared/data/traces`` on 127.0.0.1, plus the ShareGPT pickle
rebuilt from the stored CSV (``pickle.dumps(rows, protocol=3)`` reproduces the upstream pickle's
bytes), and the CLI fetches through ``--mirror``. The expected checksums are parsed from the
reference README, independently of the source table in :mod:`kvsim.workload.fetch`.

Alpaca is the exception: its conversion needs ``alpaca_data.json`` (22.8 MB) and GPT-2's
``encoder.json`` / ``vocab.bpe``, which are not in the reference folder and cannot be downloaded
here. Its counting is tested on hand-made records with a tiny hand-built byte-level BPE, and the
byte-exact check runs only when ``KVSIM_ALPACA_ORIGINALS`` names a folder holding those three
files.
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import hashlib
import json
import os
import pickle
import re
import shutil
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from kvsim.cli import app
from kvsim.workload import fetch as datafetch
from kvsim.workload.catalog import ENV_VAR, TRACES

# the real trace files, served by a local mirror: KVSIM_DATA, else where kvsim looks by default
REFERENCE = Path(
    os.environ.get(ENV_VAR) or Path(__file__).resolve().parents[2] / "shared" / "data" / "traces"
)
if not (REFERENCE / "README.md").is_file():
    _missing = REFERENCE if not REFERENCE.is_dir() else REFERENCE / "README.md"
    pytest.skip(
        f"no trace files to serve: no {_missing} (set {ENV_VAR} to the folder `kvsim data "
        "fetch` fills)",
        allow_module_level=True,
    )

PICKLE_NAME = "sharegpt_opt_text_completion_length.pkl"
ALPACA_FILE = "alpaca_opt_lengths.csv"
ALPACA_ORIGINALS = ("alpaca_data.json", "encoder.json", "vocab.bpe")
runner = CliRunner()


def readme_checksums() -> dict[str, str]:
    """``{file name: sha256}`` from the reference README's checksum block."""
    text = (REFERENCE / "README.md").read_text(encoding="utf-8")
    block = text.split("## Checksums", 1)[1]
    found = {
        name: digest
        for digest, name in re.findall(r"^([0-9a-f]{64})  (\S+)$", block, flags=re.MULTILINE)
    }
    assert len(found) == 8, found
    return found


CHECKSUMS = readme_checksums()
# Everything but Alpaca can be served from the reference folder.
SERVED_TRACES = [s.trace for s in datafetch.SOURCES if s.file_name != ALPACA_FILE]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def sharegpt_pickle_bytes() -> bytes:
    """The vLLM artifact's pickle, rebuilt from the stored CSV (a list of (int, int) tuples)."""
    with (REFERENCE / "sharegpt_opt_firstturn_lengths.csv").open(newline="") as f:
        rows = list(csv.reader(f))[1:]
    return pickle.dumps([(int(a), int(b)) for a, b in rows], protocol=3)


class Mirror:
    """A folder served over HTTP on 127.0.0.1 that records the paths requested."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.requests: list[str] = []
        mirror = self

        class Handler(SimpleHTTPRequestHandler):
            def do_GET(self) -> None:
                mirror.requests.append(self.path)
                super().do_GET()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(
            ("127.0.0.1", 0), functools.partial(Handler, directory=str(folder))
        )
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


@pytest.fixture(scope="module")
def mirror(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mirror]:
    folder = tmp_path_factory.mktemp("mirror")
    for path in REFERENCE.iterdir():
        shutil.copyfile(path, folder / path.name)
    (folder / PICKLE_NAME).write_bytes(sharegpt_pickle_bytes())
    served = Mirror(folder)
    yield served
    served.close()


@pytest.fixture(autouse=True)
def _no_data_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)


def fetch_cli(*args: str) -> Any:
    return runner.invoke(app, ["data", "fetch", *args])


def only(traces: list[str]) -> list[str]:
    return [arg for t in traces for arg in ("--only", t)]


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".part"))


def test_table_matches_the_catalog() -> None:
    assert sorted(s.trace for s in datafetch.SOURCES) == sorted(TRACES)
    for source in datafetch.SOURCES:
        assert TRACES[source.trace].file_name == source.file_name
        assert source.sha256 == CHECKSUMS[source.file_name]
        assert source.url.startswith("https://")
        for upstream in source.upstreams:
            assert re.fullmatch(r"[0-9a-f]{64}", upstream.sha256)
            if upstream.url.startswith(datafetch.GITHUB_RAW):  # pinned to a 40-hex commit
                assert re.search(r"/[0-9a-f]{40}/", upstream.url), upstream.url


def test_fetch_verifies_skips_and_lists(mirror: Mirror, tmp_path: Path) -> None:
    dest = tmp_path / "data"
    result = fetch_cli("--dest", str(dest), "--mirror", mirror.url, *only(SERVED_TRACES))
    assert result.exit_code == 0, result.output
    produced = sorted(p.name for p in dest.iterdir() if p.name != "README.md")
    assert produced == sorted(n for n in CHECKSUMS if n != ALPACA_FILE)
    for name in produced:
        assert sha256(dest / name) == CHECKSUMS[name], name
    assert f"/{PICKLE_NAME}" in mirror.requests  # converted from the pickle, not copied
    assert "/sharegpt_opt_firstturn_lengths.csv" not in mirror.requests
    readme = (dest / "README.md").read_text(encoding="utf-8")
    for name in produced:
        assert name in readme
        assert CHECKSUMS[name] in readme
    assert ALPACA_FILE not in readme

    mirror.requests.clear()
    again = fetch_cli("--dest", str(dest), "--mirror", mirror.url, *only(SERVED_TRACES))
    assert again.exit_code == 0, again.output
    assert mirror.requests == []
    assert again.output.count("present") == len(produced)

    listed = runner.invoke(app, ["data", "list", "--dest", str(dest)])
    assert listed.exit_code == 0, listed.output
    for name in produced:
        line = next(ln for ln in listed.output.splitlines() if name in ln)
        assert line.startswith("verified"), line
    alpaca_line = next(ln for ln in listed.output.splitlines() if ALPACA_FILE in ln)
    assert alpaca_line.startswith("missing")


def test_destination_defaults_to_kvsim_data(
    mirror: Mirror, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "env-data"))
    result = fetch_cli("--mirror", mirror.url, "--only", "azure_code")
    assert result.exit_code == 0, result.output
    path = tmp_path / "env-data" / "azure_llm_2023_code.csv"
    assert sha256(path) == CHECKSUMS[path.name]


def test_mirror_may_be_a_local_folder(mirror: Mirror, tmp_path: Path) -> None:
    result = fetch_cli("--dest", str(tmp_path), "--mirror", str(mirror.folder), "--only", "arxiv")
    assert result.exit_code == 0, result.output
    name = "arxiv_summarization_llama2_lengths.csv"
    assert sha256(tmp_path / name) == CHECKSUMS[name]


def test_corrupted_download_is_refused(tmp_path: Path) -> None:
    served = tmp_path / "served"
    served.mkdir()
    name = "mooncake_synthetic.jsonl"
    data = bytearray((REFERENCE / name).read_bytes())
    data[1000] ^= 0x01
    (served / name).write_bytes(bytes(data))
    bad_hash = hashlib.sha256(bytes(data)).hexdigest()
    dest = tmp_path / "data"
    server = Mirror(served)
    try:
        result = fetch_cli("--dest", str(dest), "--mirror", server.url, "--only", name)
    finally:
        server.close()
    assert result.exit_code == 2
    assert "Traceback" not in result.output
    message = result.output.strip().splitlines()[-1]
    assert message.startswith("error:")
    assert name in message
    assert CHECKSUMS[name] in message
    assert bad_hash in message
    assert f"{server.url}/{name}" in message
    assert not (dest / name).exists()
    assert leftovers(dest) == []


def test_missing_file_on_the_mirror(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    server = Mirror(empty)
    try:
        result = fetch_cli("--dest", str(tmp_path / "d"), "--mirror", server.url, "--only", "arxiv")
    finally:
        server.close()
    assert result.exit_code == 2
    assert "HTTP 404" in result.output
    assert "arxiv_summarization_llama2_lengths.csv" in result.output
    assert leftovers(tmp_path / "d") == []


def test_unwritable_destination(tmp_path: Path, mirror: Mirror) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    result = fetch_cli("--dest", str(blocker / "sub"), "--mirror", mirror.url, "--only", "arxiv")
    assert result.exit_code == 2
    assert "cannot create the data folder" in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize("url", ["ftp://x", "s3://bucket/traces"])
def test_a_mirror_of_another_scheme_is_refused(url: str, tmp_path: Path) -> None:
    # (--help says an http(s):// or file:// URL or a folder; ftp:// was taken and tried)
    result = fetch_cli("--dest", str(tmp_path), "--mirror", url, "--only", "arxiv")
    assert result.exit_code == 2
    assert f"--mirror: expected an http(s):// or file:// URL or a local folder, got '{url}'" in (
        " ".join(result.output.split())
    )
    assert leftovers(tmp_path) == []


def test_an_empty_kvsim_data_is_said_to_be_empty(monkeypatch) -> None:
    from kvsim.workload.catalog import data_dir_searched

    monkeypatch.setenv("KVSIM_DATA", "")
    assert data_dir_searched().endswith("(KVSIM_DATA is set but empty)")
    monkeypatch.delenv("KVSIM_DATA")
    assert data_dir_searched().endswith("(KVSIM_DATA is not set)")


def test_a_system_folder_as_kvsim_data_is_named_a_data_folder(monkeypatch) -> None:
    # the advice was "give a results folder such as results/ or ./out"
    monkeypatch.setenv("KVSIM_DATA", "/proc/x")
    result = runner.invoke(app, ["data", "fetch"])
    assert result.exit_code == 2
    assert "'/proc/x' is a system folder; give a data folder" in " ".join(result.output.split())
    assert "results folder" not in result.output


def test_unknown_trace_name(tmp_path: Path) -> None:
    result = fetch_cli("--dest", str(tmp_path), "--only", "nope")
    assert result.exit_code == 2
    assert "unknown trace 'nope'" in result.output


class _Exploit:
    """Unpickling this runs ``os.system`` (when globals are resolved)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (os.system, (f"touch {self.marker}",))


def test_malicious_pickle_is_refused_without_running_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = tmp_path / "pwned"
    payload = pickle.dumps([(1, 2), _Exploit(marker)], protocol=3)
    served = tmp_path / "served"
    served.mkdir()
    (served / PICKLE_NAME).write_bytes(payload)
    # Pin the payload's hash so the download passes and the unpickler itself must refuse it.
    sharegpt = next(s for s in datafetch.SOURCES if s.trace == "sharegpt_opt")
    pinned = dataclasses.replace(
        sharegpt,
        upstreams=(
            dataclasses.replace(sharegpt.upstreams[0], sha256=hashlib.sha256(payload).hexdigest()),
        ),
    )
    table = tuple(pinned if s is sharegpt else s for s in datafetch.SOURCES)
    monkeypatch.setattr(datafetch, "SOURCES", table)
    dest = tmp_path / "data"
    server = Mirror(served)
    try:
        result = fetch_cli("--dest", str(dest), "--mirror", server.url, "--only", "sharegpt_opt")
    finally:
        server.close()
    assert result.exit_code == 2
    assert not marker.exists()
    message = result.output.strip().splitlines()[-1]
    assert PICKLE_NAME in message
    assert f"{server.url}/{PICKLE_NAME}" in message
    assert "posix.system" in message or "os.system" in message
    assert not (dest / sharegpt.file_name).exists()
    assert leftovers(dest) == []


def test_malicious_pickle_without_pinned_hash_fails_the_checksum(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    served = tmp_path / "served"
    served.mkdir()
    (served / PICKLE_NAME).write_bytes(pickle.dumps([_Exploit(marker)]))
    server = Mirror(served)
    try:
        result = fetch_cli(
            "--dest", str(tmp_path / "d"), "--mirror", server.url, "--only", "sharegpt_opt"
        )
    finally:
        server.close()
    assert result.exit_code == 2
    assert "SHA-256 mismatch" in result.output
    assert not marker.exists()


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        ({"a": (1, 2)}, "got a dict"),
        ([(1, 2), [3, 4]], "row 1"),
        ([(1, 2, 3)], "row 0"),
        ([(1, -2)], "row 0"),
        ([(True, 2)], "row 0"),
        ([(1.5, 2)], "row 0"),
    ],
)
def test_pickle_shape_is_validated(tmp_path: Path, data: object, fragment: str) -> None:
    path = tmp_path / "x.pkl"
    path.write_bytes(pickle.dumps(data))
    with pytest.raises(datafetch.BadPickleError, match=re.escape(fragment)) as info:
        datafetch.load_length_pairs(path)
    assert "x.pkl" in str(info.value)


def test_pickle_conversion_matches_the_stored_csv(tmp_path: Path) -> None:
    pkl = tmp_path / PICKLE_NAME
    pkl.write_bytes(sharegpt_pickle_bytes())
    out = tmp_path / "out.csv"
    datafetch.sharegpt_pickle_to_csv(pkl, out)
    assert sha256(out) == CHECKSUMS["sharegpt_opt_firstturn_lengths.csv"]


# --- Alpaca ------------------------------------------------------------------------------------


def tiny_bpe(folder: Path) -> tuple[Path, Path]:
    """A byte-level BPE: the 256 byte symbols plus merges he, ll, hell, hello, Ġw."""
    from tokenizers.pre_tokenizers import ByteLevel

    vocab = {ch: i for i, ch in enumerate(sorted(ByteLevel.alphabet()))}
    merges = [("h", "e"), ("l", "l"), ("he", "ll"), ("hell", "o"), ("Ġ", "w")]
    for left, right in merges:
        vocab[left + right] = len(vocab)
    encoder = folder / "encoder.json"
    encoder.write_text(json.dumps(vocab), encoding="utf-8")
    bpe = folder / "vocab.bpe"
    bpe.write_text("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges), encoding="utf-8")
    return encoder, bpe


def test_alpaca_counting_on_hand_made_records(tmp_path: Path) -> None:
    encoder, bpe = tiny_bpe(tmp_path)
    # Pre-tokens (GPT-2 regex, spaces as Ġ) -> merged tokens; each count gets + 1 for the BOS.
    records = [
        # "hello ": hello | Ġ -> 2 + 1; "hello world": hello | Ġw o r l d -> 6 + 1
        {"instruction": "hello", "input": "", "output": "hello world"},
        # "hi hello": h i | Ġ hello -> 4 + 1; "": 0 + 1
        {"instruction": "hi", "input": "hello", "output": ""},
    ]
    data = tmp_path / "alpaca_data.json"
    data.write_text(json.dumps(records, indent=4), encoding="utf-8")
    out = tmp_path / "out.csv"
    datafetch.alpaca_json_to_csv(data, encoder, bpe, out)
    assert out.read_bytes() == b"input_tokens,output_tokens\n3,7\n5,1\n"


def test_alpaca_bad_record_names_the_file(tmp_path: Path) -> None:
    encoder, bpe = tiny_bpe(tmp_path)
    data = tmp_path / "alpaca_data.json"
    data.write_text(json.dumps([{"instruction": "x", "input": 3, "output": ""}]))
    with pytest.raises(ValueError, match=r"alpaca_data\.json: record 0 field 'input'"):
        datafetch.alpaca_json_to_csv(data, encoder, bpe, tmp_path / "out.csv")


@pytest.mark.skipif(
    not os.environ.get("KVSIM_ALPACA_ORIGINALS"),
    reason="the byte-exact Alpaca check needs alpaca_data.json and GPT-2's encoder.json and "
    "vocab.bpe, which cannot be downloaded offline; set KVSIM_ALPACA_ORIGINALS to a folder "
    "holding them to run it",
)
def test_alpaca_is_byte_exact(tmp_path: Path) -> None:
    originals = Path(os.environ["KVSIM_ALPACA_ORIGINALS"])
    served = tmp_path / "served"
    served.mkdir()
    for name in ALPACA_ORIGINALS:
        os.symlink(originals / name, served / name)
    server = Mirror(served)
    try:
        result = fetch_cli(
            "--dest", str(tmp_path / "d"), "--mirror", server.url, "--only", "alpaca_opt"
        )
    finally:
        server.close()
    assert result.exit_code == 0, result.output
    assert sha256(tmp_path / "d" / ALPACA_FILE) == CHECKSUMS[ALPACA_FILE]


def test_without_dest_or_kvsim_data_fetch_fills_the_folder_kvsim_reads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import kvsim
    from kvsim.workload.fetch import destination

    monkeypatch.delenv("KVSIM_DATA", raising=False)
    # run from the clone: the folder beside it that kvsim reads without KVSIM_DATA (README)
    clone = Path(kvsim.__file__).resolve().parents[1]
    assert destination(None) == clone.parent / "shared" / "data" / "traces"


def test_a_file_with_another_checksum_is_kept_aside_not_lost(
    mirror: Mirror, tmp_path: Path
) -> None:
    """A user's edited trace (its first 3 lines) in the folder: fetched again, the verified file
    takes its place and the edit is kept as NAME.bak (then NAME.bak.1), and said so."""
    name = "arxiv_summarization_llama2_lengths.csv"
    edited = "".join((mirror.folder / name).read_text().splitlines(keepends=True)[:3])
    for n, kept in enumerate((f"{name}.bak", f"{name}.bak.1")):
        (tmp_path / name).write_text(edited + "#" * n)
        result = fetch_cli(
            "--dest", str(tmp_path), "--mirror", str(mirror.folder), "--only", "arxiv"
        )
        assert result.exit_code == 0, result.output
        assert sha256(tmp_path / name) == CHECKSUMS[name]
        assert (tmp_path / kept).read_text() == edited + "#" * n
        assert f"as {kept}" in result.output


def test_list_calls_a_file_it_cannot_read_unreadable_not_differing(
    mirror: Mirror, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A trace kvsim cannot read (no permission; simulated, as root reads anything) is not
    "differs", which pointed at a fetch that would replace it."""
    name = "arxiv_summarization_llama2_lengths.csv"
    shutil.copy(mirror.folder / name, tmp_path / name)

    def refuse(path: Path) -> str:
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(datafetch, "sha256_file", refuse)
    listed = runner.invoke(app, ["data", "list", "--dest", str(tmp_path)])
    assert listed.exit_code == 0, listed.output
    line = next(ln for ln in listed.output.splitlines() if name in ln)
    assert line.startswith("unreadable"), line
    assert "make the unreadable files readable" in listed.output
