"""The corpus stages' settings that scripts/data_download.sh and prepare_data.py share, declared
once: each field's kind, default (NVIDIA's recipe, data/paths) and help give prepare_data.py's flag
(common.cli.Flags) and the launcher's setting (launch.engine.Setting.of_field), so both refuse
the same values with the same sentence. The instance settings (masking, dupe factor, lengths)
live on data.pretraining.instances.InstanceOptions."""

from __future__ import annotations

import dataclasses

from common.cli import setting
from data import paths


@dataclasses.dataclass(frozen=True)
class PrepSettings:
    n_training_shards: int = setting("count", paths.DEFAULT_TRAINING_SHARDS, "Training shards.")
    n_test_shards: int = setting("steps", paths.DEFAULT_TEST_SHARDS, "Test shards (0 or more).")
    fraction_test_set: float = setting(
        "fraction", paths.DEFAULT_FRACTION_TEST, "Fraction of documents held out for the test shards."
    )
    n_processes: int | None = setting(
        "count", None, "Worker processes (default: all cores; per MPI rank: cores / ranks on the node)."
    )
