"""Models from a Hugging Face ``config.json``: the sizes KV memory and step cost need.

``model = { hf_config = "path/config.json" }`` (a folder holding ``config.json`` also works, and
so does ``model = "path/config.json"``) fills :class:`~kvsim.config.hardware.ModelSpec`; other
keys of the table override what the file gives (``num_params``, ``dtype_bytes``, ``name``...).
The reading follows vLLM v0.20.0, ``vllm/transformers_utils/model_arch_config_convertor.py``:

- layers ``num_hidden_layers`` (``n_layer``, ``num_layers``, MPT's ``n_layers``); query heads
  ``num_attention_heads`` (``n_head``, ``n_heads``); KV heads ``num_key_value_heads``
  (``n_head_kv``, ``num_kv_heads``, ``multi_query_group_num``), else the query heads (plain
  multi-head attention); multi-query attention (``multi_query``) caches one KV head, MPT and
  DBRX read ``attn_config.kv_n_heads``;
- head dim ``head_dim`` when set, else ``hidden_size // num_attention_heads``;
- MLA (``kv_lora_rank`` set, DeepSeek-V2/V3): vLLM caches one latent of ``kv_lora_rank +
  qk_rope_head_dim`` values per token per layer, with no separate K and V, as one "head" that
  tensor parallelism does not split (``get_num_kv_heads`` returns 1); ``head_dim`` is then the
  query/key head dim ``qk_nope_head_dim + qk_rope_head_dim``;
- dtype ``torch_dtype`` (``dtype`` in newer files): 2 bytes for float16/bfloat16; float32 counts
  2 bytes, as vLLM's ``dtype="auto"`` casts FP32 checkpoints to 16 bits (``_resolve_auto_dtype``);
- context ``max_position_embeddings`` (``n_positions``, ``max_seq_len``), times a RoPE
  scaling's factor as vLLM 0.34 derives ``max_model_len`` (linear, dynamic; not the scalings
  whose file gives the scaled context: ``llama3``, ``longrope``, YaRN; not Gemma-3's);
- sliding-window and linear-attention layers (``layer_types``; else by ``model_type``:
  Gemma-2/3's patterns, Qwen2/3's ``max_window_layers``, a ``sliding_window`` on every layer)
  fill ``model.attention`` (``kvsim.config.layers.attention_from_hf``): vLLM v1's hybrid KV
  cache groups. A file without ``layer_types`` gets the list its transformers ``*Config``
  builds (:func:`_implied_layer_types`): Qwen3-Next's layer ``i`` is full attention when
  ``(i + 1) % full_attention_interval == 0`` (4 when absent), else linear attention
  (``Qwen3NextConfig``); gpt-oss's layer ``i`` slides when ``i`` is even (``GptOssConfig``);
- a file that marks Mamba layers otherwise (Jamba's ``attn_layer_period``, Nemotron-H's
  ``hybrid_override_pattern``, Zamba's ``layers_block_type``, or Mamba sizes alone) is refused,
  naming the layers it makes, unless the model table gives ``attention.num_state_layers``;
- the file is strict JSON in two more ways than ``json`` reads it: a key given twice in one
  object is refused (readers differ on which value they keep), and the flags kvsim reads
  (``use_sliding_window``, ``tie_word_embeddings``, ``attention_bias``) must be JSON ``true``
  or ``false`` (``"false"`` is not false);
- a multimodal file's ``text_config`` (Gemma-3, Llama-4) is read as the model, over the file's
  other fields (vLLM ``get_text_config``).

``num_params`` is the file's ``num_parameters`` when present, else counted from the architecture
(:func:`count_params`) for the Llama family (llama, mistral, mixtral, qwen2, qwen3 and their MoE
variants, deepseek_v2/v3, gemma2, gemma3_text); other architectures need ``num_params`` in the
model table.
"""

from __future__ import annotations

import functools
import json
import logging
import re
from pathlib import Path
from typing import Any

