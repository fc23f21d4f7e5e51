"""Import of a Kubernetes GPU fleet's real state (``kubectl get nodes -o json`` and ``kubectl get pods -A
-o json``, NVIDIA GPU Operator conventions) into a gpuplan cluster and workload list, one module per job:
:mod:`.dump` reads the dumps and writes the cluster file and workloads CSV (:func:`read_state`,
:func:`write_state`); :mod:`.conventions` holds the Operator's labels and resources and Kubernetes
quantities; :mod:`.nodes` turns node items into cluster entries, with :mod:`.mig_layouts` for their MIG
layouts and :mod:`.topology` for ``--topology``; :mod:`.pods` turns pods into workloads, with
:mod:`.shapes` for what GPU each asks for and :mod:`.placements` for the GPUs running pods hold;
:mod:`.tiers` maps priority classes to tiers (over the cluster's PriorityClasses when given);
:mod:`.budgets` turns PodDisruptionBudgets into pods kept in place; :mod:`.mig_configs` reads the MIG
manager's configurations (device truth for MIG layouts); :mod:`.audit` notes every pod left out and every
doubtful resource, and :mod:`.summary` holds the result (:class:`KubernetesState`) and its report.
Names with a leading underscore are private to this package; callers import from the package itself.
"""

from gpuplan.planner.io.importers.kubernetes.audit import (
    BOUND_NO_GPU,
    FINISHED,
    ON_UNAVAILABLE,
    PENDING_NO_GPU,
    TERMINATING,
    UNKNOWN_PROFILE,
    UNKNOWN_RESOURCE,
    UNREADABLE,
    LeftOut,
)
from gpuplan.planner.io.importers.kubernetes.budgets import DisruptionBudget, load_pdbs
from gpuplan.planner.io.importers.kubernetes.conventions import mig_resource, quantity
from gpuplan.planner.io.importers.kubernetes.dump import (
    MAPPING_FILE,
    load_mapping,
    read_state,
    read_state_dir,
    write_state,
)
from gpuplan.planner.io.importers.kubernetes.mig_configs import MigPartedConfig, load_mig_parted
from gpuplan.planner.io.importers.kubernetes.placements import load_pod_resources
from gpuplan.planner.io.importers.kubernetes.summary import KubernetesState
from gpuplan.planner.io.importers.kubernetes.tiers import (
    PriorityClass,
    TierChoice,
    TierMap,
    load_priority_classes,
    load_tier_map,
)
from gpuplan.planner.io.importers.kubernetes.topology import load_topologies

__all__ = [
    "BOUND_NO_GPU",
    "FINISHED",
    "ON_UNAVAILABLE",
    "PENDING_NO_GPU",
    "TERMINATING",
    "UNKNOWN_PROFILE",
    "UNKNOWN_RESOURCE",
    "UNREADABLE",
    "MAPPING_FILE",
    "DisruptionBudget",
    "KubernetesState",
    "LeftOut",
    "MigPartedConfig",
    "PriorityClass",
    "TierChoice",
    "TierMap",
    "load_mapping",
    "load_mig_parted",
    "load_pdbs",
    "load_pod_resources",
    "load_priority_classes",
    "load_tier_map",
    "load_topologies",
    "mig_resource",
    "quantity",
    "read_state",
    "read_state_dir",
    "write_state",
]
