"""The Policy protocol's optional hooks: declared there with no-op defaults, inherited by a subclass, and
supplied by ``policy_hooks`` to a policy that only follows the protocol's shape."""

from __future__ import annotations

import pytest
import torch

from stratagym.agents.policy import OPTIONAL_HOOKS, Policy, policy_hooks


class ShapeOnly:
    """Follows the protocol's required shape, defines one hook of its own and none of the others."""

    def __init__(self):
        self.model = torch.nn.Linear(1, 1)
        self.steps = 0

    def after_optimizer_step(self) -> None:
        self.steps += 1


class Subclassed(Policy):
    def __init__(self):
        self.model = torch.nn.Linear(1, 1)


def test_every_hook_is_declared_on_the_protocol_with_a_default():
    for name in OPTIONAL_HOOKS:
        assert name in Policy.__dict__, name
    p = Subclassed()
    assert policy_hooks(p) is p  # a subclass inherits every default: no view needed
    assert (p.tokenizer, p.compute_dtype, p.weight_sync_seconds) == (None, None, None)
    assert p.use_master_weights("bf16") is False and p.prompt_reuse_stats() is None
    assert p.release_generation_cache() is None and p.after_optimizer_step() is None and p.close() is None


def test_a_shape_only_policy_gets_the_defaults_it_lacks_and_keeps_its_own():
    p = ShapeOnly()
    hooks = policy_hooks(p)
    hooks.after_optimizer_step()
    assert p.steps == 1  # its own hook
    assert hooks.tokenizer is None and hooks.compute_dtype is None and hooks.weight_sync_seconds is None
    assert hooks.use_master_weights("no") is False and hooks.prompt_reuse_stats() is None
    hooks.release_generation_cache()
    hooks.close()
    p.close = lambda: setattr(p, "closed", True)  # hooks are looked up on each use
    hooks.close()
    assert p.closed
    with pytest.raises(AttributeError, match="not an optional policy hook"):
        hooks.generate
