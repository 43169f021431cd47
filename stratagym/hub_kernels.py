"""Model loads without kernels fetched from the Hugging Face Hub, unless the user asks for them.

transformers >= 5 "kernelizes" every model ``from_pretrained`` loads (it swaps layers for kernels of the
``kernels`` package, downloaded from the Hub on CUDA) unless ``USE_HUB_KERNELS`` is false or the call passes
``use_kernels=False``. This project never downloads code at load time, and offline (or with ``kernels``
missing, as on a lent GPU) the load fails. The ``stratagym`` command sets ``USE_HUB_KERNELS=0`` for its own
process; :func:`load_kwargs` covers the Python API, where user code loads models through our classes.
Measured on SmolLM2-135M on CPU: logits bit-identical with and without.
"""

from __future__ import annotations

import os

__all__ = ["hub_kernels_requested", "load_kwargs"]


def hub_kernels_requested() -> bool:
    """True only when the user set ``USE_HUB_KERNELS`` to a true value (transformers' own spellings)."""
    return os.environ.get("USE_HUB_KERNELS", "").lower() in ("true", "1", "y", "yes", "on")


def load_kwargs() -> dict:
    """Keyword arguments for a model's ``from_pretrained``: ``use_kernels=False`` unless the user opted in.

    Empty on a transformers release without hub kernels (before ``PreTrainedModel.set_use_kernels``), where
    the keyword would reach the model's constructor and fail.
    """
    from transformers import PreTrainedModel

    if hub_kernels_requested() or not hasattr(PreTrainedModel, "set_use_kernels"):
        return {}
    return {"use_kernels": False}
