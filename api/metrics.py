"""Prometheus metrics of one app: requests, solve durations, queue depth, job outcomes, and the fleet
gauges of the latest plan (``planner.presentation.fleet_metrics``)."""

from __future__ import annotations

import logging
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from gpuplan.models.inputs import PlanningInput
from gpuplan.models.plan import Plan
from gpuplan.planner.presentation.fleet_metrics import FleetMetrics, fleet_metrics

log = logging.getLogger(__name__)

#: The fleet gauges: name, help text and labels.
FLEET_GAUGES: dict[str, tuple[str, tuple[str, ...]]] = {
    "gpuplan_allocated_gpu_ratio": ("Share of the fleet's GPUs the latest plan allocates", ()),
    "gpuplan_pool_allocated_gpu_ratio": ("Share of a pool's GPUs the latest plan allocates", ("pool",)),
    "gpuplan_pool_gpus": ("GPUs of a pool in the latest plan's cluster", ("pool",)),
    "gpuplan_fragmentation_rate": (
        "Share of free GPU capacity the latest plan's demand mix cannot use (FGD)",
        (),
    ),
    "gpuplan_waiting_replicas": ("Replicas the latest plan leaves waiting", ("tier", "team")),
    "gpuplan_quota_used_gpus": ("GPU-equivalents a team's placed replicas use in the latest plan", ("team",)),
    "gpuplan_quota_limit_gpus": ("A team's fleet-wide quota in GPU-equivalents", ("team",)),
    "gpuplan_predicted_wait_p95_seconds": (
        "95th percentile of the predicted waits of a tier's waiting replicas (+Inf: unknown)",
        ("tier",),
    ),
}


#: Teams shown by name in a team gauge: the largest; the others are summed under :data:`OTHER`.
MAX_TEAMS = 20
#: The label of the teams beyond :data:`MAX_TEAMS`.
OTHER = "(other)"


def bounded(values: dict[str, float], top: int = MAX_TEAMS) -> dict[str, float]:
    """``values`` by team with at most ``top`` teams by name (the largest values, ties by name) and the
    rest summed under :data:`OTHER`, so that a plan of many teams gives a bounded number of series."""
    if len(values) <= top:
        return values
    ranked = sorted(values, key=lambda t: (-values[t], t))
    kept = {t: values[t] for t in ranked[:top]}
    return {**kept, OTHER: sum(values[t] for t in ranked[top:])}


def _bounded_waiting(waiting: dict[tuple[str, str], int]) -> dict[tuple[str, str], float]:
    """Waiting replicas by tier and team, the teams beyond the :data:`MAX_TEAMS` that wait most summed
    under :data:`OTHER` per tier."""
    by_team: dict[str, float] = {}
    for (_, team), n in waiting.items():
        by_team[team] = by_team.get(team, 0.0) + n
    shown = set(bounded(by_team)) - {OTHER}
    out: dict[tuple[str, str], float] = {}
    for (tier, team), n in waiting.items():
        key = (tier, team if team in shown else OTHER)
        out[key] = out.get(key, 0.0) + n
    return out


def read_fleet(plan_json: str, input_json: str) -> FleetMetrics | None:
    """The fleet figures of the plan in ``plan_json`` (made from ``input_json``); ``None``, logged, for a
    plan that cannot be read (stored by another gpuplan version). Parses both: call it off the loop."""
    try:
        plan, inp = Plan.model_validate_json(plan_json), PlanningInput.model_validate_json(input_json)
        return fleet_metrics(plan, inp)
    except (KeyError, ValueError) as exc:
        log.warning("a plan the fleet gauges cannot read is not shown (%s)", exc)
        return None


class FleetGauges(Collector):
    """The fleet gauges of the latest plan (:attr:`latest`); nothing before the first plan. Each scrape
    reads them from one :class:`FleetMetrics`, so that it never mixes two plans. Team labels are bounded
    (:func:`bounded`)."""

    def __init__(self) -> None:
        self.latest: FleetMetrics | None = None

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """The gauges of :attr:`latest`."""
        m = self.latest
        if m is None:
            return
        Samples = list[tuple[tuple[str, ...], float]]
        fragmentation: Samples = [] if m.fragmentation_rate is None else [((), m.fragmentation_rate)]
        values: dict[str, Samples] = {
            "gpuplan_allocated_gpu_ratio": [((), m.allocated_gpu_ratio)],
            "gpuplan_pool_allocated_gpu_ratio": [((p,), u.ratio) for p, u in m.pools.items()],
            "gpuplan_pool_gpus": [((p,), float(u.gpus)) for p, u in m.pools.items()],
            "gpuplan_fragmentation_rate": fragmentation,
            "gpuplan_waiting_replicas": [(key, n) for key, n in _bounded_waiting(m.waiting).items()],
            "gpuplan_quota_used_gpus": [((t,), v) for t, v in bounded(m.team_gpus).items()],
            "gpuplan_quota_limit_gpus": [((t,), v) for t, v in bounded(m.team_quota_gpus).items()],
            "gpuplan_predicted_wait_p95_seconds": [((t,), v) for t, v in m.predicted_wait_p95_s.items()],
        }
        for name, (text, labels) in FLEET_GAUGES.items():
            family = GaugeMetricFamily(name, text, labels=list(labels))
            for label_values, value in values[name]:
                family.add_metric(list(label_values), value)
            yield family


class ApiMetrics:
    """The app's collectors, in a registry of their own (several apps may live in one process)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "gpuplan_http_requests",
            "HTTP requests by method, route and status code",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.request_seconds = Histogram(
            "gpuplan_http_request_duration_seconds",
            "HTTP request latency by method and route",
            ["method", "route"],
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=self.registry,
        )
        self.solve_seconds = Histogram(
            "gpuplan_solve_duration_seconds",
            "Wall time of finished solves by solver",
            ["solver"],
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300),
            registry=self.registry,
        )
        self.queue_depth = Gauge(
            "gpuplan_queue_depth",
            "Jobs waiting for a solver process: queued for every server, and explanations waiting here",
            registry=self.registry,
        )
        self.running = Gauge(
            "gpuplan_solves_running", "Jobs being solved now by this server", registry=self.registry
        )
        self.jobs_finished = Counter(
            "gpuplan_jobs_finished",
            "Jobs that ended, by job status and plan status",
            ["status", "plan_status"],
            registry=self.registry,
        )
        self.jobs_by_status = Gauge(
            "gpuplan_jobs", "Stored jobs by status", ["status"], registry=self.registry
        )
        self.jobs_submitted = Counter(
            "gpuplan_jobs_submitted", "Jobs accepted for solving", registry=self.registry
        )
        self.rejected = Counter(
            "gpuplan_limit_rejections", "Requests refused by a limit", ["limit"], registry=self.registry
        )
        self.fleet = FleetGauges()
        self.registry.register(self.fleet)
