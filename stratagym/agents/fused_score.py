"""Moved to :mod:`stratagym.agents.inference.fused_score` (the inference engine's sub-package); this path stays
importable for existing code and is the same module object, so attributes set on either are seen by both."""

import sys

from stratagym.agents.inference import fused_score as _moved

sys.modules[__name__] = _moved
