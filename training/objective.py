"""What the train step minimises: loss terms that are SUMS, each divided by a GLOBAL count.

An `Objective` turns a model's outputs and a micro-batch's features into float32 sums, never
means: each loss term summed over the micro-batch's examples (or tokens), plus the counts its
metrics need. It names, for every term, the count that normalises it, and computes those counts
from the features alone (`denominators`). TrainStep adds the denominators of all micro-batches of
an update and of all workers BEFORE the first gradient, then differentiates

    loss = sum_t  term_t(micro-batch) / denominator_t(whole update, all workers)

so one update is the update of one big batch however it is split into workers and micro-batches,
also when micro-batches hold different numbers of masked tokens (averaging per-micro-batch means
would weight a token of a sparse micro-batch more than one of a dense micro-batch).

Pretraining (training.pretraining_objective) divides the masked-LM term by the masked-token
count and the NSP term by the sequence count; a fine-tuning task divides its terms by its example
count. Evaluation uses the same sums over any number of batches.
"""

from __future__ import annotations

from collections.abc import Mapping


class Objective:
    """The contract between a task and TrainStep / the loop. Subclasses set `terms` and
    implement `denominators` and `__call__`; `metrics` and `result_names` are optional.

    terms: {term name: denominator name}; the loss is the sum of the normalised terms.
    sums: the names of the sums `__call__` returns (the terms and metric numerators); the train
    step carries them through its compiled micro-batch loop (it checks that they match).
    result_names: {metric name: name written to eval_results.json} (identity when absent).
    """

    terms: Mapping[str, str] = {}
    sums: tuple[str, ...] = ()
    result_names: Mapping[str, str] = {}

    def denominators(self, features) -> dict:
        """{denominator name: float32 scalar} computed from `features` alone (no model)."""
        raise NotImplementedError

    def __call__(self, outputs, features) -> dict:
        """{name: float32 scalar sum} over this micro-batch: every term of `terms`, plus any
        metric numerators (sums that add up over micro-batches and workers)."""
        raise NotImplementedError

    def metrics(self, totals: Mapping[str, float]) -> dict:
        """Extra metrics (floats) from `totals`: the global sums of `__call__`'s and
        `denominators`' values. The loss and the normalised terms are added by `summarize`."""
        return {}

    def summarize(self, totals: Mapping[str, float]) -> dict:
        """{"loss", each term (normalised), each extra metric} from global totals."""
        values = {term: _ratio(totals[term], totals[denominator]) for term, denominator in self.terms.items()}
        return {"loss": sum(values.values()), **values, **self.metrics(totals)}


def _ratio(numerator: float, denominator: float) -> float:
    return numerator / denominator if denominator else 0.0
