"""The search space (tuning/search_space.py): where entries come from and in which order they
win, what Optuna draws from them, and every malformed entry as one sentence naming its source."""

import optuna
import pytest

from common.errors import UserError
from tuning import search_space


def test_space_precedence_default_file_flags_and_fixed_values(tmp_path):
    assert set(search_space.build_space(None, {})) == {
        "learning_rate",
        "train_batch_size",
        "num_train_epochs",
    }
    spec = {
        "learning_rate": {"low": 2e-5, "high": 5e-5, "log": True},
        "seed": [1, 2],
        "warmup_proportion": 0.05,
    }
    space = search_space.build_space(spec, {"seed": ([7], "--seed_choices")})
    assert set(space) == {"learning_rate", "seed", "warmup_proportion"}  # a file replaces the default
    assert space["learning_rate"] == search_space.Dimension("learning_rate", low=2e-5, high=5e-5, log=True)
    assert space["seed"].choices == (7,) and space["warmup_proportion"].choices == (0.05,)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    for _ in range(20):
        trial = study.ask()
        drawn = {name: dim.suggest(trial) for name, dim in space.items()}
        assert 2e-5 <= drawn["learning_rate"] <= 5e-5 and drawn["seed"] == 7
        study.tell(trial, 0.0)
    assert set(study.trials[0].params) == {"learning_rate"}  # fixed values are not drawn


@pytest.mark.parametrize(
    "name, spec, message",
    [
        (
            "learning_rate",
            {"low": 1e-3, "high": 1e-5},
            "learning_rate's range is inverted (low 0.001 > high 1e-05)",
        ),
        ("learning_rate", {"low": 1e-4, "high": 1e-4}, "learning_rate's range is empty"),
        ("warmup_proportion", {"low": 0.0, "high": 0.2, "log": True}, "log-uniform range needs low > 0"),
        ("train_batch_size", [], "train_batch_size has an empty list of choices"),
        ("train_batch_size", [16, 24.5], "train_batch_size must be a whole number (got 24.5)"),
        ("seed", -1, "seed must be >= 0"),
        ("num_train_epochs", "three", "num_train_epochs must be a number (got 'three')"),
        ("learning_rate", {"low": 1e-5, "high": 1e-4, "log": "yes"}, "log must be true or false"),
        ("dropout", [0.1], "unknown parameter 'dropout'"),
    ],
)
def test_bad_entries_name_their_source(name, spec, message):
    with pytest.raises(UserError) as error:
        search_space.parse_dimension(name, spec, "--search_space s.yaml")
    assert str(error.value).startswith("--search_space s.yaml: ") and message in str(error.value)


def test_yaml_numbers_without_a_dot_are_numbers(tmp_path):
    # YAML 1.1 reads 1e-5 as a string; a space file written that way still means the number.
    path = tmp_path / "space.yaml"
    path.write_text("learning_rate: {low: 1e-5, high: 1e-4, log: true}\nseed: [1, 2]\n", encoding="utf-8")
    space = search_space.build_space(search_space.read_space_file(str(path)), {})
    assert space["learning_rate"] == search_space.Dimension("learning_rate", low=1e-5, high=1e-4, log=True)
    assert space["seed"].choices == (1, 2)


def test_flag_values_parse_as_ranges_and_choices():
    assert search_space.parse_range("1e-5, 1e-4", "learning_rate_range", True) == {
        "low": 1e-5,
        "high": 1e-4,
        "log": True,
    }
    assert search_space.parse_choices("16,32", "train_batch_size_choices") == [16, 32]
    assert search_space.parse_choices("2,2.5", "num_train_epochs_choices") == [2, 2.5]
    with pytest.raises(UserError, match="--learning_rate_range must be LOW,HIGH"):
        search_space.parse_range("1e-5", "learning_rate_range", True)
