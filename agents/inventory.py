"""Device inventory for Hello: GPUs when CUDA is there, else CPU slots standing in for them."""

from __future__ import annotations

import importlib.util

from controlplane.core.protocol import DeviceInfo


def _cuda_devices() -> list[DeviceInfo] | None:
    if importlib.util.find_spec("torch") is None:
        return None
    import torch

    if not torch.cuda.is_available():
        return None
    out = []
    for i in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(i)
        out.append(DeviceInfo(index=i, kind="cuda", name=props.name, memory_bytes=int(props.total_memory)))
    return out


_cache: dict[int, list[DeviceInfo]] = {}


def discover_devices(count: int, probe_cuda: bool = False) -> list[DeviceInfo]:
    """``count`` devices: the first ``count`` GPUs if ``probe_cuda`` and CUDA is present, else CPU slots.

    The agent does not import torch unless asked (sim agents must stay light).
    """
    if count in _cache:
        return _cache[count]
    gpus = _cuda_devices() if probe_cuda else None
    if gpus:
        devices = gpus[:count]
    else:
        try:
            import psutil

            mem = int(psutil.virtual_memory().total // max(count, 1))
        except ImportError:  # pragma: no cover
            mem = 0
        devices = [
            DeviceInfo(index=i, kind="cpu", name=f"cpu-slot-{i}", memory_bytes=mem) for i in range(count)
        ]
    _cache[count] = devices
    return devices