from kvsim.base.limits import MAX_MODEL_HEADS, MAX_MODEL_LAYERS, is_int_at_least
from kvsim.base.textfile import DuplicateKeyError, parse_json, read_text, unique_keys
from kvsim.base.units import MXFP4_BITS
from kvsim.config.hf_params import UNTIED_BY_DEFAULT, count_params, moe_fields
from kvsim.config.layers import attention_from_hf

_LAYERS_LIMIT = (MAX_MODEL_LAYERS, "the largest models have about a thousand")
_HEADS_LIMIT = (MAX_MODEL_HEADS, "the largest models have about a thousand")

logger = logging.getLogger(__name__)

_DTYPE_BYTES = {
    "float16": 2,
    "half": 2,
    "bfloat16": 2,
    "float32": 2,  # vLLM's auto dtype casts FP32 checkpoints to FP16/BF16
    "float": 2,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
}


# a JSON string (escapes kept) or a structural character, for _key_offsets
_JSON_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[{}\[\]:]', re.DOTALL)

GPT_OSS_WINDOW = 128  # transformers' GptOssConfig: sliding_window when the file gives none
# the flags kvsim reads from a config.json (each must be a JSON boolean)
_FLAGS = (
    "use_sliding_window",
    "tie_word_embeddings",
    "attention_bias",
    "multi_query",
    "new_decoder_architecture",
)
_FALCON_TYPES = ("falcon", "RefinedWeb", "RefinedWebModel")
_KV_HEAD_KEYS = ("num_key_value_heads", "n_head_kv", "num_kv_heads", "multi_query_group_num")
# RoPE scalings whose factor vLLM 0.34 does not apply to the context (the file's is scaled)
_UNSCALED_ROPE = ("su", "longrope", "llama3", "yarn", "deepseek_yarn", "deepseek_llama_scaling")


