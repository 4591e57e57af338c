"""How a training job uses the machine it runs on: precision, attention kernel, packing, fused kernels.

Every choice is made from what is present, never assumed: CUDA and the GPU's generation (from torch, in
the job), the packages installed (`flash_attn`, `flash_attn_interface`, `liger_kernel`), and what the
loaded model and the installed transformers support. The job records what it chose in its progress
(`speed`) and its log, so a slow run can be read back.

* attention: FlashAttention 3 on Hopper when `flash_attn_interface` is installed, FlashAttention 2 when
  `flash_attn` is, else transformers' default (sdpa where the model supports it, else eager);
* packing (padding-free, per-sample boundaries): FlashAttention takes packed sequences through
  position ids / cumulative lengths (variable-length kernels); sdpa and eager keep samples apart only
  where the model builds its mask with transformers' masking utilities, which detect packed sequences
  from position ids when no attention mask is given (transformers 4.56 and later). On by default with
  CUDA; on CPU only when asked (a CPU has no variable-length kernel to gain from);
* Liger kernels (Triton: CUDA only) when `liger_kernel` is installed;
* bf16 with CUDA, fp32 on CPU.

No heavy import at module level: the `train` tool imports this module for its estimate.
"""

from __future__ import annotations

import importlib.util
import inspect
import os
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

FLASH_ATTENTION = ("flash_attention_2", "flash_attention_3")


def installed(module: str) -> bool:
    """Whether `module` can be imported here (found on the path; not imported)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def cuda_likely() -> bool:
    """An NVIDIA driver is present and not hidden (no torch import): the tool's guess for its estimate only;
    the job decides with `torch.cuda.is_available()`."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", "unset").strip() in ("", "-1"):
        return False
    return Path("/proc/driver/nvidia/version").exists() or Path("/dev/nvidiactl").exists()


def attention(cuda: bool, capability: tuple[int, int] | None = None) -> str | None:
    """The attention implementation to load the model with (None: transformers' own default)."""
    if not cuda:
        return None
    if capability is not None and capability[0] == 9 and installed("flash_attn_interface"):
        return "flash_attention_3"  # Hopper build of FlashAttention
    if installed("flash_attn"):
        return "flash_attention_2"
    return None


def liger(cuda: bool) -> bool:
    """Liger's fused Triton kernels (RMSNorm, RoPE, SwiGLU, fused cross-entropy) when installed; CUDA only."""
    return cuda and installed("liger_kernel")


def packing_blocker(model: Any) -> str | None:
    """Why `model` cannot be trained on packed rows without samples attending to each other (None: it can)."""
    if "position_ids" not in inspect.signature(model.forward).parameters:
        return f"{type(model).__name__}.forward takes no position_ids"
    impl = getattr(model.config, "_attn_implementation", None) or "eager"
    if impl in FLASH_ATTENTION:
        return None  # variable-length kernels from position ids / cumulative lengths
    try:
        from transformers import masking_utils
    except ImportError:
        return "this transformers has no masking utilities (4.56 or later detects packed sequences)"
    if not hasattr(masking_utils, "find_packed_sequence_indices"):
        return "this transformers does not detect packed sequences from position ids (4.56 or later does)"
    modeling = sys.modules.get(type(model).__module__)
    if getattr(modeling, "create_causal_mask", None) is not masking_utils.create_causal_mask:
        return f"{type(model).__name__} builds its attention mask without transformers' masking utilities"
    return None


@dataclass
class Speed:
    """What the job runs with; `packing_flat` joins a batch into one row (variable-length kernels)."""

    attention: str
    bf16: bool
    packing: bool
    packing_flat: bool
    liger: bool
    gradient_checkpointing: bool
    note: str | None = None

    def report(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}


def decide(model: Any, *, cuda: bool, packing: bool | None, gradient_checkpointing: bool | None,
           method: str = "sft") -> Speed:
    """Settle the job's speed settings for the loaded `model` (packing None: on with CUDA where supported)."""
    impl = getattr(model.config, "_attn_implementation", None) or "eager"
    want = (cuda if packing is None else packing) and method == "sft"
    blocker = packing_blocker(model) if want else None
    note = f"packing off: {blocker}" if blocker else None
    return Speed(attention=impl, bf16=cuda, packing=want and blocker is None,
                 packing_flat=impl in FLASH_ATTENTION, liger=liger(cuda),
                 gradient_checkpointing=cuda if gradient_checkpointing is None else gradient_checkpointing,
                 note=note)
