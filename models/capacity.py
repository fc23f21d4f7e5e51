"""Capacity planning: purchasable node types, what-if scenarios and capacity-gap results."""

from __future__ import annotations

import math
from collections import Counter
from typing import Annotated, Any

from pydantic import Field, ValidationInfo, model_validator

from gpuplan.models.base import MAX_GPUS_PER_NODE, Name, Strict
from gpuplan.models.cluster import catalog_from

#: Largest price of one node: finite, and far beyond any server.
MAX_PRICE = 1e12
#: Largest demand growth factor.
MAX_GROWTH = 1e6

#: A growth factor: finite, not negative.
_Factor = Annotated[float, Field(ge=0, le=MAX_GROWTH, allow_inf_nan=False)]


class NodeType(Strict):
    """A server that can be bought: GPU model and count, reference topology, CPU, memory, price.

    ``gpus`` defaults to the reference topology's GPU count; without a topology the GPUs have no
    NVLink (PCIe only, one NUMA node).
    """

    name: Name = Field(min_length=1)
    gpu_model: str
    gpus: int = Field(default=0, ge=0, le=MAX_GPUS_PER_NODE)
    topology: str | None = None
    cpu_milli: int = Field(ge=0)
    memory_mib: int = Field(ge=0)
    unit_cost: float = Field(ge=0, le=MAX_PRICE, allow_inf_nan=False)
    lead_time_days: int = Field(default=0, ge=0)
    pool: Name | None = None
    labels: dict[Name, Name] = Field(default_factory=dict)
    #: Price of renting one GPU of this type for an hour, no lead time (``None``: not for rent); only
    #: ``capacity-plan`` reads it.
    rent_per_gpu_hour: float | None = Field(default=None, ge=0, le=MAX_PRICE, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _gpus_from_topology(cls, data: Any, info: ValidationInfo) -> Any:
        """A node type with a reference topology and no GPU count gets the topology's count."""
        if not isinstance(data, dict) or not data.get("topology") or data.get("gpus"):
            return data
        try:
            ref = catalog_from(info).topology(str(data["topology"]))
        except KeyError:
            return data
        return {**data, "gpus": len(ref.gpus)}

    @model_validator(mode="after")
    def _known_hardware(self, info: ValidationInfo) -> NodeType:
        catalog = catalog_from(info)
        if not catalog.has_model(self.gpu_model):
            raise ValueError(f"node type '{self.name}' field gpu_model: unknown GPU model '{self.gpu_model}'")
        if self.topology is None:
            if self.gpus < 1:
                raise ValueError(f"node type '{self.name}' field gpus: give a GPU count or a topology")
            return self
        try:
            ref = catalog.topology(self.topology)
        except KeyError as exc:
            raise ValueError(f"node type '{self.name}' field topology: {exc.args[0]}") from None
        if self.gpus != len(ref.gpus):
            raise ValueError(
                f"node type '{self.name}' field gpus: {self.gpus} GPUs but topology "
                f"'{ref.name}' has {len(ref.gpus)}"
            )
        return self


class NodeTypeCatalog(Strict):
    """The purchasable node types, their currency and how purchases are amortised for showback."""

    currency: str = "USD"
    note: str = ""
    #: Whether the prices and lead times are illustrations (the bundled catalog), not quotes: every
    #: output that shows money says so.
    example_prices: bool = False
    amortisation_years: float = Field(default=3.0, gt=0, le=100, allow_inf_nan=False)
    node_types: tuple[NodeType, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique(self) -> NodeTypeCatalog:
        dupes = [n for n, k in Counter(t.name for t in self.node_types).items() if k > 1]
        if dupes:
            raise ValueError(f"node type '{min(dupes)}' appears more than once")
        return self

    def node_type(self, name: str) -> NodeType:
        """The node type called ``name``."""
        for t in self.node_types:
            if t.name == name:
                return t
        raise KeyError(f"unknown node type '{name}' (known: {', '.join(t.name for t in self.node_types)})")


class Growth(Strict):
    """Demand growth factors: replicas multiplied per team and per tier (both apply when both match)."""

    teams: dict[str, _Factor] = Field(default_factory=dict)
    tiers: dict[str, _Factor] = Field(default_factory=dict)


class Scenario(Strict):
    """A what-if: demand growth, another node-type catalog or prices, policy overrides, and workloads
    that may be bought other GPU models than their class (``*``: every workload)."""

    name: str = Field(min_length=1)
    description: str = ""
    growth: Growth = Field(default_factory=Growth)
    catalog: str | None = None
    prices: dict[str, Annotated[float, Field(ge=0, le=MAX_PRICE, allow_inf_nan=False)]] = Field(
        default_factory=dict
    )
    policy: dict[str, Any] = Field(default_factory=dict)
    allow_other_models: tuple[str, ...] = ()


class ScenarioFile(Strict):
    """The scenarios file: a list of scenarios, names unique."""

    scenarios: tuple[Scenario, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique(self) -> ScenarioFile:
        dupes = [n for n, k in Counter(s.name for s in self.scenarios).items() if k > 1]
        if dupes:
            raise ValueError(f"scenario '{min(dupes)}' appears more than once")
        return self


class Served(Strict):
    """Replicas of one workload that a purchase or a re-partition serves, and the GPU-hours they get.

    ``gpu_hours`` is ``gpu_equivalents`` times the workload's ``duration_s`` in hours, or times 24 (one
    day) when the duration is unknown.
    """

    workload: str
    team: str
    tier: str
    replicas: int = Field(ge=1)
    gpu_equivalents: float = Field(default=0.0, ge=0)
    gpu_hours: float = Field(default=0.0, ge=0)


class Purchase(Strict):
    """Nodes of one type to add, what they serve and how much of them stays idle.

    ``unit_cost`` is the price of one node (``cost`` is ``count`` x ``unit_cost``); ``gpus_idle`` is
    ``gpus`` minus the GPU-equivalents the placement check put on these nodes. ``use_note`` says, when
    they serve less than the run's minimum share of their GPUs (``--min-use``), how much they serve and
    what to consider instead; empty otherwise.
    """

    node_type: str
    gpu_model: str = ""
    count: int = Field(ge=1)
    unit_cost: float = Field(default=0.0, ge=0)
    gpus: int = Field(ge=0)
    gpus_idle: float = Field(default=0.0, ge=0)
    mig_gpus: int = Field(default=0, ge=0)
    cost: float = Field(ge=0)
    lead_time_days: int = Field(default=0, ge=0)
    nodes: tuple[str, ...] = ()
    serves: tuple[Served, ...] = ()
    gpu_hours: float = Field(default=0.0, ge=0)
    use_note: str = ""


class Repartition(Strict):
    """The MIG re-partition of one existing GPU (its actions in order) and the waiting replicas the
    capacity it frees serves."""

    node: str
    gpu: int | None = None
    actions: tuple[str, ...] = ()
    serves: tuple[Served, ...] = ()


class ClassMove(Strict):
    """A workload served on another GPU class than its own (only with ``--allow-other-models``)."""

    workload: str
    replicas: int = Field(ge=1)
    from_models: tuple[str, ...]
    to_model: str


class GapLine(Strict):
    """The gap of one tier or team: demand, how it is served, and its share of the additions.

    ``still_unplaced`` counts replicas bought for that the placement check could not place.
    ``gpus_added`` and ``cost`` are its shares (each new node's GPUs and price shared among the replicas
    on it by GPU-equivalents); ``node_share`` its share of the nodes, a fraction; ``nodes_added`` the
    new nodes that hold at least one of its replicas (a node shared by groups counts in each).
    """

    key: str
    replicas: int = Field(ge=0)
    served_by_repartition: int = Field(default=0, ge=0)
    served_by_purchase: int = Field(default=0, ge=0)
    unservable: int = Field(default=0, ge=0)
    still_unplaced: int = Field(default=0, ge=0)
    gpu_equivalents: float = Field(default=0.0, ge=0)
    gpus_added: float = Field(default=0.0, ge=0)
    nodes_added: int = Field(default=0, ge=0)
    node_share: float = Field(default=0.0, ge=0)
    cost: float = Field(default=0.0, ge=0)

    @model_validator(mode="before")
    @classmethod
    def _share_of_old_files(cls, data: Any) -> Any:
        """A gap written before ``node_share`` existed kept the share in ``nodes_added``: it moves there,
        and ``nodes_added`` becomes the fewest nodes that hold it."""
        if not isinstance(data, dict) or "node_share" in data:
            return data
        share = data.get("nodes_added")
        if isinstance(share, float) and not share.is_integer():
            return {**data, "node_share": share, "nodes_added": math.ceil(share)}
        return data


class Unservable(Strict):
    """A replica that no purchasable node type can ever host, with the reason."""

    workload: str
    replica: int = Field(ge=0)
    team: str
    tier: str
    message: str


class CapacityGap(Strict):
    """What to re-partition and buy so that the demand the fleet cannot serve in time is served.

    ``lower_bound`` is a lower bound on the cheapest purchase under which all demand meets its tier
    targets, whatever the placement of the existing fleet: the optimum (or LP bound) of the purchase MILP
    with the fleet's nodes pooled in at no cost and every replica that must run now as demand
    (:mod:`gpuplan.planner.capacity.bound`); ``bound_note`` says in words what it covers. ``gap`` is
    ``(cost - lower_bound) / cost``; ``solver_status`` is ``OPTIMAL`` only when that bound meets the
    cost of a verified purchase (proved for the whole question), else ``FEASIBLE`` (or ``NO_SOLUTION``
    when the purchase MILP found none). ``purchase_lower_bound`` and ``purchase_status`` are those of
    the purchase itself: a bound (and status) for serving only the demand this fleet plan left waiting,
    on new nodes. ``input_replicas`` counts the replicas of the inputs (running and waiting), the demand
    the gap was computed for. ``verified`` says whether the real
    placement solver placed all purchased-for demand on the purchased nodes (the plan passes the
    validator). ``cut_short`` names the phases the time limit stopped before they finished (the
    fleet plan, the re-partition re-plan, the purchase MILP, the placement check, the repair rounds):
    their best result so far is used and ``notes`` say what that means. ``inputs_sha256`` is the digest
    of the planning input the gap was computed for (absent in files written before it was recorded), so
    that a gap is never shown beside a plan of other inputs.
    """

    demand_replicas: int = Field(ge=0)
    served_by_repartition: int = Field(default=0, ge=0)
    served_by_purchase: int = Field(default=0, ge=0)
    repartition_actions: tuple[str, ...] = ()
    purchases: tuple[Purchase, ...] = ()
    nodes_added: int = Field(default=0, ge=0)
    gpus_added: int = Field(default=0, ge=0)
    cost: float = Field(default=0.0, ge=0)
    currency: str = "USD"
    lower_bound: float = Field(default=0.0, ge=0)
    gap: float = Field(default=0.0, ge=0)
    bound_note: str = ""
    purchase_lower_bound: float = Field(default=0.0, ge=0)
    purchase_status: str = ""
    input_replicas: int = Field(default=0, ge=0)
    max_lead_time_days: int = Field(default=0, ge=0)
    verified: bool = True
    still_unplaced: int = Field(default=0, ge=0)
    solver: str = ""
    solver_status: str = ""
    wall_s: float = Field(default=0.0, ge=0)
    by_tier: tuple[GapLine, ...] = ()
    by_team: tuple[GapLine, ...] = ()
    unservable: tuple[Unservable, ...] = ()
    cut_short: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    inputs_sha256: str | None = None
    example_prices: bool = False
    price_source: str = ""
    repartitions: tuple[Repartition, ...] = ()
    allow_other_models: tuple[str, ...] = ()
    class_moves: tuple[ClassMove, ...] = ()


class ScenarioResult(Strict):
    """One scenario's capacity gap, what it buys and why it differs from the baseline (the gap of the
    inputs as given)."""

    name: str
    description: str = ""
    buys: str = ""
    vs_baseline: str = ""
    gap: CapacityGap


class CapacityReport(Strict):
    """The file ``gpuplan capacity-gap --out`` writes: the gap and any scenario results."""

    gap: CapacityGap
    scenarios: tuple[ScenarioResult, ...] = ()


#: Price of one GPU-hour of waiting per unit of tier weight in a capacity plan over time, in the
#: catalog's currency: with the default tiers, latency-sensitive work (weight 10) waits at 40 per
#: GPU-hour, standard (3) at 12 and background (1) at 4 (the bundled catalog rents an H100 GPU-hour at
#: 10 and an L40S one at 3).
DEFAULT_WAIT_PRICE = 4.0
#: Most planning periods of a capacity plan over time, and the longest period in days.
MAX_PERIODS = 40
MAX_PERIOD_DAYS = 3660

#: Most replicas of one workload in one period.
MAX_REPLICAS = 1_000_000
#: Replicas of one workload in one period.
_Count = Annotated[int, Field(ge=0, le=MAX_REPLICAS)]
#: A growth rate per period: -1 (none left) up to :data:`MAX_GROWTH`.
_Rate = Annotated[float, Field(ge=-1, le=MAX_GROWTH, allow_inf_nan=False)]
#: An amount of money: finite, not negative.
_Money = Annotated[float, Field(ge=0, le=MAX_PRICE, allow_inf_nan=False)]


class GrowthFile(Strict):
    """How demand grows over the periods of ``gpuplan capacity-plan`` (period 0 is today).

    ``teams`` and ``tiers`` give a growth rate per period (``0.25``: a quarter more than the period
    before), one number for every period or a list of one rate per period after today; the rates of a
    workload's team and tier both apply, compounding. ``workloads`` gives explicit replica counts, one
    per period from today, which win over the rates. ``periods``, ``period_days`` and ``budget`` (the
    most spent per period on orders and rent: one amount, or one per period) may be given here; the
    command's flags win over them.
    """

    description: str = ""
    periods: int | None = Field(default=None, ge=1, le=MAX_PERIODS)
    period_days: int | None = Field(default=None, ge=1, le=MAX_PERIOD_DAYS)
    budget: _Money | tuple[_Money, ...] | None = None
    teams: dict[Name, _Rate | tuple[_Rate, ...]] = Field(default_factory=dict)
    tiers: dict[Name, _Rate | tuple[_Rate, ...]] = Field(default_factory=dict)
    workloads: dict[Name, tuple[_Count, ...]] = Field(default_factory=dict)


class ServedGroup(Strict):
    """A team and tier that an order or a rental serves, with the GPU-equivalents it gets there."""

    team: str
    tier: str
    gpu_equivalents: float = Field(ge=0)


class HorizonOrder(Strict):
    """Nodes of one type ordered at the start of a period: when they arrive (the first period that
    starts after their lead time) and whom they serve in that period."""

    period: int = Field(ge=0)
    order_date: str
    arrives_date: str
    arrives_period: int = Field(ge=0)
    node_type: str
    gpu_model: str
    count: int = Field(ge=1)
    gpus: int = Field(ge=0)
    unit_cost: float = Field(ge=0)
    cost: float = Field(ge=0)
    lead_time_days: int = Field(ge=0)
    serves: tuple[ServedGroup, ...] = ()


class HorizonRent(Strict):
    """Nodes of one type rented for one period (no lead time), at a price per GPU-hour."""

    period: int = Field(ge=0)
    node_type: str
    gpu_model: str
    count: int = Field(ge=1)
    gpus: int = Field(ge=0)
    hours: float = Field(ge=0)
    rent_per_gpu_hour: float = Field(ge=0)
    cost: float = Field(ge=0)
    serves: tuple[ServedGroup, ...] = ()


class HorizonPeriod(Strict):
    """One period of a capacity plan: its demand, what serves it and what waits, what it costs, and
    the placement check of its fleet (``checked``: run; ``shortfall``: replicas the check left waiting
    beyond those the plan lets wait)."""

    period: int = Field(ge=0)
    start: str
    replicas: int = Field(ge=0)
    gpu_equivalents: float = Field(ge=0)
    served: int = Field(ge=0)
    waiting: int = Field(ge=0)
    waiting_gpu_hours: float = Field(ge=0)
    buy_cost: float = Field(ge=0)
    rent_cost: float = Field(ge=0)
    wait_cost: float = Field(ge=0)
    budget: float | None = None
    nodes_arrived: int = Field(default=0, ge=0)
    nodes_rented: int = Field(default=0, ge=0)
    gpus_in_service: int = Field(default=0, ge=0)
    checked: bool = False
    check_status: str = ""
    check_unplaced: int = Field(default=0, ge=0)
    shortfall: int = Field(default=0, ge=0)
    check_note: str = ""


class TierWait(Strict):
    """Demand of one tier served late over the plan: replica-periods and GPU-hours waiting, at the
    tier's price of waiting per GPU-hour (its weight times the plan's price per weight)."""

    tier: str
    weight: int = Field(ge=0)
    price_per_gpu_hour: float = Field(ge=0)
    replica_periods: int = Field(ge=0)
    gpu_hours: float = Field(ge=0)
    cost: float = Field(ge=0)


class HorizonPlan(Strict):
    """What ``gpuplan capacity-plan`` answers: what to order when, what to rent in which period and
    what waits, at the least purchase, rent and waiting cost over the periods.

    ``objective`` is ``total_cost`` (purchases + rent + the tier-weighted cost of waiting, in whole
    currency units); ``lower_bound`` is the multi-period MILP's proved bound on it and ``status`` is
    ``OPTIMAL`` only when HiGHS proved the plan optimal (``gap`` 0). Capacity is pooled per node type
    and, for the existing fleet, per group of identical nodes; ``per_period`` says which periods'
    fleets the real placement solver checked and what it left waiting beyond the plan
    (``verified``: every checked period placed all it should).
    """

    periods: int = Field(ge=1)
    period_days: int = Field(ge=1)
    start: str
    currency: str = "USD"
    example_prices: bool = False
    price_source: str = ""
    growth_description: str = ""
    wait_price_per_gpu_hour: float = Field(ge=0)
    orders: tuple[HorizonOrder, ...] = ()
    rents: tuple[HorizonRent, ...] = ()
    per_period: tuple[HorizonPeriod, ...] = ()
    waiting_by_tier: tuple[TierWait, ...] = ()
    buy_cost: float = Field(default=0.0, ge=0)
    rent_cost: float = Field(default=0.0, ge=0)
    wait_cost: float = Field(default=0.0, ge=0)
    total_cost: float = Field(default=0.0, ge=0)
    status: str = ""
    objective: float = Field(default=0.0, ge=0)
    lower_bound: float = Field(default=0.0, ge=0)
    gap: float = Field(default=0.0, ge=0)
    solver: str = ""
    milp_wall_s: float = Field(default=0.0, ge=0)
    wall_s: float = Field(default=0.0, ge=0)
    verified: bool = False
    unservable: tuple[Unservable, ...] = ()
    cut_short: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    inputs_sha256: str | None = None
