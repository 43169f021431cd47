"""The transformers KV cache under either of its names.

transformers renamed the forward keyword and output field ``past_key_values`` to ``cache``: in 5.24,
``LlamaForCausalLM.forward`` takes ``cache`` and carries ``@deprecate_kwarg("past_key_values", "5.40.0",
new_name="cache")``, and its outputs hold a ``cache`` field. Once the old keyword is removed it would fall
into the forward's ``**kwargs`` and the cache would be dropped without an error: every later token would
be computed without its prefix. The vLLM environment pins transformers < 5.20, which knows only the old
name, and the main one allows >= 4.45, so neither name can be hard-coded.

The output of the forward that built the cache says which name that model uses; :func:`returned_cache`
reads it from there and hands back the keyword to pass it on under.
"""

from __future__ import annotations

from typing import Any

__all__ = ["returned_cache"]


def returned_cache(out: Any) -> tuple[str, Any]:
    """The KV cache in a transformers forward output and the keyword that passes it to the next forward of
    the same model: ``("cache", out.cache)`` where the output has a ``cache`` field (newer transformers),
    else ``("past_key_values", out.past_key_values)``."""
    if "cache" in getattr(out, "__dataclass_fields__", {}):
        return "cache", out.cache
    return "past_key_values", out.past_key_values
