"""What the executor needs from a cluster back-end: read the state back, apply one round of actions."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from gpuplan.models.cluster import Cluster
from gpuplan.models.plan import Action, Assignment
from gpuplan.planner.validation.occupancy import Holding, Key


@dataclass(frozen=True)
class Observation:
    """The cluster as the back-end sees it now: nodes still present with their MIG layouts, and what runs."""

    now: datetime
    cluster: Cluster
    running: Mapping[Key, Holding]
    started: Mapping[Key, datetime] = field(default_factory=dict)


@dataclass(frozen=True)
class Outcome:
    """What happened to one action: ``ok``, or the reason it failed."""

    action: Action
    ok: bool
    reason: str = ""


class Backend(Protocol):
    """A cluster the executor drives: the in-memory simulator, or an exporter of what a real one applies."""

    def observe(self) -> Observation:
        """The current state (read back after every round)."""
        ...

    def apply(self, actions: Sequence[Action], targets: Mapping[Key, Assignment]) -> list[Outcome]:
        """Apply one round: stops, MIG destroys, MIG creates, then starts; each action succeeds or fails
        on its own, and a failed step never leaves a replica placed twice."""
        ...
