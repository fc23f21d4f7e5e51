"""Plan history: every replanning run's plan, its inputs and provenance, in SQLite or PostgreSQL.

Each run is one row written in one transaction, so a run killed at any point either stored its whole
plan or nothing, and the previous plan stays the latest complete one. Rows are never updated.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import Column, DateTime, Engine, Integer, MetaData, String, Table, Text, insert, select

from gpuplan.models.plan import GpuUse, Plan
from gpuplan.models.problem import PlanningInput
from gpuplan.planner.actions import where
from gpuplan.planner.db import make_engine
from gpuplan.planner.timeline import predicted_waits

metadata = MetaData()

#: One row per stored plan.
plans = Table(
    "gpuplan_plan_history",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("planned_for", String(64), nullable=False),
    Column("inputs_sha256", String(64), nullable=False),
    Column("solver", String(64), nullable=False),
    Column("status", String(32), nullable=False),
    Column("seed", Integer, nullable=False),
    Column("plan_json", Text, nullable=False),
    Column("inputs_json", Text, nullable=False),
    Column("provenance_json", Text, nullable=False),
)


@dataclass(frozen=True)
class StoredPlan:
    """A plan read back from the history, with the input it was made from."""

    id: int
    created_at: datetime
    plan: Plan
    inputs: PlanningInput


class PlanHistory:
    """The plan history in a SQLite file (default ``gpuplan.db``) or a PostgreSQL database."""

    def __init__(self, target: str | None = None, engine: Engine | None = None) -> None:
        self.engine = engine or make_engine(target)
        metadata.create_all(self.engine)

    def save(self, plan: Plan, inputs: PlanningInput) -> int:
        """Store a plan with its inputs and provenance in one transaction; return its id."""
        row = {
            "created_at": datetime.now(UTC),
            "planned_for": str(plan.provenance.get("now", "")),
            "inputs_sha256": str(plan.provenance.get("inputs_sha256", "")),
            "solver": plan.solver.name,
            "status": plan.status.value,
            "seed": int(plan.provenance.get("seed", 0)),
            "plan_json": plan.model_dump_json(by_alias=True),
            "inputs_json": inputs.model_dump_json(),
            "provenance_json": json.dumps(plan.provenance, sort_keys=True),
        }
        with self.engine.begin() as conn:
            result = conn.execute(insert(plans).values(**row))
            key = result.inserted_primary_key
        assert key is not None
        return int(key[0])

    def latest(self) -> StoredPlan | None:
        """The most recent complete plan, if any."""
        with self.engine.connect() as conn:
            row = conn.execute(select(plans).order_by(plans.c.id.desc()).limit(1)).mappings().first()
        if row is None:
            return None
        return StoredPlan(
            id=int(row["id"]),
            created_at=row["created_at"],
            plan=Plan.model_validate_json(row["plan_json"]),
            inputs=PlanningInput.model_validate_json(row["inputs_json"]),
        )

    def count(self) -> int:
        """Number of stored plans."""
        with self.engine.connect() as conn:
            return len(conn.execute(select(plans.c.id)).all())


@dataclass(frozen=True)
class PlanDiff:
    """What changed from one plan to the next."""

    moves: tuple[str, ...]
    new_starts: tuple[str, ...]
    stops: tuple[str, ...]
    wait_changes: tuple[str, ...]

    def render(self) -> str:
        """Human-readable lines (one section per kind of change)."""
        out = [
            f"{len(self.moves)} move(s), {len(self.new_starts)} new start(s), {len(self.stops)} stop(s), "
            f"{len(self.wait_changes)} predicted wait(s) changed"
        ]
        for title, lines in (
            ("moves", self.moves),
            ("new starts", self.new_starts),
            ("stops", self.stops),
            ("predicted waits", self.wait_changes),
        ):
            if lines:
                out.append(f"{title}:")
                out.extend(f"  {line}" for line in lines)
        return "\n".join(out)


def _where(plan: Plan) -> dict[tuple[str, int], str]:
    return {(a.workload, a.replica): where(a.node, a.gpus) for a in plan.assignments}


def _wait(seconds: float | None) -> str:
    return "unknown" if seconds is None else f"{seconds / 60:.0f} min"


def plan_diff(previous: Plan | None, current: Plan, running: PlanningInput | None = None) -> PlanDiff:
    """Moves, new starts, stops and changed predicted waits from ``previous`` to ``current``; without a
    previous plan, from what ``running`` says runs now."""
    if previous is not None:
        before = _where(previous)
    elif running is not None:
        before = {
            (w.id, r): where(p.node, tuple(GpuUse(**g.model_dump()) for g in p.gpus))
            for w in running.workloads
            for r, p in enumerate(w.running_on)
        }
    else:
        before = {}
    after = _where(current)
    moves = [
        f"{k[0]}#{k[1]}: {before[k]} -> {v}"
        for k, v in sorted(after.items())
        if k in before and before[k] != v
    ]
    starts = [f"{k[0]}#{k[1]}: {v}" for k, v in sorted(after.items()) if k not in before]
    stops = [f"{k[0]}#{k[1]}: was {v}" for k, v in sorted(before.items()) if k not in after]
    changes: list[str] = []
    if previous is not None:
        old_now = datetime.fromisoformat(str(previous.provenance.get("now")))
        new_now = datetime.fromisoformat(str(current.provenance.get("now")))
        old = predicted_waits(previous, old_now)
        new = predicted_waits(current, new_now)
        for k in sorted(new):
            if k not in old:
                continue
            # Compare predicted start times, not waits: time passing alone changes no prediction.
            a = None if old[k] is None else old_now.timestamp() + (old[k] or 0.0)
            b = None if new[k] is None else new_now.timestamp() + (new[k] or 0.0)
            if a != b:
                changes.append(f"{k[0]}#{k[1]}: {_wait(old[k])} -> {_wait(new[k])} from now")
    return PlanDiff(tuple(moves), tuple(starts), tuple(stops), tuple(changes))
