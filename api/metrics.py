"""Prometheus metrics of one app: requests, solve durations, queue depth and job outcomes."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


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
            "gpuplan_queue_depth", "Jobs waiting for a solver process", registry=self.registry
        )
        self.running = Gauge("gpuplan_solves_running", "Jobs being solved now", registry=self.registry)
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
