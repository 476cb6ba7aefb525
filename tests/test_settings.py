"""A setting declared once (common.cli.setting): the entry points' flags and the launchers'
settings read its kind, default and help from the dataclass field."""

import dataclasses

import pytest
from absl import flags

import finetuning_cli
import run_pretraining
from common import cli
from launch import glue, pretraining, squad
from training.finetuning_job import FineTuningSettings
from training.job import JobSettings
from training.length_bins import DEFAULT_BIN_SIZE, bin_size_fits, bin_size_refusal
from training.pretraining_job import PretrainingSettings


def _defined(define):
    fv = flags.FlagValues()
    define(fv)
    return fv


def _finetuning_flags(fv):
    finetuning_cli.define_flags(fv, max_seq_length=384, learning_rate=5e-5, train_batch_size=32, epochs=2.0)


@pytest.mark.parametrize(
    "define, settings_class",
    [(run_pretraining.define_flags, PretrainingSettings), (_finetuning_flags, FineTuningSettings)],
)
def test_a_flag_without_its_own_help_says_its_fields_help(define, settings_class):
    fv = _defined(define)
    declared = [f for f in dataclasses.fields(settings_class) if f.metadata.get("help")]
    assert len(declared) >= 12
    for field in declared:
        told = f" Default {field.metadata['none_means']}." if field.metadata.get("none_means") else ""
        kind = field.metadata["kind"]
        enum = f"<{'|'.join(kind)}>: " if isinstance(kind, tuple) else ""  # absl's enum flags say so
        assert fv[field.name].help == enum + field.metadata["help"] + told, field.name
    assert fv["bin_size"].help.endswith(f"as does a bin that long or longer. Default {DEFAULT_BIN_SIZE}.")
    assert (
        fv["bin_size"].default is None and fv["keep_checkpoints"].default == settings_class.keep_checkpoints
    )


def test_a_changed_default_keeps_the_fields_kind_and_help():
    job, fine = (
        next(f for f in dataclasses.fields(c) if f.name == "keep_checkpoints")
        for c in (JobSettings, FineTuningSettings)
    )
    assert (job.default, fine.default) == (5, 3)
    assert fine.metadata["help"] == job.metadata["help"] and fine.metadata["kind"] == "count"


def test_an_unknown_kind_is_refused_where_it_is_declared():
    with pytest.raises(ValueError, match="unknown kind 'counts'"):
        cli.setting("counts", 1, "Things.")


def test_the_launchers_bin_size_is_the_jobs_field_with_the_launchers_default():
    field = next(f for f in dataclasses.fields(JobSettings) if f.name == "bin_size")
    tables = {
        "run_pretraining_lamb": pretraining.SETTINGS,
        "run_squad": squad.TRAINING.settings,
        "run_squad_inference": squad.INFERENCE.settings,
        "run_glue": glue.TRAINING.settings,
        "run_glue_inference": glue.INFERENCE.settings,
    }
    found = {name: next(s for s in table if s.name == "bin_size") for name, table in tables.items()}
    assert {name: s.default for name, s in found.items()} == {
        "run_pretraining_lamb": "64",
        "run_squad": "64",
        "run_squad_inference": "64",
        "run_glue": "32",
        "run_glue_inference": "32",
    }
    said = field.metadata["help"]
    assert said.startswith("Pad each micro-batch") and said.endswith(".")
    for s in found.values():
        assert (s.kind, s.help, s.positional) == ("steps", "p" + said[1:-1], False)


@pytest.mark.parametrize("bin_size, fits", [(0, True), (1, True), (128, True), (129, False), (-1, False)])
def test_one_rule_for_a_bin_size(bin_size, fits):
    assert bin_size_fits(bin_size, 128) is fits
    assert (bin_size_refusal(bin_size, 128) is None) is fits
