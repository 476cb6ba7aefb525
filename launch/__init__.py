"""The launcher engine: every `scripts/run_*.sh`, `scripts/data_download.sh` and
`scripts/quickstart.sh` is a table of settings here, and one engine turns what the user typed into
the commands to run.

    bash scripts/run_squad.sh 24 5e-6 fp16 true 8 --epochs=3 --preset my_cluster -- --seed=7
      -> exec python -m launch run run_squad ...   (scripts/launch.sh; launch/runner.py)
      -> a child, python -m launch plan run_squad ...: parse -> check -> usage -> resolved
         summary -> plan -> input checks (records read as bytes, without TensorFlow)
      -> the launcher process runs the plan's steps in order, each a child process, and relays
         preemption notices (SIGTERM, SIGUSR1, SIGINT) to them

One precedence for every launcher and setting:

    defaults < preset file (configs/presets/<launcher>/) < positional (NVIDIA's order) < --NAME=VALUE
    computed defaults < environment variable < --PATH_OPTION=PATH

A setting the entry point takes as it is names its flag in the table (`Setting(..., flag=...)`, or
`Setting.of_field` for one declared on a settings dataclass), and `Launch.command` passes it on:
a launcher only renames. A plan writes out only the flags it computes (paths, per-phase values).
Values are checked against common/kinds.py, the table the entry points' flags use too. Workers
start one way for every launcher (launch/workers.py). The package sits above training/: it
imports the library to check inputs; nothing below imports it.
"""
