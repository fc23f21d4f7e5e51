"""Service settings from the environment (prefix ``GPUPLAN_``): database, API keys with roles, limits."""

from __future__ import annotations

import os

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from gpuplan.api.auth import parse_role
from gpuplan.models.base import MAX_GPUS_PER_NODE, MAX_NAME_LENGTH


class Limits(BaseSettings):
    """What one request may ask for; beyond these the service answers 413 or 429 naming the limit (422
    naming the field for a name longer than ``max_name_length``).

    The models hold the hard caps that apply everywhere (the command line too): ``max_gpus_per_node``
    and ``max_name_length`` may only tighten them.
    """

    model_config = SettingsConfigDict(env_prefix="GPUPLAN_LIMIT_", extra="ignore")

    max_body_bytes: int = Field(default=8 * 1024 * 1024, ge=1024)
    max_nodes: int = Field(default=2000, ge=1)
    max_workloads: int = Field(default=20000, ge=1)
    max_replicas: int = Field(default=10_000, ge=1, description="replicas of one workload")
    max_total_replicas: int = Field(default=100_000, ge=1, description="replicas of all workloads")
    max_gpus_per_node: int = Field(default=256, ge=1, le=MAX_GPUS_PER_NODE)
    max_name_length: int = Field(default=MAX_NAME_LENGTH, ge=1, le=MAX_NAME_LENGTH)
    max_time_limit_s: float = Field(default=300.0, gt=0, allow_inf_nan=False)
    max_replicas_per_second: int = Field(
        default=2000,
        ge=1,
        description="replicas a request may have per second of its time limit (else 413: it would overrun)",
    )
    max_active_jobs: int = Field(default=64, ge=1)
    rate_per_minute: int = Field(
        default=1200, ge=0, description="calls a minute per API key, on average (0: no limit)"
    )
    rate_burst: int = Field(default=200, ge=1, description="calls per API key at once, beyond the rate")
    max_read_jobs: int = Field(
        default=2, ge=1, description="explanations queued or running at once (apart from max_active_jobs)"
    )
    max_parsing: int = Field(
        default=2, ge=1, description="bodies of large_body_bytes or more parsed at once (else 503)"
    )
    large_body_bytes: int = Field(
        default=1024 * 1024, ge=0, description="a body this large counts in max_parsing"
    )
    body_timeout_s: float = Field(
        default=30.0, gt=0, allow_inf_nan=False, description="seconds a client may pause while sending a body"
    )
    max_connections: int = Field(
        default=1000, ge=1, description="open connections and requests at once; beyond them 503"
    )
    header_timeout_s: float = Field(
        default=10.0,
        gt=0,
        le=3600,
        allow_inf_nan=False,
        description=(
            "seconds a connection may take to send a request's line and headers, from its opening or "
            "from the end of its last answer; then it is closed"
        ),
    )
    auth_failures_per_minute: int = Field(
        default=120, ge=1, description="requests with an unknown key a minute per client address"
    )
    auth_failure_burst: int = Field(default=100, ge=1, description="unknown keys per client address at once")


class Settings(BaseSettings):
    """Settings of ``gpuplan serve``.

    ``api_keys`` maps a key to a role (``admin``, ``planner`` or ``viewer:<team>``); more keys live in the
    database, made with ``gpuplan keys create``. With none configured only health and metrics
    are served.
    """

    model_config = SettingsConfigDict(env_prefix="GPUPLAN_", extra="ignore")

    database: str = "gpuplan.db"
    api_keys: dict[str, str] = Field(default_factory=dict)
    metrics_key: str | None = Field(
        default=None, min_length=16, description="with it, /metrics asks for this key (Bearer or X-API-Key)"
    )
    solver_processes: int = Field(
        default_factory=lambda: max(1, os.cpu_count() or 1),
        ge=0,
        le=64,
        description="solver processes of this server (0: HTTP only, on PostgreSQL, as `serve --no-worker`)",
    )
    prestart_solvers: bool = Field(
        default=True, description="start the solver processes with the server (else at their first job)"
    )
    solver_threads: int = Field(default=1, ge=1, le=64)
    default_time_limit_s: float = Field(default=10.0, gt=0)
    solve_grace_s: float = Field(default=30.0, ge=0)
    limits: Limits = Field(default_factory=Limits)
    lease_seconds: float = Field(
        default=30.0,
        ge=1,
        le=3600,
        description="lease of a running job: another server runs it again when its holder stops renewing it",
    )
    max_lease_expiries: int = Field(
        default=3, ge=1, le=100, description="expired leases after which a job fails for good (poison job)"
    )
    database_timeout_s: float = Field(
        default=5.0,
        gt=0,
        le=600,
        allow_inf_nan=False,
        description=(
            "seconds the server waits for the database (to connect, for a statement, for a lock or a "
            "pooled connection) before it counts it as an outage: 503 with Retry-After"
        ),
    )
    solver_memory_mib: int = Field(
        default=4096,
        ge=256,
        description="address-space cap of each solver process (MiB); a job beyond it fails",
    )

    @field_validator("api_keys")
    @classmethod
    def _roles(cls, keys: dict[str, str]) -> dict[str, str]:
        for key, role in keys.items():
            if len(key) < 16:
                raise ValueError("an API key must have at least 16 characters")
            parse_role(role)
        return keys
