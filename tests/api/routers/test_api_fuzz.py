"""Schemathesis over the OpenAPI document of a real server: no request may end in a 500 or break the spec.

Bounded: a few examples per operation, the same ones on every run and machine (a fixed seed), so that
CI fails only when the service or its schema changes. Two checks are left out because they test the
schema language, not the service: pydantic's lax mode accepts ``"3"`` for an integer
(``negative_data_rejection``), and input that fits the schema may still fail the cross-checks the schema
cannot express, with a 422 naming the field (``positive_data_acceptance``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import checks

from tests._api import ADMIN, Server, auth, drain, live, tiny_body

__all__ = ["live"]


@pytest.fixture(scope="module", autouse=True)
def _cancel_left_jobs(live: Server) -> Iterator[None]:
    """Generated jobs must not hold the shared server's queue for the tests after these."""
    yield
    drain(live)


#: Seed of every generated case. ``derandomize`` alone is not enough: under Hypothesis' ``ci`` profile
#: with an example database configured, schemathesis drops it when merging the settings and seeds each
#: operation from a fresh random number instead.
SEED = 20261129


@pytest.fixture(scope="module")
def api_schema(live: Server) -> schemathesis.BaseSchema:
    """The live server's OpenAPI document (fuzzing phase only: the coverage phase sends hundreds of cases),
    with deterministic generation from a fixed seed."""
    loaded = schemathesis.openapi.from_url(f"{live.url}/openapi.json")
    loaded.config.phases.coverage.enabled = False
    loaded.config.generation.update(deterministic=True)
    loaded.config.seed = SEED
    return loaded


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
@settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_openapi_fuzz(case: schemathesis.Case[Any], live: Server) -> None:
    """Every generated request gets a documented answer, never a server error."""
    case.call_and_validate(
        base_url=live.url,
        headers=auth(ADMIN),
        timeout=30,
        excluded_checks=[checks.negative_data_rejection, checks.positive_data_acceptance],
    )


#: Where a generated value goes in the tiny body: names, numbers and sizes that once gave a 500, an
#: invalid plan or a null in the stored input.
_TEXT_FIELDS = (
    ("workloads", 0, "id"),
    ("workloads", 1, "team"),
    ("workloads", 2, "tier"),
    ("workloads", 0, "gang"),
    ("cluster", "nodes", 0, "name"),
    ("cluster", "nodes", 1, "pool"),
    ("team",),
)
_NUMBER_FIELDS = (
    ("workloads", 0, "duration_s"),
    ("workloads", 1, "replicas"),
    ("workloads", 2, "gpu_milli"),
    ("options", "time_limit_s"),
    ("policy", "quotas", 0, "gpus"),
    ("policy", "tiers", 0, "target_wait_s"),
)


def _put(body: dict[str, Any], path: tuple[str | int, ...], value: Any) -> dict[str, Any]:
    node: Any = body
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return body


def _fuzz_body() -> dict[str, Any]:
    body = tiny_body(solver="first-fit")
    body["policy"] = {
        "tiers": [{"name": "standard", "weight": 3}, {"name": "background", "weight": 1}],
        "quotas": [{"team": "ml", "gpus": 4}],
    }
    body["workloads"][1]["tier"] = "standard"
    return body


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(
    text=st.tuples(st.sampled_from(_TEXT_FIELDS), st.text(max_size=260)),
    number=st.tuples(
        st.sampled_from(_NUMBER_FIELDS),
        st.floats() | st.integers(min_value=-(2**70), max_value=2**70),
    ),
)
def test_fuzzed_names_and_numbers_are_refused_with_the_field(
    live: Server, text: tuple[tuple[str | int, ...], str], number: tuple[tuple[str | int, ...], float]
) -> None:
    """Any text in a name and any number (``NaN``, ``Infinity``, huge integers) in a size, quota or
    duration: accepted, or refused naming the field or the limit; never a 500."""
    body = _put(_put(_fuzz_body(), *text), *number)
    with live.client(ADMIN) as c:
        r = c.post("/v1/plans", content=json.dumps(body), headers={"content-type": "application/json"})
        assert r.status_code in (202, 413, 422, 429), r.text
        if r.status_code == 202:
            c.delete(f"/v1/plans/{r.json()['id']}")
    if r.status_code == 422:
        detail = r.json()["detail"]
        assert detail[0]["loc"][0] == "body" and detail[0]["msg"], detail
    elif r.status_code != 202:
        assert r.json()["limit"], r.text
