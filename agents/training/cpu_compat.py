"""Run Megatron-Core on CPU with gloo (notes/stack-facts.md, "Megatron-Core on CPU").

Megatron-Core asks for CUDA in a handful of places (``torch.cuda.current_device()`` in the global
memory buffer, ``device='cuda'`` literals, ``'torch.cuda.FloatTensor'`` type-string assertions in
grad clipping, the CUDA RNG tracker). This module redirects those to the CPU:

- a :class:`~torch.overrides.TorchFunctionMode` that maps ``device=`` kwargs and ``Tensor.to(device)``
  from cuda/int to cpu, makes ``Tensor.cuda()`` a no-op, and reports ``torch.cuda.*`` type strings
  for CPU tensors. The mode is thread-local: enter it on the training thread (:func:`cpu_mode`);
- replacements of ``torch.cuda.current_device/synchronize/…/manual_seed`` and of Megatron's CUDA RNG
  state helpers, backed by a private CPU ``torch.Generator`` standing in for the device generator.

Only :func:`install` mutates anything, and the worker calls it only when CUDA is not available: on
a GPU machine none of this is loaded.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

_installed = False
_device_generator = torch.Generator()


def _is_cuda(dev: object) -> bool:
    if isinstance(dev, bool):
        return False
    if isinstance(dev, int):
        return True
    if isinstance(dev, str):
        return dev.startswith("cuda")
    return isinstance(dev, torch.device) and dev.type == "cuda"


class CpuRedirectMode(TorchFunctionMode):
    """Map CUDA device requests to the CPU for every torch call made on this thread."""

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = dict(kwargs or {})
        if "device" in kwargs and _is_cuda(kwargs["device"]):
            kwargs["device"] = torch.device("cpu")
        if func is torch.Tensor.cuda:
            return args[0]
        if func is torch.Tensor.to:
            args = tuple(torch.device("cpu") if i > 0 and _is_cuda(a) else a for i, a in enumerate(args))
        result = func(*args, **kwargs)
        if (
            func is torch.Tensor.type
            and len(args) == 1
            and not kwargs
            and isinstance(result, str)
            and result.startswith("torch.")
            and not result.startswith("torch.cuda.")
        ):
            return "torch.cuda." + result[len("torch.") :]
        return result


def _get_rng_state(*_args: Any, **_kwargs: Any) -> torch.Tensor:
    return _device_generator.get_state()


def _set_rng_state(new_state: torch.Tensor, *_args: Any, **_kwargs: Any) -> None:
    _device_generator.set_state(new_state)


def _manual_seed(seed: int) -> None:
    _device_generator.manual_seed(int(seed))


def install() -> None:
    """Patch torch.cuda and Megatron's RNG helpers for CPU. Idempotent. Never call it on a GPU."""
    global _installed
    if _installed:
        return
    if torch.cuda.is_available():
        raise RuntimeError("cpu_compat must not be installed on a machine with CUDA")
    from megatron.core.tensor_parallel import random as mrandom

    torch.cuda.current_device = lambda: 0
    torch.cuda.synchronize = lambda *a, **k: None
    torch.cuda.empty_cache = lambda: None
    torch.cuda.set_device = lambda *a, **k: None
    torch.cuda.device_count = lambda: 1
    torch.cuda.get_rng_state = _get_rng_state
    torch.cuda.set_rng_state = _set_rng_state
    torch.cuda.manual_seed = _manual_seed
    torch.cuda.manual_seed_all = _manual_seed
    mrandom._get_cuda_rng_state = _get_rng_state
    mrandom._set_cuda_rng_state = _set_rng_state
    _installed = True


@contextlib.contextmanager
def cpu_mode() -> Iterator[None]:
    """Install the patches and redirect CUDA requests to CPU on the calling thread."""
    install()
    with CpuRedirectMode():
        yield
