"""BertEmbeddings: the config round trip."""

import pytest

from bert.embeddings import BertEmbeddings
from conftest import random_batch
from layer_contract import assert_config_round_trip


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
def test_config_round_trip(tiny_config, policy):
    batch = random_batch(tiny_config)
    layer = BertEmbeddings(tiny_config, name="embeddings", dtype=policy)
    copy = assert_config_round_trip(layer, batch["input_ids"], batch["segment_ids"])
    assert copy.config == tiny_config
    assert copy.word_embeddings.shape == (tiny_config.vocab_size, tiny_config.hidden_size)
