"""BertConfig: the model hyper-parameters, exactly the keys of Google's bert_config.json."""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

from bert.errors import BertError, BertFileNotFoundError
from common.errors import UserError
from common.files import read_json, write_text

# Activation names accepted in bert_config.json / Hugging Face config.json. "gelu" is the exact
# erf form (Google's BERT); the tanh approximation goes by several names (NVIDIA uses it).
SUPPORTED_ACTIVATIONS = ("gelu", "gelu_new", "gelu_tanh", "gelu_pytorch_tanh", "relu")

# Keys a Hugging Face config.json may carry that describe nothing our model computes.
_HF_IGNORED_KEYS = frozenset(
    {
        "_name_or_path",
        "architectures",
        "model_type",
        "transformers_version",
        "pad_token_id",
        "gradient_checkpointing",
        "position_embedding_type",
        "use_cache",
        "classifier_dropout",
        "torch_dtype",
        "dtype",
        "id2label",
        "label2id",
        "bos_token_id",
        "eos_token_id",
        "tie_word_embeddings",
        "is_decoder",
        "add_cross_attention",
        "chunk_size_feed_forward",
        "output_attentions",
        "output_hidden_states",
        "return_dict",
        "problem_type",
    }
)


@dataclasses.dataclass(frozen=True)
class BertConfig:
    """Hyper-parameters of a BERT encoder; field names are the bert_config.json keys."""

    vocab_size: int
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    initializer_range: float = 0.02
    layer_norm_eps: float = 1e-12

    def __post_init__(self):
        problems = []
        for name in (
            "vocab_size",
            "hidden_size",
            "num_hidden_layers",
            "num_attention_heads",
            "intermediate_size",
            "max_position_embeddings",
            "type_vocab_size",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                problems.append(f"{name} must be a positive integer (got {value!r})")
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
                problems.append(f"{name} must be in [0, 1) (got {value!r})")
        for name in ("initializer_range", "layer_norm_eps"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or value <= 0:
                problems.append(f"{name} must be a positive number (got {value!r})")
        if self.hidden_act not in SUPPORTED_ACTIVATIONS:
            problems.append(
                f"hidden_act {self.hidden_act!r} is not one of {', '.join(SUPPORTED_ACTIVATIONS)}"
            )
        if not problems and self.hidden_size % self.num_attention_heads != 0:
            problems.append(
                f"hidden_size {self.hidden_size} is not divisible by "
                f"num_attention_heads {self.num_attention_heads}"
            )
        if problems:
            raise BertError("Invalid BERT config: " + "; ".join(problems) + ".")

    @property
    def head_size(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @classmethod
    def from_dict(cls, values: dict[str, Any], source: str = "config") -> "BertConfig":
        """Builds a config from bert_config.json keys; unknown keys are an error naming them."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise BertError(
                f"{source}: unknown BERT config key(s) {', '.join(unknown)}; "
                f"expected only {', '.join(sorted(known))}."
            )
        if "vocab_size" not in values:
            raise BertError(f"{source}: the required key vocab_size is missing.")
        try:
            return cls(**values)
        except ValueError as err:
            raise BertError(f"{source}: {err}") from None

    @classmethod
    def from_json_file(cls, path: str | os.PathLike) -> "BertConfig":
        """Reads a bert_config.json; BertFileNotFoundError or BertError naming the file."""
        return cls.from_dict(read_config_json(path), source=str(path))

    @classmethod
    def from_hf_dict(cls, values: dict[str, Any], source: str = "config.json") -> "BertConfig":
        """Builds a config from a Hugging Face BertModel config.json (its extra keys dropped)."""
        if values.get("model_type", "bert") != "bert":
            raise BertError(f"{source}: model_type is {values['model_type']!r}, not 'bert'.")
        if values.get("position_embedding_type", "absolute") != "absolute":
            raise BertError(f"{source}: only absolute position embeddings are supported.")
        kept = {k: v for k, v in values.items() if k not in _HF_IGNORED_KEYS}
        return cls.from_dict(kept, source=source)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json_string(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"

    def to_json_file(self, path: str | os.PathLike) -> None:
        write_text(os.fspath(path), self.to_json_string())

    def to_hf_dict(self) -> dict[str, Any]:
        """The Hugging Face config.json equivalent (BertModel)."""
        values = self.to_dict()
        values.update(
            architectures=["BertForPreTraining"],
            model_type="bert",
            pad_token_id=0,
            position_embedding_type="absolute",
        )
        return values


def as_bert_config(config: BertConfig | dict[str, Any]) -> BertConfig:
    """A BertConfig from a BertConfig or from its dict, the form a layer's get_config() stores,
    so that every layer's `from_config(layer.get_config())` rebuilds it."""
    return config if isinstance(config, BertConfig) else BertConfig.from_dict(config)


def read_config_file(path: str | os.PathLike) -> BertConfig:
    """The config in Google's bert_config.json or in a Hugging Face config.json (it has a
    model_type key), told apart by content so either may be passed under any name."""
    values = read_config_json(path)
    if "model_type" in values:
        return BertConfig.from_hf_dict(values, source=os.fspath(path))
    return BertConfig.from_dict(values, source=os.fspath(path))


def read_config_json(path: str | os.PathLike) -> dict[str, Any]:
    """The JSON object in a config file (Google's bert_config.json or Hugging Face's config.json).

    Raises BertFileNotFoundError or BertError naming the file.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise BertFileNotFoundError(f"BERT config file {path} does not exist.")
    try:
        values = read_json(path, what="BERT config file")
    except UserError as err:
        raise BertError(str(err)) from None
    if not isinstance(values, dict):
        raise BertError(f"{path} must hold a JSON object of config keys.")
    return values
