"""Old import path of the scorer policy, which now lives in :mod:`stratagym.agents.scorer`.

Kept only so that the class string ``stratagym.studies.policy:ScorerPolicy`` still resolves: it is
written in the committed study and leaderboard records (``training.policy.class``), whose content is
hashed and must not be rewritten, and in recipes users may have saved. New code and recipes name
``stratagym.agents.scorer:ScorerPolicy``.
"""

from stratagym.agents.scorer import ScorerPolicy

__all__ = ["ScorerPolicy"]
