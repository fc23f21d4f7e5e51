"""The names and numbers of a Kubernetes GPU fleet: the NVIDIA GPU Operator's labels and resources, KAI
Scheduler's and HAMi's share conventions, Kubernetes resource quantities, and MIG profile names as
Kubernetes spells them."""

from __future__ import annotations

import re
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal
from typing import Any

from gpuplan.models.base import InputError

GPU = "nvidia.com/gpu"
SHARED = "nvidia.com/gpu.shared"
MIG_PREFIX = "nvidia.com/mig-"
PRODUCT = "nvidia.com/gpu.product"
COUNT = "nvidia.com/gpu.count"
MEMORY = "nvidia.com/gpu.memory"
MACHINE = "nvidia.com/gpu.machine"
MIG_CONFIG = "nvidia.com/mig.config"
#: The MIG manager's progress on the node's ``nvidia.com/mig.config`` (``pending``, ``rebooting``,
#: ``success``, ``failed``): only ``success`` (or no label) says the named layout is the GPUs' own.
MIG_CONFIG_STATE = "nvidia.com/mig.config.state"
MIG_STRATEGY = "nvidia.com/mig.strategy"
#: The Node annotation gpuplan's export writes beside ``nvidia.com/mig.config``: the mig-parted config it
#: named there (JSON ``{"name": ..., "entries": [...]}``), so that a re-import knows which GPUs are in MIG
#: mode without the GPU Operator's ConfigMap.
GPUPLAN_MIG_CONFIG = "gpuplan.io/mig-config"
#: The cluster-file node label the importer sets when a node's MIG layout is a guess (``guessed``): the
#: Kubernetes export then never writes a MIG configuration for that node.
MIG_LAYOUT_LABEL = "gpuplan.io/mig-layout"
GUESSED = "guessed"
SHARING = "nvidia.com/gpu.sharing-strategy"
REPLICAS = "nvidia.com/gpu.replicas"
#: KAI Scheduler's pod annotations for a share of one GPU: its memory in MiB, or a fraction of the GPU.
KAI_GPU_MEMORY = "gpu-memory"
KAI_GPU_FRACTION = "gpu-fraction"
#: HAMi's resources for a share of one GPU (per ``nvidia.com/gpu`` device): memory in MiB, memory in
#: percent of the GPU, compute in percent; and the node annotation of HAMi's device plugin, whose
#: ``nvidia.com/gpu`` counts virtual GPUs (``deviceSplitCount`` per GPU), not GPUs.
HAMI_GPU_MEMORY = "nvidia.com/gpumem"
HAMI_GPU_MEMORY_PERCENT = "nvidia.com/gpumem-percentage"
HAMI_GPU_CORES = "nvidia.com/gpucores"
HAMI_REGISTER = "hami.io/node-nvidia-register"

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    suffix: Decimal(f"1e{exp}")
    for suffix, exp in (("n", -9), ("u", -6), ("m", -3), ("", 0), ("k", 3), ("M", 6), ("G", 9), ("T", 12),
                        ("P", 15), ("E", 18))
}  # fmt: skip
_QUANTITY = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?)$")
_MIB = Decimal(2**20)
#: The device plugin's suffix on ``nvidia.com/gpu.product`` under the MIG ``single`` strategy.
_MIG_SUFFIX = re.compile(r"-MIG-([\w.+-]+)$")


def quantity(text: Any, where: str) -> Decimal:
    """A Kubernetes resource quantity (``64``, ``63500m``, ``512Mi``, ``1e3``) as a plain number."""
    m = _QUANTITY.match(str(text).strip())
    if m is None:
        raise InputError(f"{where}: '{text}' is not a Kubernetes quantity")
    number, exponent, suffix = m.groups()
    value = Decimal(number)
    if exponent:
        return value.scaleb(int(exponent[1:]))
    if suffix in _BINARY:
        return value * _BINARY[suffix]
    return value * _DECIMAL[suffix or ""]


def cpu_milli(cores: Decimal, *, up: bool = True) -> int:
    """CPU cores as milli-CPU (rounded up for requests, down for capacities)."""
    return int((cores * 1000).to_integral_value(ROUND_CEILING if up else ROUND_FLOOR))


def memory_mib(size: Decimal, *, up: bool = True) -> int:
    """Bytes as MiB (rounded up for requests, down for capacities)."""
    return int((size / _MIB).to_integral_value(ROUND_CEILING if up else ROUND_FLOOR))


def _whole(value: Decimal, where: str) -> int:
    """A device count (a whole, non-negative number)."""
    if value < 0 or value != value.to_integral_value():
        raise InputError(f"{where}: '{value}' is not a whole number of devices")
    return int(value)


def _count(text: Any, where: str) -> int:
    """A device count given as a quantity."""
    return _whole(quantity(text, where), where)


def _mig_profile(name: str) -> str:
    """A MIG profile as the catalog names it, from a device plugin resource, product suffix or MIG manager
    configuration, which spell the ``+`` of a profile with extensions as ``.`` (``1g.10gb.me`` is
    ``1g.10gb+me``: Kubernetes names have no ``+``)."""
    return re.sub(r"^(\d+g\.\d+gb)\.", r"\1+", name)


def mig_resource(profile: str) -> str:
    """The device plugin's resource for a MIG profile (``1g.10gb+me`` is ``nvidia.com/mig-1g.10gb.me``)."""
    return MIG_PREFIX + profile.replace("+", ".")


def _product_base(product: str) -> str:
    """A GFD product label without the device plugin's ``-SHARED`` and ``-MIG-<profile>`` suffixes."""
    return _MIG_SUFFIX.sub("", re.sub(r"-SHARED$", "", product.strip()))
