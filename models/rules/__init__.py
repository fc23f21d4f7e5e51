"""The rulebook: each policy and per-GPU rule's predicate and charge, written once.

Every part that keeps or checks a rule calls these functions: the exact formulation and the placement
kernel (with ``solvers.problem``'s integers), the bounds and the decompositions of the solvers, and the
validator (with the data model's workloads and nodes). They are written over plain values (team, tier,
preemptible, pool, GPU model name, a shape's kind, milli and MIG profile, a
:class:`~gpuplan.models.hardware.GpuModelSpec`), so that neither side adapts a copy of the other's.

- :mod:`~gpuplan.models.rules.gpu`: what the uses of one GPU may be together (exclusivity, milli
  capacity, MIG use and mixing, sharing mode and time-sliced replicas, GPU memory).
- :mod:`~gpuplan.models.rules.quota`: the quota unit of a catalog, what one GPU use charges, which
  quota charges a replica on which GPU, and a quota's limit.
- :mod:`~gpuplan.models.rules.isolation`: which teams a node's team-exclusive rules allow, and which
  users may share a GPU.
- :mod:`~gpuplan.models.rules.disruption`: who may be preempted or moved, the higher-tier rule, and
  what counts against the disruption budget.
- :mod:`~gpuplan.models.rules.runtime`: the minimum runtime before a running replica is stopped.
- :mod:`~gpuplan.models.rules.gang`: gangs placed whole, and a gang that runs only in part now.
- :mod:`~gpuplan.models.rules.fairness`: fair share: a team's decayed usage, its standing against its
  share, and the factor its waiting replicas' queue penalty is weighed by.

The capacity of one GPU in milli-GPU is :data:`gpuplan.models.hardware.MILLI_PER_GPU`, defined once.
"""
