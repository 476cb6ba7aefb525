"""`python -m data.paths [all|root|phase1|phase2|vocab|python_docs|python_qa|recipe]`: the default
data locations, or NVIDIA's recipe values as `name=value` lines (for the shell launchers)."""

import argparse
import os
import sys

from data import paths


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m data.paths", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "what",
        nargs="?",
        default="all",
        choices=("all", "root", "phase1", "phase2", "vocab", "python_docs", "python_qa", "recipe"),
    )
    parser.add_argument("--dataset", default=paths.DEFAULT_DATASET)
    parser.add_argument("--n_training_shards", type=int, default=paths.DEFAULT_TRAINING_SHARDS)
    parser.add_argument("--fraction_test_set", type=float, default=paths.DEFAULT_FRACTION_TEST)
    parser.add_argument("--masking", choices=("static", "dynamic"), default="static")
    parser.add_argument("--dupe_factor", type=int, default=None, help="default 5 static, 1 dynamic")
    parser.add_argument("--data_dir", default=None, help=f"overrides ${paths.DATA_DIR_ENV}")
    args = parser.parse_args(argv)
    if args.what == "recipe":
        for key, value in paths.recipe().items():
            print(f"{key}={value}")
        return 0
    root = paths.data_root(os.environ, args.data_dir)
    dupe_factor = args.dupe_factor or (
        1 if args.masking == "dynamic" else paths.DEFAULT_TFRECORD_PARAMS["dupe_factor"]
    )
    dirs = paths.default_pretraining_dirs(
        root,
        args.dataset,
        args.n_training_shards,
        args.fraction_test_set,
        dupe_factor=dupe_factor,
        masking=args.masking,
    )
    values = {
        "root": root,
        **dirs,
        "vocab": os.path.join(paths.vocab_dir(root, args.dataset), "vocab.txt"),
        "python_docs": paths.python_docs_file(root),
        "python_qa": paths.python_qa_dir(root),
    }
    if args.what == "all":
        for key, value in values.items():
            print(f"{key}\t{value}")
    else:
        print(values[args.what])
    return 0


if __name__ == "__main__":
    sys.exit(main())