class _Config:
    """A parsed ``config.json`` that names the file and line of a bad field in its errors."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self.text = read_text(path)  # (a byte-order mark dropped, with a warning)
            data = parse_json(self.text, f"hf_config {path}", object_pairs_hook=unique_keys)
        except DuplicateKeyError as exc:
            raise ValueError(f"hf_config {path}{self._key_lines(exc.key)}: {exc}") from None
        except FileNotFoundError:
            raise ValueError(f"hf_config: no such file {str(path)!r}") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ValueError(f"hf_config {path}: invalid JSON ({exc})") from None
        except ValueError as exc:  # (read_text's: a folder, unreadable, not UTF-8)
            raise ValueError(f"hf_config {exc}") from None
        except OSError as exc:  # a loop of symbolic links, a folder, no permission
            raise ValueError(f"hf_config {path}: cannot read ({exc.strerror or exc})") from None
        if not isinstance(data, dict):
            raise ValueError(f"hf_config {path}: expected a JSON object, got {type(data).__name__}")
        text = data.get("text_config")
        # the keys the model's fields are read from inside text_config (where() finds them there)
        self._text_keys = frozenset(text) if isinstance(text, dict) else frozenset[str]()
        if text is not None and not isinstance(text, dict):
            raise ValueError(
                f"{self.where('text_config')}: text_config: expected a JSON object (the "
                f"language model's fields), got {_json_value(text)}"
            )
        if text is not None:
            # a multimodal file (Gemma-3, Llama-4): its language model's fields over the
            # file's own (torch_dtype where it has none), as transformers' get_text_config
            # returns the text_config itself when the file has one
            data = {**{k: v for k, v in data.items() if k != "text_config"}, **text}
        self.data: dict[str, Any] = data
        for key in _FLAGS:
            if key in data and not isinstance(data[key], bool):
                raise ValueError(
                    f"{self.where(key)}: {key}: expected true or false (a JSON boolean, "
                    f"without quotes), got {_json_value(data[key])}"
                )

    def _key_lines(self, key: str) -> str:
        """`` lines 3 and 9`` (`` line 3`` when both are on one line) where the text names
        ``key`` as a key exactly twice, else ``""`` (the same key in other objects, or written
        with escapes, leaves the lines unsure)."""
        pattern = re.escape(json.dumps(key, ensure_ascii=False)) + r"\s*:"
        starts = [m.start() for m in re.finditer(pattern, self.text)]
        if len(starts) != 2:
            return ""
        first, second = (self.text.count("\n", 0, at) + 1 for at in starts)
        return f" line {first}" if first == second else f" lines {first} and {second}"

    def where(self, key: str) -> str:
        """``config.json line 7``: the line where the model's ``key`` is set, inside
        ``text_config`` when that sets it, else at the top level (the file alone when neither
        does: a default, or a key set only in another nested object)."""
        path = ("text_config", key) if key in self._text_keys else (key,)
        at = self._offsets.get(path)
        line = "" if at is None else f" line {self.text.count(chr(10), 0, at) + 1}"
        return f"{self.path.name}{line}"

    @functools.cached_property
    def _offsets(self) -> dict[tuple[str, ...], int]:
        return _key_offsets(self.text)

    def get(self, *keys: str) -> tuple[str, Any] | None:
        """The first of ``keys`` present with a non-null value, as ``(key, value)``."""
        for key in keys:
            if self.data.get(key) is not None:
                return key, self.data[key]
        return None

    def int_field(
        self,
        *keys: str,
        minimum: int = 1,
        default: int | None = None,
        maximum: tuple[int, str] | None = None,
    ) -> int:
        """The first of ``keys`` as an integer >= ``minimum`` (``default`` when none is set) and,
        with ``maximum = (bound, why)``, <= ``bound``: checked before anything is computed from
        it (``count_params`` walks the layers one by one)."""
        found = self.get(*keys)
        if found is None:
            if default is not None:
                return default
            raise ValueError(
                f"hf_config {self.path}: missing field {keys[0]!r}"
                + (f" (or {', '.join(map(repr, keys[1:]))})" if len(keys) > 1 else "")
            )
        key, value = found
        if not is_int_at_least(value, minimum):
            expected = f"an integer >= {minimum}"
            if maximum is not None:
                expected = f"an integer from {minimum} to {maximum[0]:,} ({maximum[1]})"
            raise ValueError(f"{self.where(key)}: {key} must be {expected}, got {value!r}")
        if maximum is not None and value > maximum[0]:
            raise ValueError(
                f"{self.where(key)}: {key} must be at most {maximum[0]:,} ({maximum[1]}), "
                f"got {value:,}"
            )
        return value


def _key_offsets(text: str) -> dict[tuple[str, ...], int]:
    """Where valid JSON ``text`` names each object key (its first character), by the path of
    keys down to it: ``("text_config", "head_dim")`` for ``{"text_config": {"head_dim": 1}}``.
    Keys of objects inside arrays are left out (no key path reaches them)."""
    offsets: dict[tuple[str, ...], int] = {}
    stack: list[tuple[str, ...] | None] = []  # each open container's path (None: in an array)
    key, previous = "", None
    for token in _JSON_TOKEN.finditer(text):
        char = token.group()
        if char[0] == '"':
            previous = token
        elif char == ":" and previous is not None:  # (a key is the string just before ":")
            key = json.loads(previous.group())
            if stack and stack[-1] is not None:
                offsets.setdefault((*stack[-1], key), previous.start())
        elif char == "{" and not stack:
            stack.append(())  # the file's own object
        elif char == "{":  # (in an object, a nested one follows its key's ":")
            stack.append(None if stack[-1] is None else (*stack[-1], key))
        elif char == "[":
            stack.append(None)
        elif stack:
            stack.pop()
    return offsets


def hf_config_path(value: str | Path) -> Path:
    """The ``config.json`` a ``hf_config`` value names (a file, or a folder holding one)."""
    path = Path(value).expanduser()
    return path / "config.json" if path.is_dir() else path


def model_fields_from_hf(
    value: str | Path, num_params: Any = None, attention_table: Any = None
) -> dict[str, Any]:
    """``ModelSpec`` fields read from a Hugging Face ``config.json`` (rules: module docstring).

    Args:
        value: the file, or a folder that holds ``config.json``.
        num_params: the model table's own ``num_params``, when set: the file's parameters are
            then neither read nor counted (an architecture ``count_params`` does not know).
        attention_table: the model table's own ``attention``, when set: the sliding-window
            note names the window and layers it leaves (it overrides the file's key by key).

    Returns:
        ``name``, ``num_layers``, ``num_attention_heads``, ``num_kv_heads``, ``head_dim``,
        ``num_params``, ``dtype_bytes``, ``max_position_embeddings`` and, for MLA models,
        ``kv_lora_rank`` and ``qk_rope_head_dim``.

    Raises:
        ValueError: a missing or malformed field, naming the file, its line and the value.
    """
    cfg = _Config(hf_config_path(value))
    heads = cfg.int_field("num_attention_heads", "n_head", "n_heads", maximum=_HEADS_LIMIT)
    fields: dict[str, Any] = {
        "name": _model_name(cfg),
        "num_layers": cfg.int_field(
            "num_hidden_layers", "n_layer", "num_layers", "n_layers", maximum=_LAYERS_LIMIT
        ),
        "num_attention_heads": heads,
        "dtype_bytes": _dtype_bytes(cfg),
        "max_position_embeddings": _context_tokens(cfg),
    }
    if cfg.get("kv_lora_rank") is not None:  # (MLA: both parts of its key head are needed)
        for key in ("qk_rope_head_dim", "qk_nope_head_dim"):
            if cfg.get(key) is None:
                raise ValueError(
                    f"{cfg.where('kv_lora_rank')}: an MLA model (kv_lora_rank set) needs "
                    f"{key}, which the file lacks (its key head is qk_nope_head_dim + "
                    "qk_rope_head_dim; its cached latent kv_lora_rank + qk_rope_head_dim)"
                )
        rope = cfg.int_field("qk_rope_head_dim", minimum=0)
        fields["kv_lora_rank"] = cfg.int_field("kv_lora_rank")
        fields["qk_rope_head_dim"] = rope
        fields["num_kv_heads"] = 1
        fields["head_dim"] = cfg.int_field("qk_nope_head_dim", minimum=0) + rope
    else:
        fields["num_kv_heads"] = _num_kv_heads(cfg, heads)
        fields["head_dim"] = _head_dim(cfg, heads)
    found = cfg.get("num_parameters", "num_params")
    if num_params is not None:  # (the table's; ModelSpec checks it)
        fields["num_params"] = num_params
    elif found is not None:
        fields["num_params"] = cfg.int_field(found[0])
    else:
        fields["num_params"] = count_params(cfg.data, cfg.path, cfg.where)
    work = _work_fields(cfg)
    if _mxfp4(cfg) and "moe" in work:  # (vLLM keeps the experts in MXFP4 on the GPU)
        work["moe"] = {**work["moe"], "expert_weight_bits": MXFP4_BITS}
    counted = fields["num_params"]  # (a table's value of a wrong type: ModelSpec refuses it)
    numeric = isinstance(counted, (int, float)) and not isinstance(counted, bool)
    if not numeric or _split_params(work) <= counted:
        fields.update(work)
    else:
        logger.warning(
            "%s: num_params %s is smaller than the embedding, LM head and experts the file "
            "describes; the step cost charges every parameter to every token",
            cfg.path,
            fields["num_params"],
        )
    if cfg.data.get("model_type") == "gpt_oss" and "sliding_window" not in cfg.data:
        cfg.data = {**cfg.data, "sliding_window": GPT_OSS_WINDOW}  # GptOssConfig's default
    data = cfg.data
    _refuse_unread_state_layers(cfg, fields["num_layers"], attention_table)
    implied = _implied_layer_types(cfg, fields["num_layers"])
    if implied is not None:
        data = {**data, "layer_types": implied}
    attention = attention_from_hf(data, fields["num_layers"], fields["dtype_bytes"], cfg.where)
    if attention:
        fields["attention"] = attention
        given = attention_table if isinstance(attention_table, dict) else {}
        _note_sliding_window(cfg, attention, given)
    return fields


def _refuse_unread_state_layers(cfg: _Config, num_layers: int, attention_table: Any) -> None:
    """Refuse a file whose Mamba (state) layers are marked by a key kvsim does not read, unless
    the model table describes them (``attention.num_state_layers``): read as full attention,
    each would hold KV a token where vLLM keeps one state a request. The keys are transformers':
    Jamba's layer ``i`` attends when ``i % attn_layer_period == attn_layer_offset``
    (``JambaConfig``), else it is Mamba; Nemotron-H's ``hybrid_override_pattern`` has a
    character a layer, ``*`` attention and ``M`` Mamba (the others, MLP and MoE, hold neither
    KV nor state: ``NemotronHConfig``); Zamba's ``layers_block_type`` lists them; any other
    file with Mamba sizes (``mamba_*``, ``ssm_*``: Falcon-H1, whose layers each run attention
    and Mamba side by side) is refused too.

    Raises:
        ValueError: such a file without the table's state layers, naming the key, its place,
            the layers it makes and the model table that would describe them.
    """
    if cfg.data.get("layer_types") is not None:
        return
    if isinstance(attention_table, dict) and "num_state_layers" in attention_table:
        return
    layers = num_layers
    if cfg.data.get("hybrid_override_pattern") is not None:
        key, pattern = "hybrid_override_pattern", str(cfg.data["hybrid_override_pattern"])
        attending, mamba = pattern.count("*"), pattern.count("M")
        layers = attending + mamba
        counts = (
            f"{attending} attention ('*'), {mamba} Mamba ('M') and {len(pattern) - layers} "
            "layers holding neither KV nor state"
        )
    elif cfg.data.get("attn_layer_period") is not None:
        key = "attn_layer_period"
        period = cfg.int_field(key, maximum=_LAYERS_LIMIT)
        offset = cfg.int_field("attn_layer_offset", minimum=0, default=0)
        attending = sum(1 for i in range(num_layers) if i % period == offset)
        mamba = num_layers - attending
        counts = (
            f"{attending} attention and {mamba} Mamba layers of {num_layers} (layer i attends "
            f"when i % {period} == {offset})"
        )
    elif cfg.data.get("layers_block_type") is not None:
        key = "layers_block_type"
        kinds = [str(kind) for kind in cfg.data[key]] if isinstance(cfg.data[key], list) else []
        mamba = sum(1 for kind in kinds if kind == "mamba")
        counts = f"{mamba} Mamba layers of {len(kinds)}"
    else:  # (Mamba sizes with no layer pattern kvsim reads: Falcon-H1 runs both in each layer)
        keys = sorted(k for k in cfg.data if k.startswith(("mamba_", "ssm_")))
        if not keys:
            return
        raise ValueError(
            f"{cfg.where(keys[0])}: a {cfg.data.get('model_type', 'hybrid')} model with Mamba "
            f"state ({keys[0]}) and no layer pattern kvsim reads: it reads Mamba/linear-attention "
            "layers from layer_types only (Qwen3-Next's linear_attention), and would count none "
            "of their state; where the Mamba layers are layers of their own, describe them in "
            "the model table: attention = { num_state_layers = <Mamba layers>, "
            "state_bytes_per_layer = <one layer's Mamba state, bytes> }"
        )
    raise ValueError(
        f"{cfg.where(key)}: a {cfg.data.get('model_type', 'hybrid')} model whose {key} makes "
        f"{counts}: kvsim reads Mamba/linear-attention layers from layer_types only "
        "(Qwen3-Next's linear_attention), and would count them as full attention; describe "
        f"them in the model table: num_layers = {layers}, attention = {{ num_state_layers = "
        f"{mamba}, state_bytes_per_layer = <one layer's Mamba state, bytes> }}"
    )


def _implied_layer_types(cfg: _Config, num_layers: int) -> list[str] | None:
    """The ``layer_types`` transformers' config class builds for a file without them (``None``
    where the file has them, or its model type builds none; ``attention_from_hf`` then reads the
    file's own fields).

    - ``qwen3_next`` (``Qwen3NextConfig``): layer ``i`` is ``"full_attention"`` when ``(i + 1) %
      full_attention_interval == 0`` (4 when absent), else ``"linear_attention"``;
    - ``gpt_oss`` with a ``sliding_window`` (``GptOssConfig``): layer ``i`` is
      ``"sliding_attention"`` when ``i`` is even, else ``"full_attention"``.

    Raises:
        ValueError: a ``full_attention_interval`` that is not an integer from 1 to
            ``num_hidden_layers`` (a larger one leaves no full-attention layer).
    """
    if cfg.data.get("layer_types") is not None:
        return None
    model_type = cfg.data.get("model_type")
    if model_type == "qwen3_next":
        interval = cfg.int_field("full_attention_interval", default=4, maximum=_LAYERS_LIMIT)
        if interval > num_layers:  # (ModelSpec refuses a model of state layers only)
            raise ValueError(
                f"{cfg.where('full_attention_interval')}: full_attention_interval {interval} > "
                f"num_hidden_layers {num_layers} leaves no full-attention layer (layer i is full "
                "when (i + 1) % full_attention_interval == 0); expected at most num_hidden_layers"
            )
        full = {i for i in range(num_layers) if (i + 1) % interval == 0}
        return ["full_attention" if i in full else "linear_attention" for i in range(num_layers)]
    if model_type == "gpt_oss" and cfg.data.get("sliding_window") is not None:
        return ["full_attention" if i % 2 else "sliding_attention" for i in range(num_layers)]
    return None


def _json_value(value: Any) -> str:
    """``value`` as the file writes it (``"false"``, ``null``, ``1``)."""
    try:
        return json.dumps(value)
    except (TypeError, ValueError):  # (NaN read as a marker: its repr is its JSON)
        return repr(value)


def _split_params(work: dict[str, Any]) -> int:
    """Parameters of the embedding, LM head and routed experts ``_work_fields`` describes."""
    head = int(work.get("vocab_size") or 0) * int(work.get("embedding_dim") or 0)
    embedding = 0 if work.get("tie_word_embeddings") else head
    moe: dict[str, int] = work.get("moe") or {}
    experts = moe.get("num_experts", 0) * moe.get("num_moe_layers", 0)
    return head + embedding + experts * moe.get("params_per_expert", 0)


def _work_fields(cfg: _Config) -> dict[str, Any]:
    """The fields the step cost splits the parameters by: ``vocab_size``, ``embedding_dim``
    (``hidden_size``), ``tie_word_embeddings`` and, for a MoE model, ``moe`` (each only when the
    file has what it needs)."""
    out: dict[str, Any] = {}
    if cfg.get("vocab_size") is not None:
        out["vocab_size"] = cfg.int_field("vocab_size")
    if cfg.get("hidden_size", "n_embd", "d_model") is not None:
        out["embedding_dim"] = cfg.int_field("hidden_size", "n_embd", "d_model")
    model_type = str(cfg.data.get("model_type", ""))
    tied = cfg.data.get("tie_word_embeddings", model_type not in UNTIED_BY_DEFAULT)
    out["tie_word_embeddings"] = bool(tied)
    moe = moe_fields(cfg.data, cfg.path, cfg.where)
    if moe is not None:
        out["moe"] = moe
    return out


def check_file_heads(value: str | Path, fields: dict[str, Any], table: dict[str, Any]) -> None:
    """Refuse KV heads from the file that do not divide the query heads, naming the file's
    field (``num_key_value_heads``; the model table's own ``num_kv_heads`` or
    ``num_attention_heads``, when set, is the model spec's to check).

    Args:
        value: the ``hf_config`` the fields were read from.
        fields: ``model_fields_from_hf(value)``.
        table: the model table's other keys (they override the file).

    Raises:
        ValueError: ``num_attention_heads % num_kv_heads != 0`` with both from the file.
    """
    if "num_kv_heads" in table or "num_attention_heads" in table:
        return
    heads, kv_heads = fields["num_attention_heads"], fields["num_kv_heads"]
    if heads % kv_heads == 0:
        return
    cfg = _Config(hf_config_path(value))
    # (multi-query's 1 always divides: the count is a key's, or MPT's and DBRX's attn_config's)
    key = next((k for k in _KV_HEAD_KEYS if cfg.get(k) is not None), "attn_config")
    named = "attn_config.kv_n_heads" if key == "attn_config" else key
    raise ValueError(
        f"{cfg.where(key)}: {named} = {kv_heads} must divide num_attention_heads = {heads} (each "
        "KV head serves a whole group of query heads)"
    )


def _model_name(cfg: _Config) -> str:
    found = cfg.get("_name_or_path")
    if found is not None and str(found[1]).strip():
        return Path(str(found[1])).name
    return cfg.path.resolve().parent.name or str(cfg.data.get("model_type", "hf-model"))


def _num_kv_heads(cfg: _Config, heads: int) -> int:
    """The KV heads vLLM caches: 1 for multi-query attention (``multi_query``: GPT-BigCode,
    Falcon-7B/40B, unless Falcon's ``new_decoder_architecture``, which reads ``n_head_kv``;
    ``vllm/transformers_utils/model_arch_config_convertor.py``, ``FalconModelArchConfig
    Convertor``, and the GPT-BigCode model's own ``num_kv_heads``), MPT's and DBRX's
    ``attn_config.kv_n_heads``, else the first of ``_KV_HEAD_KEYS``, else ``heads``.

    Raises:
        ValueError: a KV-head count that is not an integer from 1 to the heads' limit."""
    data = cfg.data
    new_falcon = data.get("model_type") in _FALCON_TYPES and data.get("new_decoder_architecture")
    if data.get("multi_query") and not new_falcon:
        return 1
    attn = data.get("attn_config")
    if data.get("model_type") in ("mpt", "dbrx") and isinstance(attn, dict):
        kv = attn.get("kv_n_heads")
        if kv is not None:
            if not is_int_at_least(kv, 1) or kv > heads:
                raise ValueError(
                    f"{cfg.where('attn_config')}: attn_config.kv_n_heads must be an integer "
                    f"from 1 to the {heads} attention heads, got {_json_value(kv)}"
                )
            return int(kv)
    return cfg.int_field(*_KV_HEAD_KEYS, default=heads, maximum=_HEADS_LIMIT)


def _context_tokens(cfg: _Config) -> int:
    """vLLM 0.34.0's derived ``max_model_len`` (``vllm/config/model.py``,
    ``_get_and_verify_max_len``): ``max_position_embeddings`` (``n_positions``,
    ``max_seq_len``) times the factor of a RoPE scaling (``rope_parameters``, or the legacy
    ``rope_scaling``; one table a layer type where nested, the last factor given winning;
    null is 1), except a scaling whose file gives the scaled context already (``su``,
    ``longrope``, ``llama3`` and the YaRN variants ``yarn``, ``deepseek_yarn``,
    ``deepseek_llama_scaling``) and Gemma-3's (its 128K context is scaled already). vLLM's
    default for a LongRoPE model, its ``original_max_position_embeddings``, is not modelled:
    the context is the derived one.

    Raises:
        ValueError: a RoPE table that is not an object, or a factor that is not a positive
            number, naming the file and its line."""
    trained = cfg.int_field("max_position_embeddings", "n_positions", "max_seq_len", minimum=2)
    key = next((k for k in ("rope_parameters", "rope_scaling") if cfg.data.get(k)), None)
    if key is None or "gemma3" in str(cfg.data.get("model_type", "")):
        return trained
    rope, where = cfg.data[key], cfg.where(key)
    if not isinstance(rope, dict):
        raise ValueError(f"{where}: {key}: expected an object, got {_json_value(rope)}")
    nested = rope and all(isinstance(v, dict) for v in rope.values())
    tables = [v for v in rope.values() if v] if nested else [rope]
    factor: Any = 1.0
    for table in tables:
        kind = table.get("rope_type", table.get("type", "default"))
        if kind not in _UNSCALED_ROPE:
            factor = table.get("factor", factor)
    if factor is None:
        factor = 1.0
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not factor > 0:
        raise ValueError(f"{where}: {key} factor must be a positive number, got {factor!r}")
    return int(trained * factor)


def _head_dim(cfg: _Config, heads: int) -> int:
    if cfg.get("head_dim") is not None:
        return cfg.int_field("head_dim")
    hidden = cfg.int_field("hidden_size", "n_embd", "d_model")
    if hidden % heads:
        raise ValueError(
            f"{cfg.where('hidden_size')}: hidden_size {hidden} is not a multiple of "
            f"num_attention_heads {heads}; give head_dim in the file or model.head_dim"
        )
    return hidden // heads


def _dtype_bytes(cfg: _Config) -> int:
    found = cfg.get("torch_dtype", "dtype")
    if found is None:
        logger.warning("%s: no torch_dtype; KV and weights counted at 2 bytes (float16)", cfg.path)
        return 2
    key, value = found
    name = str(value).removeprefix("torch.")
    if name not in _DTYPE_BYTES:
        raise ValueError(
            f"{cfg.where(key)}: {key} must be one of {sorted(_DTYPE_BYTES)}, got {value!r}"
        )
    if name in ("float32", "float"):
        logger.warning(
            "%s: torch_dtype %s counted at 2 bytes: vLLM's dtype='auto' casts FP32 checkpoints "
            "to 16 bits (set model.dtype_bytes = 4 to keep FP32)",
            cfg.path,
            name,
        )
    if cfg.get("quantization_config") is not None and not (_mxfp4(cfg) and _has_experts(cfg)):
        logger.warning(
            "%s: quantization_config is not modelled; weights and KV are counted at %s's %d "
            "bytes per element",
            cfg.path,
            name,
            _DTYPE_BYTES[name],
        )
    return _DTYPE_BYTES[name]


def _has_experts(cfg: _Config) -> bool:
    """Whether the file describes routed experts (``moe_fields``' keys)."""
    return any(cfg.data.get(k) for k in ("n_routed_experts", "num_local_experts", "num_experts"))


def _mxfp4(cfg: _Config) -> bool:
    """Whether the file's ``quantization_config`` is gpt-oss's MXFP4 of the routed experts
    (``quant_method = "mxfp4"``), which ``MoeSpec.expert_weight_bits`` models."""
    quant = cfg.data.get("quantization_config")
    return isinstance(quant, dict) and quant.get("quant_method") == "mxfp4"


def _note_sliding_window(cfg: _Config, read: dict[str, Any], given: dict[str, Any]) -> None:
    """Warn that the file's model slides a window, with the window and layers kvsim uses:
    ``read`` (the file's attention fields) under the model table's ``given`` ones."""
    used = {**read, **given}
    if not used.get("sliding_window_tokens") or not used.get("num_sliding_layers"):
        return
    window = f"sliding_window = {used['sliding_window_tokens']} tokens"
    if used["sliding_window_tokens"] != read.get("sliding_window_tokens"):
        window = (
            f"model.attention.sliding_window_tokens = {used['sliding_window_tokens']} "
            f"(the file's sliding_window is {read.get('sliding_window_tokens')})"
        )
    if used.get("hybrid_kv_cache") is False:  # (the table turned the groups off: say that)
        logger.warning(
            "%s: %s on %d of the layers, run as full attention (every token's KV kept) by "
            "model.attention.hybrid_kv_cache = false, as vLLM's --disable-hybrid-kv-cache-manager",
            cfg.path,
            window,
            used["num_sliding_layers"],
        )
        return
    logger.warning(
        "%s: %s on %d of the layers: vLLM v1's hybrid KV cache groups "
        "free the blocks that slide out of the window (paged, vllm-v1; elsewhere kvsim keeps "
        "every token's KV; model.attention.hybrid_kv_cache = false as vLLM's "
        "--disable-hybrid-kv-cache-manager)",
        cfg.path,
        window,
        used["num_sliding_layers"],
    )
