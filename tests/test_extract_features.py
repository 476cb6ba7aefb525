"""extract_features.py against transformers' BertModel on real MiniLM weights, and its errors."""

import io
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import extract_features as ef
from common.errors import UserError
from conftest import ROOT, SENTENCES

# A few real lines: pairs (Google's `A ||| B`), an accent, a one-token sentence; five lines with
# batch_size 2 give two full batches of different lengths and a partial last one.
EXAMPLES = [SENTENCES[i] for i in (0, 1, 8, 3, 21)]
# -6 and 0 both name the first of MiniLM's six layers.
LAYERS = "-1,-2,0,-6"
BATCH = 2


def _write_input(path):
    with open(path, "w", encoding="utf-8") as f:
        for a, b in EXAMPLES:
            f.write(f"{a} ||| {b}\n" if b else f"{a}\n")
    return str(path)


def _cli(*args):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
    return subprocess.Popen(
        [sys.executable, os.path.join(ROOT, "extract_features.py"), *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _read_jsonl(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


@pytest.fixture(scope="module")
def io_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("extract")
    _write_input(folder / "input.txt")
    return folder


@pytest.fixture(scope="module")
def hf_cli(io_dir, minilm_dir):
    """The CLI on the Hugging Face directory (config and vocab found beside it), started first so
    that it runs while this process builds the Google checkpoint and the reference."""
    output = str(io_dir / "hf.jsonl")
    process = _cli(
        f"--input_file={io_dir / 'input.txt'}",
        f"--output_file={output}",
        f"--init_checkpoint={minilm_dir}",
        f"--layers={LAYERS}",
        f"--batch_size={BATCH}",
    )
    result = {}

    def wait():
        if not result:
            stdout, stderr = process.communicate(timeout=120)
            result.update(returncode=process.returncode, stdout=stdout, stderr=stderr, output=output)
        return result

    yield wait
    if process.poll() is None:
        process.kill()
        process.wait()


@pytest.fixture(scope="module")
def google_dir(io_dir, minilm_dir):
    from bert.checkpoints import load_weights, read_config_beside, save_google
    from bert.encoder import BertEncoder

    encoder = BertEncoder(read_config_beside(minilm_dir))
    load_weights(encoder, minilm_dir)
    folder = str(io_dir / "google")
    save_google(encoder, folder, vocab_file=os.path.join(minilm_dir, "vocab.txt"))
    return folder


def _run_on_google_checkpoint(io_dir, google_dir, output, log):
    return ef.run(
        str(io_dir / "input.txt"),
        output,
        os.path.join(google_dir, "bert_model.ckpt"),
        bert_config_file=os.path.join(google_dir, "bert_config.json"),
        vocab_file=os.path.join(google_dir, "vocab.txt"),
        layers=LAYERS,
        batch_size=BATCH,
        log=log,
    )


@pytest.fixture(scope="module")
def google_output(io_dir, google_dir):
    output, log = str(io_dir / "google.jsonl"), io.StringIO()
    count = _run_on_google_checkpoint(io_dir, google_dir, output, log)
    assert count == len(EXAMPLES)
    assert _final_progress(count).search(log.getvalue())
    return output


def _final_progress(count):
    """The last progress line (common.progress.Progress): 'extract_features: 100% 5/5 [...]'."""
    return re.compile(rf"^extract_features: 100%\S* {count}(\.0)?/{count} \[.*lines.*\]$", re.M)


@pytest.fixture(scope="module")
def reference(minilm_dir):
    """Per example: (tokens, last_hidden_state [S, D], hidden_states[-2] [S, D]) from transformers."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    tokenizer = transformers.BertTokenizerFast.from_pretrained(minilm_dir)
    model = transformers.BertModel.from_pretrained(minilm_dir).eval()
    results = []
    for a, b in EXAMPLES:
        encoded = tokenizer(a, b, return_tensors="pt") if b else tokenizer(a, return_tensors="pt")
        with torch.no_grad():
            out = model(**encoded, output_hidden_states=True)
        tokens = tokenizer.convert_ids_to_tokens(encoded["input_ids"][0])
        results.append((tokens, out.last_hidden_state[0].numpy(), out.hidden_states[-2][0].numpy()))
    return results


@pytest.mark.process
def test_google_checkpoint_matches_transformers(hf_cli, google_output, reference):
    records = _read_jsonl(google_output)
    assert [r["linex_index"] for r in records] == list(range(len(EXAMPLES)))
    for record, (tokens, last, second_last) in zip(records, reference):
        features = record["features"]
        assert [f["token"] for f in features] == tokens
        assert tokens[0] == "[CLS]" and tokens[-1] == "[SEP]"
        assert all([layer["index"] for layer in f["layers"]] == [-1, -2, 0, -6] for f in features)
        got_last = np.array([f["layers"][0]["values"] for f in features])  # [S, D]
        got_second = np.array([f["layers"][1]["values"] for f in features])  # [S, D]
        assert got_last.shape == last.shape == (len(tokens), 384)
        assert np.abs(got_last - last).max() <= 1e-4
        assert np.abs(got_second - second_last).max() <= 1e-4
        # The layers really differ, so the test would notice a swapped index.
        assert np.abs(got_last - got_second).max() > 0.1
        first, first_again = ([f["layers"][k]["values"] for f in features] for k in (2, 3))
        assert first == first_again and np.abs(np.array(first) - got_second).max() > 0.1
    # The pair line has two segments' worth of [SEP].
    assert [f["token"] for f in records[1]["features"]].count("[SEP]") == 2


@pytest.mark.process
def test_cli_on_huggingface_dir_gives_identical_output(hf_cli, google_output):
    result = hf_cli()
    assert result["returncode"] == 0, result["stderr"]
    assert _final_progress(len(EXAMPLES)).search(result["stderr"])
    with open(result["output"], encoding="utf-8") as f, open(google_output, encoding="utf-8") as g:
        hf_text, google_text = f.read(), g.read()
    assert hf_text.count("\n") == len(EXAMPLES)
    assert hf_text == google_text
    assert not [n for n in os.listdir(os.path.dirname(result["output"])) if ".tmp" in n]


def test_wrong_vocab_fails_naming_the_vocab_file(io_dir, minilm_dir, tmp_path):
    vocab = tmp_path / "small_vocab.txt"
    vocab.write_text(
        "\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "a", "of", "to", "and"]) + "\n"
    )
    output = tmp_path / "out.jsonl"
    with pytest.raises(ValueError) as err:
        ef.run(str(io_dir / "input.txt"), str(output), minilm_dir, vocab_file=str(vocab))
    assert str(vocab) in str(err.value)
    assert "10 tokens" in str(err.value) and "30522" in str(err.value)
    assert not output.exists()


@pytest.mark.process
def test_missing_input_file_fails_in_one_line(tmp_path, minilm_dir):
    missing = tmp_path / "no_such_input.txt"
    process = _cli(
        f"--input_file={missing}",
        f"--output_file={tmp_path / 'out.jsonl'}",
        f"--init_checkpoint={minilm_dir}",
    )
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 2
    assert stderr.strip().splitlines() == [f"extract_features: error: --input_file {missing} does not exist."]
    assert not (tmp_path / "out.jsonl").exists()


def test_missing_config_fails_naming_the_checkpoint(io_dir, tmp_path):
    prefix = str(tmp_path / "bert_model.ckpt")
    with pytest.raises(
        UserError, match="No bert_config.json or config.json beside " + prefix.replace(".", r"\.")
    ):
        ef.run(str(io_dir / "input.txt"), str(tmp_path / "out.jsonl"), prefix)
    with pytest.raises(UserError, match="--bert_config_file .*nope.json does not exist"):
        ef.run(
            str(io_dir / "input.txt"),
            str(tmp_path / "out.jsonl"),
            prefix,
            bert_config_file=str(tmp_path / "nope.json"),
        )


def test_checkpoint_that_does_not_fit_leaves_no_output(io_dir, google_dir, tmp_path):
    from bert.checkpoints import CheckpointMismatchError
    from bert.config import BertConfig

    config = BertConfig.from_json_file(os.path.join(google_dir, "bert_config.json"))
    values = dict(config.to_dict(), num_hidden_layers=1)
    config_file = tmp_path / "bert_config.json"
    config_file.write_text(json.dumps(values))
    output = tmp_path / "out.jsonl"
    with pytest.raises(CheckpointMismatchError, match="unexpected bert/encoder/layer_1/"):
        ef.run(
            str(io_dir / "input.txt"), str(output), google_dir, bert_config_file=str(config_file), layers="-1"
        )
    assert os.listdir(tmp_path) == ["bert_config.json"]


def test_layers_out_of_range_and_malformed():
    assert ef.parse_layers("-1,-2,-3,-4", 6) == [-1, -2, -3, -4]
    assert ef.parse_layers("0,5,-6", 6) == [0, 5, -6]
    with pytest.raises(UserError, match=r"--layers index 6 is out of range .* 6 layers"):
        ef.parse_layers("-1,6", 6)
    with pytest.raises(UserError, match=r"--layers index -7 is out of range"):
        ef.parse_layers("-7", 6)
    with pytest.raises(UserError, match="comma-separated integers"):
        ef.parse_layers("-1,last", 6)


def test_read_examples_follows_google(tmp_path):
    path = tmp_path / "lines.txt"
    path.write_bytes(
        "  One sentence.  \r\nA ||| B\n\nx ||| y ||| z\nno pair|||here\nlast ||| ".encode()
        + "caf\u00e9".encode()
    )
    assert list(ef.read_examples(str(path))) == [
        ("One sentence.", None),
        ("A", "B"),
        ("", None),
        ("x ||| y", "z"),
        ("no pair|||here", None),
        ("last", "café"),
    ]
    assert ef.count_lines(str(path)) == 6
    path.write_text("a\nb\n")
    assert ef.count_lines(str(path)) == 2 == len(list(ef.read_examples(str(path))))
    path.write_bytes(b"fine\nlatin-1 caf\xe9\n")
    with pytest.raises(ValueError, match=r"lines.txt line 2 is not UTF-8 text"):
        list(ef.read_examples(str(path)))


def test_round6_equals_pythons_round():
    rng = np.random.default_rng(0)
    values = np.concatenate(
        [
            rng.standard_normal(20000).astype(np.float32) * 3,
            # Exact ties at the 6th decimal (k/128 with k odd) and values far from 1.
            np.arange(-99, 100, 2, dtype=np.float32) / 128,
            np.array([0.0, -0.0, 1e-30, -3e-7, 5e-7, 123456.789, -65504.0], np.float32),
        ]
    )
    expected = [round(float(x), 6) for x in values]
    assert ef.round6(values).tolist() == expected
    assert round(float(np.float32(1 / 128)), 6) == 0.007812  # a tie, rounded half to even


@pytest.mark.slow
def test_windows_sorted_by_length_write_the_same_lines_in_input_order(
    io_dir, google_dir, google_output, monkeypatch
):
    # Windows of one batch (2 lines): three windows, each sorted on its own, written in order.
    monkeypatch.setattr(ef, "SORT_WINDOW_BATCHES", 1)
    output = str(io_dir / "windows.jsonl")
    assert _run_on_google_checkpoint(io_dir, google_dir, output, io.StringIO()) == len(EXAMPLES)
    got, want = _read_jsonl(output), _read_jsonl(google_output)
    assert [r["linex_index"] for r in got] == list(range(len(EXAMPLES)))
    assert [[f["token"] for f in r["features"]] for r in got] == [
        [f["token"] for f in r["features"]] for r in want
    ]
    for g, w in zip(got, want):
        values = [np.array([layer["values"] for layer in f["layers"]]) for f in g["features"]]
        expected = [np.array([layer["values"] for layer in f["layers"]]) for f in w["features"]]
        assert max(float(np.abs(a - b).max()) for a, b in zip(values, expected)) <= 1e-5
