"""BertConfig: round trip, strict keys, consistency checks, shipped presets."""

import glob
import json
import os

import pytest

from bert.config import BertConfig, as_bert_config, read_config_file
from common.errors import UserError
from conftest import ROOT


def test_round_trip_through_json(tmp_path):
    config = BertConfig(
        vocab_size=1000,
        hidden_size=64,
        num_hidden_layers=3,
        num_attention_heads=4,
        intermediate_size=256,
        hidden_act="gelu_new",
        layer_norm_eps=1e-6,
    )
    path = tmp_path / "bert_config.json"
    config.to_json_file(path)
    assert BertConfig.from_json_file(path) == config
    assert json.loads(path.read_text())["intermediate_size"] == 256
    assert not list(tmp_path.glob("*.tmp*"))


def test_unknown_key_is_rejected_by_name(tmp_path):
    path = tmp_path / "bert_config.json"
    path.write_text(json.dumps({"vocab_size": 10, "hiden_size": 64}))
    with pytest.raises(ValueError, match=r"bert_config.json.*hiden_size"):
        BertConfig.from_json_file(path)


@pytest.mark.parametrize(
    "values, message",
    [
        ({"vocab_size": 10, "hidden_size": 100, "num_attention_heads": 12}, "not divisible"),
        ({"vocab_size": 0}, "vocab_size must be a positive integer"),
        ({"vocab_size": 10, "hidden_dropout_prob": 1.5}, "hidden_dropout_prob"),
        ({"vocab_size": 10, "hidden_act": "swish"}, "hidden_act 'swish'"),
        ({"hidden_size": 64}, "vocab_size is missing"),
    ],
)
def test_inconsistent_values_are_rejected(values, message):
    with pytest.raises(ValueError, match=message):
        BertConfig.from_dict(values)


def test_malformed_json_names_the_file(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text('{"vocab_size": 10,')
    with pytest.raises(ValueError, match="broken.json' is not valid JSON"):
        BertConfig.from_json_file(path)
    with pytest.raises(FileNotFoundError, match="absent.json"):
        BertConfig.from_json_file(tmp_path / "absent.json")


def test_shipped_presets_load_with_google_values():
    presets = {
        os.path.basename(p): BertConfig.from_json_file(p)
        for p in glob.glob(os.path.join(ROOT, "configs", "bert_*.json"))
    }
    assert {
        "bert_base.json",
        "bert_large.json",
        "bert_tiny.json",
        "bert_mini.json",
        "bert_small.json",
    } <= set(presets)
    base, large = presets["bert_base.json"], presets["bert_large.json"]
    assert (base.hidden_size, base.num_hidden_layers, base.num_attention_heads, base.intermediate_size) == (
        768,
        12,
        12,
        3072,
    )
    assert (
        large.hidden_size,
        large.num_hidden_layers,
        large.num_attention_heads,
        large.intermediate_size,
    ) == (1024, 24, 16, 4096)
    assert base.vocab_size == large.vocab_size == 30522 and base.hidden_act == "gelu"


def test_hugging_face_config_maps_onto_ours(minilm_dir):
    with open(os.path.join(minilm_dir, "config.json")) as f:
        config = BertConfig.from_hf_dict(json.load(f))
    assert (config.hidden_size, config.num_hidden_layers, config.vocab_size) == (384, 6, 30522)
    with pytest.raises(ValueError, match="only absolute position embeddings"):
        BertConfig.from_hf_dict({"vocab_size": 5, "position_embedding_type": "relative_key"})


def test_config_errors_are_user_errors(tmp_path):
    # Entry points print a UserError's one sentence; callers that catch ValueError still do.
    with pytest.raises(UserError, match="hiden_size"):
        BertConfig.from_dict({"vocab_size": 10, "hiden_size": 64}, source="bert_config.json")
    with pytest.raises(UserError, match="absent.json"):
        BertConfig.from_json_file(tmp_path / "absent.json")


def test_layer_configs_accept_the_dict_form():
    config = BertConfig(vocab_size=10, hidden_size=8, num_attention_heads=2)
    assert as_bert_config(config) is config
    assert as_bert_config(config.to_dict()) == config
    with pytest.raises(ValueError, match="unknown BERT config key"):
        as_bert_config({**config.to_dict(), "hidden": 3})


def test_read_config_file_tells_google_from_hugging_face(tmp_path, minilm_dir):
    hf = read_config_file(os.path.join(minilm_dir, "config.json"))
    assert (hf.hidden_size, hf.num_hidden_layers) == (384, 6)
    google = tmp_path / "anything.json"
    hf.to_json_file(google)
    assert read_config_file(google) == hf
