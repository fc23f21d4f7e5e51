"""Derived values never go stale (issue 42 item 1): a copy of a schema object with changed fields answers
with its own fields, not with values cached from its original.

The capacity check copied each workload with other ``gpu_models`` (``model_copy(update=...)``) while the
copy kept its original's cached ``shapes``, so "verified by placement" placed it without its GPU class.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from functools import cached_property

import gpuplan.models
from gpuplan.models import Cluster, Node, PlanningInput, Workload, default_catalog
from gpuplan.models.base import Strict


def test_a_workload_copied_with_other_gpu_models_has_their_shapes() -> None:
    w = Workload.model_validate({"id": "train", "gpus": 1, "gpu_models": ["H100-80GB"]})
    assert w.shapes[0].gpu_models == ("H100-80GB",)  # cached now
    other = w.model_copy(update={"gpu_models": ("L4-24GB",)})
    assert other.shapes[0].gpu_models == ("L4-24GB",)
    assert w.shapes[0].gpu_models == ("H100-80GB",)


def test_an_input_copied_with_other_workloads_and_nodes_finds_them() -> None:
    node = Node.model_validate(
        {"name": "a", "cpu_milli": 8000, "memory_mib": 65536, "gpus": [{"index": 0, "model": "L4-24GB"}]}
    )
    inp = PlanningInput(cluster=Cluster(nodes=(node,)), workloads=(Workload.model_validate({"id": "x"}),))
    assert set(inp.workload_by_id) == {"x"} and set(inp.cluster.node_by_name) == {"a"}
    other = inp.model_copy(update={"workloads": (Workload.model_validate({"id": "y"}),)})
    assert set(other.workload_by_id) == {"y"}
    moved = node.model_copy(update={"name": "b"})
    cluster = inp.cluster.model_copy(update={"nodes": (moved,)})
    assert set(cluster.node_by_name) == {"b"}
    assert set(node.model_copy(update={"gpus": ()}).gpu_by_index) == set()
    catalog = default_catalog()
    assert catalog.has_model("L4-24GB")
    assert not catalog.model_copy(update={"models": ()}).has_model("L4-24GB")


def test_every_cached_value_of_the_models_is_dropped_by_a_copy() -> None:
    """Every ``cached_property`` of every schema class in ``gpuplan.models`` (found by walking the
    package, so a new one is covered) is a class the copy rule applies to: a ``Strict`` subclass."""
    found: list[str] = []
    for info in pkgutil.walk_packages(gpuplan.models.__path__, "gpuplan.models."):
        module = importlib.import_module(info.name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ != info.name:
                continue
            for name, value in vars(cls).items():
                if isinstance(value, cached_property):
                    assert issubclass(cls, Strict), f"{cls.__qualname__}.{name} is cached outside Strict"
                    found.append(f"{cls.__qualname__}.{name}")
    assert {"Workload.shapes", "PlanningInput.workload_by_id", "Node.gpu_by_index"} <= set(found)
