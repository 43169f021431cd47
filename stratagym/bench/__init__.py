"""Apps on top of eval and the leaderboard: ``stratagym eval`` and ``stratagym bench``.

They sit in the top layer because they *submit* results: evaluation itself (:mod:`stratagym.eval`)
never imports the leaderboard. ``runner`` trains, evaluates, submits and renders a suite; ``cli``
holds the two commands.
"""
