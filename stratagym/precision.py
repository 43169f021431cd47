"""The compute dtype policy: which float type a model computes in, chosen from what the chip does fast.

A model's dtype changes its numbers (a bf16 eval is another protocol than an fp32 one) and its speed
(bf16 matmuls run on AMX tiles or AVX512-BF16 dot products; without either, torch emulates bf16 through
fp32 and it runs slower than fp32). So the choice is explicit and recorded:

* ``float32`` (``fp32``): the default, the dtype every result before the dtype policy was measured in;
* ``bfloat16`` (``bf16``): refused on a CPU without bf16 instructions (it would run, silently slower);
* ``float16`` (``fp16``): CUDA only (CPU fp16 matmuls are emulated unless the chip has AMX-FP16);
* ``auto``: ``bfloat16`` where the device computes it natively (a CUDA GPU with bf16 support; a CPU
  with AMX or AVX512-BF16, as torch's own CPU capability checks report), else ``float32``.

Training keeps fp32 master weights for whatever it trains and computes in the chosen dtype (see
``docs/training.md``, "Precision"): LoRA adapters stay fp32 on a bf16 base (peft's own adapter upcast),
a fully trained model keeps fp32 weights and runs its forward under ``torch.autocast``, and frozen
weights (a LoRA base, the KL reference) are held in the compute dtype.

``STRATAGYM_CPU_BF16=0`` makes this module report that the CPU has no bf16 instructions (to rehearse a
machine without them; ``1`` claims them).
"""

from __future__ import annotations

import os
from typing import Optional

import torch

from stratagym.errors import ConfigError

__all__ = [
    "DTYPE_CHOICES",
    "canonical_dtype",
    "cpu_bf16_isa",
    "dtype_name",
    "resolve_dtype",
    "supports_dtype",
]

#: What a recipe may write for a dtype, mapped to the canonical name (``auto`` stays ``auto``).
DTYPE_CHOICES: dict[str, str] = {
    "auto": "auto",
    "float32": "float32", "fp32": "float32",
    "bfloat16": "bfloat16", "bf16": "bfloat16",
    "float16": "float16", "fp16": "float16",
}
_TORCH = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def canonical_dtype(name: str, *, option: str = "policy.dtype") -> str:
    """``"bf16"`` -> ``"bfloat16"``, ...; a :class:`ConfigError` naming the choices for anything else."""
    try:
        return DTYPE_CHOICES[str(name).strip().lower()]
    except (KeyError, AttributeError):
        raise ConfigError(f"{option} must be one of auto, float32, bfloat16, float16 (or fp32, bf16, fp16), "
                          f"got {name!r}") from None


def dtype_name(dtype: torch.dtype) -> str:
    """The canonical name of a torch float dtype (``torch.bfloat16`` -> ``"bfloat16"``)."""
    for name, value in _TORCH.items():
        if value == dtype:
            return name
    return str(dtype).removeprefix("torch.")


def cpu_bf16_isa() -> Optional[str]:
    """The CPU instructions that compute bf16 natively here (``"amx_bf16"``, ``"avx512_bf16"``), or None.

    Asked of torch's own checks (the ones oneDNN dispatches on), not parsed from ``/proc/cpuinfo``."""
    forced = os.environ.get("STRATAGYM_CPU_BF16")
    if forced is not None and forced.strip() != "":
        return "forced" if forced.strip() not in ("0", "false", "no") else None
    cpu = torch.cpu
    if getattr(cpu, "_is_amx_tile_supported", lambda: False)():
        return "amx_bf16"
    if getattr(cpu, "_is_avx512_bf16_supported", lambda: False)():
        return "avx512_bf16"
    return None


def supports_dtype(name: str, device: "str | torch.device") -> bool:
    """Whether ``device`` computes the (canonical) dtype ``name`` natively."""
    kind = torch.device(device).type
    if name == "float32":
        return True
    if kind == "cuda":
        return name == "float16" or torch.cuda.is_bf16_supported()
    if kind == "cpu":
        if name == "bfloat16":
            return cpu_bf16_isa() is not None
        return bool(getattr(torch.cpu, "_is_amx_fp16_supported", lambda: False)())
    return False


def resolve_dtype(name: str, device: "str | torch.device" = "cpu", *, option: str = "policy.dtype") -> torch.dtype:
    """The torch dtype a model runs in on ``device`` for the recipe value ``name`` (see the module docstring).

    Refuses a dtype the device does not compute natively, naming the fix, rather than running slowly."""
    canon = canonical_dtype(name, option=option)
    kind = torch.device(device).type
    if canon == "auto":
        return torch.bfloat16 if supports_dtype("bfloat16", device) else torch.float32
    if not supports_dtype(canon, device):
        if kind == "cpu" and canon == "bfloat16":
            why = ("this CPU has neither AMX nor AVX512-BF16 instructions, so torch would emulate bf16 "
                   "through fp32, slower than fp32 itself")
        elif kind == "cpu":
            why = "CPU float16 matmuls are emulated unless the chip has AMX-FP16"
        else:
            why = f"{kind} does not compute {canon} natively"
        raise ConfigError(f"{option}: {canon} on {kind}: {why}. Use {option}: auto (bf16 where the chip has it, "
                          "else float32) or float32.")
    return _TORCH[canon]
