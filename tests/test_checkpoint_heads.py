"""bert/checkpoints.py with fine-tuning heads: save_huggingface keeps the classifier head,
load_for_fine_tuning reads it back, and reads checkpoints that transformers fine-tuned
(BertForSequenceClassification, BertForQuestionAnswering) with their heads."""

import numpy as np
import pytest

from bert.checkpoints import load_for_fine_tuning, model_variables, save_huggingface
from bert.finetuning import BertClassifier, BertSpanModel
from finetuning_runs import D
from tiny_pretraining import CONFIG


def test_save_huggingface_keeps_the_classifier_head_and_load_for_fine_tuning_reads_it(tmp_path, tiny_config):
    import keras
    from safetensors.numpy import load_file, save_file

    keras.utils.set_random_seed(1)
    source = BertClassifier(tiny_config, 3)
    source.classifier.output_bias.assign([0.5, -0.25, 1.0])  # not the zeros a fresh head has
    save_huggingface(source, str(tmp_path / "hf"))
    tensors = load_file(str(tmp_path / "hf" / "model.safetensors"))
    assert tensors["classifier.weight"].shape == (3, D) and tensors["classifier.bias"].shape == (3,)
    np.testing.assert_array_equal(tensors["classifier.bias"], [0.5, -0.25, 1.0])
    assert "embeddings.word_embeddings.weight" in tensors and "pooler.dense.weight" in tensors
    # BertForSequenceClassification's own layout: the encoder under "bert.", the head not.
    prefixed = tmp_path / "prefixed"
    prefixed.mkdir()
    save_file(
        {(k if k.startswith("classifier.") else "bert." + k): v for k, v in tensors.items()},
        str(prefixed / "model.safetensors"),
    )

    want = {n: v.numpy() for n, v in model_variables(source).items()}
    assert "output_weights" in want and "bert/pooler/dense/kernel" in want
    for checkpoint in (tmp_path / "hf", prefixed):
        keras.utils.set_random_seed(2)
        target = BertClassifier(tiny_config, 3)
        assert load_for_fine_tuning(target, str(checkpoint)) is True
        got = model_variables(target)
        assert set(got) == set(want)
        for name in want:
            np.testing.assert_array_equal(got[name].numpy(), want[name], err_msg=f"{checkpoint}: {name}")


@pytest.mark.parametrize("head", ["classifier", "span"])
def test_transformers_fine_tuned_checkpoint_loads_with_its_head(tmp_path, head):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from bert.checkpoints import read_config_beside

    torch.manual_seed(0)
    hf_config = transformers.BertConfig(**CONFIG, num_labels=3 if head == "classifier" else 2)
    if head == "classifier":
        reference = transformers.BertForSequenceClassification(hf_config)
    else:
        reference = transformers.BertForQuestionAnswering(hf_config)
    with torch.no_grad():  # a head that is not at its initial values
        for parameter in reference.parameters():
            parameter.add_(0.01 * torch.randn_like(parameter))
    reference.eval().save_pretrained(str(tmp_path / "hf"), safe_serialization=True)

    config = read_config_beside(str(tmp_path / "hf"))
    model = BertClassifier(config, 3) if head == "classifier" else BertSpanModel(config)
    assert load_for_fine_tuning(model, str(tmp_path / "hf")) is True
    rng = np.random.default_rng(0)
    batch = {
        "input_ids": rng.integers(5, CONFIG["vocab_size"], (2, 12)).astype("int32"),
        "input_mask": np.array([[1] * 12, [1] * 7 + [0] * 5], "int32"),
        "segment_ids": np.array([[0] * 6 + [1] * 6, [0] * 4 + [1] * 3 + [0] * 5], "int32"),
    }
    with torch.no_grad():
        out = reference(
            input_ids=torch.tensor(batch["input_ids"], dtype=torch.long),
            attention_mask=torch.tensor(batch["input_mask"], dtype=torch.long),
            token_type_ids=torch.tensor(batch["segment_ids"], dtype=torch.long),
        )
    ours = model(batch)
    if head == "classifier":
        assert ours["logits"].shape == (2, 3)
        assert np.abs(ours["logits"].numpy() - out.logits.numpy()).max() <= 1e-5
    else:
        real = batch["input_mask"].astype(bool)  # HF does not mask the padded positions' logits
        for name in ("start_logits", "end_logits"):
            got, want = ours[name].numpy(), getattr(out, name).numpy()
            assert np.abs(got[real] - want[real]).max() <= 1e-5
