"""Training: the RL loop that turns env rollouts into policy updates.

Layer 3, above envs, algorithms and agents. ``rollout`` plays groups of episodes with a policy (the one
rollout loop of the project; evaluation reuses it with group size 1), ``trainer`` turns them into
tensors, advantages (``stratagym.algorithms``) and optimizer steps, ``checkpoint`` writes and resumes
atomically, ``config`` validates the YAML, ``cli`` is ``stratagym train``.
"""
