"""Does a policy's checkpoint fit an env? :func:`check_policy_for_env` refuses, naming the fix, an SFT
checkpoint built for another env family.

The trainer (a recipe's policy) and the eval harness (an agent folder) both call it when they load a
policy; ``stratagym sft`` writes the record it reads (:data:`META_FILE`) beside the exported weights.
It lives with the agents, not with SFT, so that training and evaluation check a policy without
importing the SFT pipeline.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

from stratagym.errors import ConfigError

__all__ = ["META_FILE", "POLICY_CONFIG_FILE", "check_policy_for_env"]

#: The record ``stratagym sft`` writes into the folder it exports: its recipe, the template it tuned on...
META_FILE = "sft_meta.json"
#: The policy options :meth:`~stratagym.agents.llm.LLMPolicy.save_pretrained` writes beside the weights
#: (template, dtype, ...); here, with no torch to import, so that an eval can read them without loading the model
POLICY_CONFIG_FILE = "stratagym_policy.json"


def check_policy_for_env(policy: Any, env_id: str, env_kwargs: Optional[dict[str, Any]] = None) -> None:
    """Refuse an SFT checkpoint (a folder with ``sft_meta.json``) built for another env family, e.g. a
    SearchQA checkpoint put on ALFWorld; the message names the fix.

    A model whose tokenizer stratagym built holds its template's tags as single tokens, so a tokenizer
    without ``env_id``'s tags is refused. A pretrained model (SmolLM2, Qwen, ...) spells the tags in
    several tokens, and that is fine for it: it is not checked at all when it never went through
    ``stratagym sft``, and when it did (its recipe said ``model.require_tag_tokens: false``), the
    template it was tuned on must be ``env_id``'s. The env's ``protocol`` (``env_kwargs``) picks the
    template: ``tools`` for the tools protocol; without ``env_kwargs``, a checkpoint tuned on the
    ``tools`` template is checked against it.
    """
    # cost at import time: these pull torch (the Policy protocol); eval/agents.py imports this module for its
    # file names (META_FILE, POLICY_CONFIG_FILE) and needs none
    from stratagym.agents.policy import policy_hooks
    from stratagym.agents.prompts import template_for_env
    from stratagym.agents.small_lm import check_tokenizer_for_template

    folder = Path(str(getattr(getattr(policy, "config", None), "model", "") or ""))
    tokenizer = policy_hooks(policy).tokenizer
    if tokenizer is None or not (folder / META_FILE).exists():
        return
    try:
        meta = json.loads((folder / META_FILE).read_text())
    except (OSError, ValueError):
        meta = {}
    protocol = (env_kwargs or {}).get("protocol") or ("tools" if env_kwargs is None and meta.get("template") == "tools" else "tags")
    template = template_for_env(env_id, {"protocol": protocol}, getattr(policy.config, "template", None))
    model_spec = (meta.get("recipe") or {}).get("model") or {}
    if model_spec.get("path") and model_spec.get("require_tag_tokens", True) is False:
        tuned_on = meta.get("template")
        if tuned_on and tuned_on != template.name:
            raise ConfigError(
                f"the SFT checkpoint {folder} was tuned on the {tuned_on!r} template (built for another env?), "
                f"but {env_id} uses {template.name!r}; tune the pretrained model for this env with "
                "`stratagym sft --config <recipe>` (model.path, require_tag_tokens: false)"
            )
        return
    check_tokenizer_for_template(tokenizer, template, where=f"the SFT checkpoint {folder} (built for another env?)")
