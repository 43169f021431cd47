"""Evaluation: metrics (EM/F1/success with CIs), the resumable eval harness, result records, suites.

* :mod:`stratagym.metrics` (base layer, used by envs too) -- SQuAD-style normalisation, EM, F1, substring EM;
* :mod:`stratagym.eval.stats` -- Wilson and bootstrap intervals, across-seed summaries;
* :mod:`stratagym.eval.aggregate` -- per-env metrics from per-episode outcomes;
* :mod:`stratagym.eval.harness` -- ``evaluate(EvalConfig, out=...)``: play, resume, write a record;
* :mod:`stratagym.eval.records` -- the versioned result-record schema;
* :mod:`stratagym.eval.suite` -- suite YAML (what to train and evaluate); ``stratagym bench`` and the
  ``eval`` command live in :mod:`stratagym.bench`, the app layer, because they submit to the leaderboard.

Submodules are imported on use so ``import stratagym.eval`` stays cheap.
"""
