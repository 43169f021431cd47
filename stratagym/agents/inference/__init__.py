"""The HF inference engine's speed machinery, out of the policy's room.

What makes a transformers model decode and score faster without changing what it computes lives here, so
a reader of the policy (:mod:`stratagym.agents.llm`) and its backends (:mod:`stratagym.agents.backends`)
meets it only where it is switched on:

* :mod:`~stratagym.agents.inference.hf_generator`: the ``hf`` backend's batched KV-cached sampling loop
  (:class:`HFGenerator`, re-exported by :mod:`stratagym.agents.backends`);
* :mod:`~stratagym.agents.inference.fused_decode`: one-token decode steps of Llama/Qwen2-style models in a
  fused forward (``policy.fused_decode``), checked against transformers' forward before it is used;
* :mod:`~stratagym.agents.inference.fused_score`: the training/scoring forward fused the same way
  (``policy.fused_scoring``);
* :mod:`~stratagym.agents.inference.prefix_cache`: key/value caches of prompt prefixes reused across
  generation calls (``policy.prefix_cache``);
* :mod:`~stratagym.agents.inference.scoring`: the layouts that re-score (prompt, response) rows for training
  (whole rows, shared prompts, history hosts), behind ``LLMPolicy.sequence_log_probs``.

The package imports nothing eagerly: the generator comes with the ``hf`` backend, the rest only when a
policy turns it on.
"""
