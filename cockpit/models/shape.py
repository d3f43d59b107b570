"""A model's shape, read without torch: from a shipped shape, a local config.json, or the hub.

Only `config.json` is read (a few KB), never the weights. Parameter counts follow the
architectures' real layouts (grouped-query attention, tied embeddings, attention bias,
query/key norms) and match the published models (the tests check the shipped shapes).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cockpit.fmt import quoted
from cockpit.models import shipped as shapes
from cockpit.paths import cache_root

# decoder-only transformers with a gated (SwiGLU/GeGLU) MLP: the families people LoRA-tune
GATED_DECODERS = {"llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text", "phi3", "olmo2"}
ATTENTION_BIAS = {"qwen2"}  # q, k and v carry a bias
QK_NORM = {"qwen3", "olmo2", "gemma3_text"}
HUB_TIMEOUT_S = 10.0
OFFLINE_FIX = (
    "Set HF_ENDPOINT to a mirror, give a local folder with config.json, or use a shipped shape "
    "(synthetic:<arch>)."
)
REQUIRED = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads")


class ShapeError(ValueError):
    """The shape cannot be read or is not one this model knows; the message says what to do."""


class HubUnavailable(ShapeError):
    """A hub id whose config.json could not be fetched because the hub did not answer (no network,
    DNS, a timeout, a server error, HF_HUB_OFFLINE): the id may well be right, only its shape is
    unknown here. A hub that answers 401/403/404 is no such case: that is a wrong or gated id."""

    def __init__(self, message: str, repo: str, cause: str) -> None:
        super().__init__(message)
        self.repo = repo
        self.cause = cause  # "could not fetch config.json from https://huggingface.co (...)"


@dataclass(frozen=True)
class ModelShape:
    name: str
    model_type: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    tie_embeddings: bool
    attention_bias: bool = False
    qk_norm: bool = False
    source: str = ""
    max_positions: int | None = None  # config.json's max_position_embeddings: the context it was built for

    # ---- parameter counts, per part
    @property
    def q_out(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_out(self) -> int:
        return self.num_kv_heads * self.head_dim

    def linear_shapes(self) -> dict[str, tuple[int, int]]:
        """(in, out) of each linear layer of one decoder block, by its usual module name."""
        h, i = self.hidden_size, self.intermediate_size
        return {
            "q_proj": (h, self.q_out),
            "k_proj": (h, self.kv_out),
            "v_proj": (h, self.kv_out),
            "o_proj": (self.q_out, h),
            "gate_proj": (h, i),
            "up_proj": (h, i),
            "down_proj": (i, h),
        }

    @property
    def layer_linear_params(self) -> int:
        return sum(a * b for a, b in self.linear_shapes().values())

    @property
    def layer_other_params(self) -> int:
        """Norms, biases: small, kept in 16 bits by bitsandbytes."""
        extra = 2 * self.hidden_size
        if self.attention_bias:
            extra += self.q_out + 2 * self.kv_out
        if self.qk_norm:
            extra += 2 * self.head_dim
        return extra

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def lm_head_params(self) -> int:
        return 0 if self.tie_embeddings else self.vocab_size * self.hidden_size

    @property
    def params(self) -> int:
        blocks = self.num_layers * (self.layer_linear_params + self.layer_other_params)
        return blocks + self.embedding_params + self.lm_head_params + self.hidden_size

    def lora_params(self, rank: int, targets: list[str] | str) -> int:
        """r * (in + out) per targeted linear, in every block."""
        shapes_ = self.linear_shapes()
        names = list(shapes_) if targets == "all-linear" else [t for t in targets if t in shapes_]
        return self.num_layers * sum(rank * (shapes_[n][0] + shapes_[n][1]) for n in names)

    def unknown_targets(self, targets: list[str] | str) -> list[str]:
        if targets == "all-linear":
            return []
        return [t for t in targets if t not in self.linear_shapes()]


def from_config_dict(config: object, name: str, source: str) -> ModelShape:
    if not isinstance(config, dict):  # a JSON file that is no model config: a list, a string, null
        raise ShapeError(f"{name}: config.json is not a JSON object of model settings")
    model_type = str(config.get("model_type", ""))
    if "text_config" in config and model_type not in GATED_DECODERS:
        return from_config_dict(config["text_config"], name, source)
    if model_type not in GATED_DECODERS:
        known = ", ".join(sorted(GATED_DECODERS))
        raise ShapeError(
            f"{name}: architecture {model_type or '(no model_type)'!r} is not modelled; known: {known}. "
            "Mixture-of-experts and encoder models are not covered yet."
        )
    missing = [k for k in REQUIRED if not isinstance(value := config.get(k), int) or value <= 0]
    if missing:
        raise ShapeError(
            f"{name}: config.json lacks {', '.join(missing)} (or they are not positive integers)"
        )
    heads = config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads") or heads
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    return ModelShape(
        name=name,
        model_type=model_type,
        vocab_size=config["vocab_size"],
        hidden_size=config["hidden_size"],
        intermediate_size=config["intermediate_size"],
        num_layers=config["num_hidden_layers"],
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        tie_embeddings=bool(config.get("tie_word_embeddings", model_type.startswith("gemma"))),
        attention_bias=bool(config.get("attention_bias", model_type in ATTENTION_BIAS)),
        qk_norm=model_type in QK_NORM,
        source=source,
        max_positions=_positive_int(config.get("max_position_embeddings")),
    )


def _positive_int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def load_shape(spec: str, revision: str = "main", timeout_s: float = HUB_TIMEOUT_S) -> ModelShape:
    """`synthetic:<arch>` or a shipped arch name, a local folder or config.json, or a hub id."""
    arch = shapes.synthetic_arch(spec) if shapes.is_synthetic(spec) else spec
    if arch in shapes.shape_names():
        shape = shapes.load_shape(arch)
        return from_config_dict(shape, spec, f"shipped shape ({shape.get('_source', arch)})")
    if shapes.is_synthetic(spec):
        raise ShapeError(
            f"unknown synthetic architecture {quoted(arch)}; shipped: {', '.join(shapes.shape_names())}"
        )
    path = Path(spec).expanduser()
    if _exists(path):
        file = path / "config.json" if path.is_dir() else path
        if not file.is_file():
            raise ShapeError(f"{quoted(spec)}: no config.json in this folder")
        try:
            config = json.loads(file.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise ShapeError(f"{file}: not valid JSON ({exc})") from None
        return from_config_dict(config, spec, f"local {file}")
    if spec.startswith(("/", ".", "~")) or spec.count("/") != 1:
        raise ShapeError(
            f"{quoted(spec)} is neither an existing path, a hub id (org/name) nor a shipped shape"
        )
    return from_config_dict(fetch_hub_config(spec, revision, timeout_s), spec, f"hub {spec}@{revision}")


def _exists(path: Path) -> bool:
    """Whether a path exists; a name the OS cannot take (too long, a NUL byte) does not."""
    try:
        return path.exists()
    except (OSError, ValueError):
        return False


def hub_endpoint() -> str:
    return os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")


def fetch_hub_config(repo: str, revision: str = "main", timeout_s: float = HUB_TIMEOUT_S) -> dict[str, Any]:
    """config.json only, through HF_ENDPOINT when set; cached, so it works offline afterwards."""
    cached = cache_root() / "configs" / repo.replace("/", "--") / revision / "config.json"
    if cached.is_file():
        try:
            kept: dict[str, Any] = json.loads(cached.read_text())
            return kept
        except (OSError, ValueError):
            pass  # a copy cut short (a disk that filled up): fetched again below
    import urllib.error  # here: urllib.request costs every start of the TUI ~10 ms of CPU
    import urllib.request

    url = f"{hub_endpoint()}/{repo}/resolve/{revision}/config.json"
    request = urllib.request.Request(url, headers={"User-Agent": "lora-cockpit"})
    token = os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    offline = os.environ.get("HF_HUB_OFFLINE") not in (None, "", "0")
    try:
        if offline:
            raise urllib.error.URLError("HF_HUB_OFFLINE is set")
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            body = response.read(1 << 20)
    except urllib.error.HTTPError as exc:
        answered = f"the hub at {hub_endpoint()} answered {exc.code} for config.json"
        if exc.code >= 500:  # the hub is down, not the id wrong
            raise HubUnavailable(f"{repo}: {answered}. {OFFLINE_FIX}", repo, answered) from None
        hint = " (gated or private: set HF_TOKEN)" if exc.code in (401, 403) else ""
        raise ShapeError(f"{repo}: {answered}{hint}") from None
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        cause = f"could not fetch config.json from {hub_endpoint()} ({getattr(exc, 'reason', exc)})"
        raise HubUnavailable(f"{repo}: {cause}. Offline? {OFFLINE_FIX}", repo, cause) from None
    try:
        config: dict[str, Any] = json.loads(body)
    except ValueError:
        raise ShapeError(f"{repo}: config.json from {hub_endpoint()} is not JSON") from None
    cached.parent.mkdir(parents=True, exist_ok=True)
    cached.write_text(json.dumps(config))
    return config
