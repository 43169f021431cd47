"""Controlled algorithm studies: does each estimator do what its paper claims, on an env built to show it?

One place each: the definitions are YAML files in ``suites/studies/`` (:mod:`.definitions`), the runner
trains every method x seed through the project's trainer with the scorer policy
(:mod:`stratagym.agents.scorer`) and writes ``studies/<name>/`` (:mod:`.runner`, :mod:`.report`), the
advantage-level diagnostics run on the same recipes (:mod:`.diagnostics`), and ``stratagym study`` drives
them (:mod:`.cli`). What was measured, and why: ``docs/studies.md``.
"""
