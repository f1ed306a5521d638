"""Device kinds the planner can place workers on.

API: :class:`DeviceKind` (frozen) and :data:`DEVICE_KINDS`, a read-only registry keyed by name, with
:func:`get_device_kind`. Bandwidths are *per device, one direction*, in bytes/s; memory in bytes; peak
in FLOP/s for dense 16-bit matmuls (what Megatron trains in). Each figure cites its datasheet. The
throughput model multiplies peak and bandwidths by calibrated efficiency factors, so these are
nominal upper bounds, not predictions.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

GB: Final = 1e9
GIB: Final = 1024**3


@dataclass(frozen=True, slots=True)
class DeviceKind:
    """One class of accelerator (or a CPU slot standing in for one)."""

    name: str
    peak_flops: float
    """Dense 16-bit tensor FLOP/s per device."""
    memory_bytes: float
    devices_per_node: int
    intra_node_bandwidth: float
    """Bytes/s per device per direction inside a node (NVLink / shared memory)."""
    inter_node_bandwidth: float
    """Bytes/s per device per direction across nodes (InfiniBand / Ethernet)."""
    memory_overhead_bytes: float = 0.0
    """Memory not available to model state and activations (CUDA context, NCCL buffers, allocator)."""

    def __post_init__(self) -> None:
        if self.peak_flops <= 0 or self.memory_bytes <= 0:
            raise ValueError(f"{self.name}: peak_flops and memory_bytes must be positive")
        if self.devices_per_node < 1:
            raise ValueError(f"{self.name}: devices_per_node must be >= 1")
        if self.intra_node_bandwidth <= 0 or self.inter_node_bandwidth <= 0:
            raise ValueError(f"{self.name}: bandwidths must be positive")


_KINDS = (
    # NVIDIA A100 SXM4 80GB datasheet: 312 TFLOP/s dense BF16, 80 GB HBM2e, NVLink3 600 GB/s total
    # (300 GB/s per direction). DGX A100: 8 GPUs and 8x 200 Gb/s HDR InfiniBand -> 25 GB/s per GPU.
    DeviceKind("a100-80g", 312e12, 80 * GB, 8, 300 * GB, 25 * GB, memory_overhead_bytes=3 * GB),
    # Same as above with 40 GB HBM2 (A100 SXM4 40GB datasheet).
    DeviceKind("a100-40g", 312e12, 40 * GB, 8, 300 * GB, 25 * GB, memory_overhead_bytes=3 * GB),
    # NVIDIA H100 SXM5 datasheet: 989 TFLOP/s dense BF16, 80 GB HBM3, NVLink4 900 GB/s total
    # (450 GB/s per direction). DGX H100: 8x 400 Gb/s NDR ConnectX-7 -> 50 GB/s per GPU.
    DeviceKind("h100-80g", 989e12, 80 * GB, 8, 450 * GB, 50 * GB, memory_overhead_bytes=3 * GB),
    # NVIDIA H200 SXM datasheet: same compute and NVLink as H100, 141 GB HBM3e; DGX H200 networking
    # as DGX H100.
    DeviceKind("h200", 989e12, 141 * GB, 8, 450 * GB, 50 * GB, memory_overhead_bytes=3 * GB),
    # A CPU slot for local runs (docs/ARCHITECTURE.md §2): one worker, one thread. Nominal peak of one modern
    # x86
    # core: 2 FMA units x 8 fp32 lanes x 2 FLOP x ~3 GHz ~= 96 GFLOP/s; PyTorch on one thread reaches a
    # fraction of that, which calibration captures. 4 GiB per slot; gloo over loopback ~1 GB/s
    # (shared memory) and ~0.5 GB/s between machines. Four slots per node agent by default.
    DeviceKind("cpu-slot", 96e9, 4 * GIB, 4, 1 * GB, 0.5 * GB, memory_overhead_bytes=0.5 * GIB),
)

DEVICE_KINDS: Final = MappingProxyType({k.name: k for k in _KINDS})
"""Registry of known device kinds by name (read-only)."""


def get_device_kind(name: str) -> DeviceKind:
    """Return the registered kind called ``name``; raise ``KeyError`` naming the known kinds."""
    try:
        return DEVICE_KINDS[name]
    except KeyError:
        raise KeyError(f"unknown device kind {name!r}; known: {sorted(DEVICE_KINDS)}") from None
