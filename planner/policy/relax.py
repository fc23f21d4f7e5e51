"""The rules of a policy, each relaxed on its own: an isolation rule lifted, a quota one GPU looser and
removed, a MIG or sharing switch turned on, the disruption budget one move looser and unlimited, a tier
weight lowered to the next tier's. Each relaxation is the policy with that one change, so that a plan
with it against the plan with the policy as given prices that rule alone."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gpuplan.models.policy import IsolationKind, IsolationRule, Policy, Quota
from gpuplan.models.workload import Workload


@dataclass(frozen=True)
class Relaxation:
    """One rule relaxed: its policy path (``rule``), what changes in words, and the relaxed policy."""

    rule: str
    words: str
    policy: Policy


def _isolation_words(rule: IsolationRule) -> str:
    """An isolation rule in words."""
    if rule.kind is IsolationKind.TEAM_EXCLUSIVE:
        where = f"pool {rule.pool}" if rule.pool else ", ".join(rule.nodes)
        return f"{where} reserved for team {rule.team}"
    if rule.kind is IsolationKind.NO_SHARED_GPU_ACROSS_TEAMS:
        return "no GPU shared by two teams"
    return f"tiers {' and '.join(rule.tiers)} never share a GPU"


def _quota_words(q: Quota) -> str:
    """Whose quota, and on what."""
    on = [f"GPU model {q.gpu_model}"] if q.gpu_model else []
    on += [f"pool {q.pool}"] if q.pool else []
    return f"team {q.team}'s quota" + (f" on {' and '.join(on)}" if on else "")


def _isolation(policy: Policy) -> list[Relaxation]:
    rules = policy.isolation
    return [
        Relaxation(
            f"isolation[{i}]",
            f"isolation rule lifted: {_isolation_words(rule)}",
            policy.model_copy(update={"isolation": rules[:i] + rules[i + 1 :]}),
        )
        for i, rule in enumerate(rules)
    ]


def _quotas(policy: Policy) -> list[Relaxation]:
    out = []
    quotas = policy.quotas
    for i, q in enumerate(quotas):
        looser = (*quotas[:i], q.model_copy(update={"gpus": q.gpus + 1}), *quotas[i + 1 :])
        out.append(
            Relaxation(
                f"quotas[{i}].gpus",
                f"{_quota_words(q)} {q.gpus:g} -> {q.gpus + 1:g} GPUs",
                policy.model_copy(update={"quotas": looser}),
            )
        )
        out.append(
            Relaxation(
                f"quotas[{i}]",
                f"{_quota_words(q)} ({q.gpus:g} GPUs) removed",
                policy.model_copy(update={"quotas": quotas[:i] + quotas[i + 1 :]}),
            )
        )
    return out


def _switches(policy: Policy) -> tuple[list[Relaxation], list[str]]:
    """The MIG and sharing switches that are off, each turned on; the names of those already on."""
    out, on = [], []
    switches = (
        ("mig", "allow_repartition", "MIG re-partitioning (and MIG mode changes) allowed"),
        ("mig", "allow_create", "new MIG instances allowed"),
        ("sharing", "allow_change", "sharing-mode changes of drained nodes allowed"),
    )
    for section, field, words in switches:
        part = getattr(policy, section)
        if getattr(part, field):
            on.append(f"{section}.{field}")
            continue
        relaxed = policy.model_copy(update={section: part.model_copy(update={field: True})})
        out.append(Relaxation(f"{section}.{field}", words, relaxed))
    return out, on


def _disruption(policy: Policy, running: int) -> tuple[list[Relaxation], list[str]]:
    """One more move per round, and a budget as large as the running replicas (no plan can move or
    preempt more, so it is unlimited); each only when it loosens the budget."""
    b = policy.disruption
    out, notes = [], []
    if b.max_moves_per_round < running:
        one = b.model_copy(update={"max_moves_per_round": b.max_moves_per_round + 1})
        out.append(
            Relaxation(
                "disruption.max_moves_per_round",
                f"{b.max_moves_per_round} -> {b.max_moves_per_round + 1} moves per round",
                policy.model_copy(update={"disruption": one}),
            )
        )
    unlimited = b.model_copy(
        update={
            "max_moves_per_round": max(b.max_moves_per_round, running),
            "max_preemptions_per_round": max(b.max_preemptions_per_round, running),
            "max_moves_per_team": None,
        }
    )
    if unlimited != b:
        out.append(
            Relaxation(
                "disruption",
                f"disruption budget unlimited (was {b.max_moves_per_round} moves and "
                f"{b.max_preemptions_per_round} preemptions per round"
                + ("" if b.max_moves_per_team is None else f", {b.max_moves_per_team} moves per team")
                + ")",
                policy.model_copy(update={"disruption": unlimited}),
            )
        )
    else:
        notes.append("the disruption budget: it already lets every running replica move")
    return out, notes


def _weights(policy: Policy) -> list[Relaxation]:
    """Each tier's weight lowered to that of the next tier below it (by weight)."""
    tiers = policy.tiers
    lower = sorted({t.weight for t in tiers}, reverse=True)
    out = []
    for i, tier in enumerate(tiers):
        below = [w for w in lower if w < tier.weight]
        if not below:
            continue
        nxt = below[0]
        named = next(t.name for t in sorted(tiers, key=lambda t: -t.weight) if t.weight == nxt)
        changed = (*tiers[:i], tier.model_copy(update={"weight": nxt}), *tiers[i + 1 :])
        out.append(
            Relaxation(
                f"tiers[{i}].weight",
                f"tier {tier.name}'s weight {tier.weight} -> {nxt} ({named}'s)",
                policy.model_copy(update={"tiers": changed}),
            )
        )
    return out


def relaxations(policy: Policy, running: int) -> tuple[list[Relaxation], list[str]]:
    """Every rule of ``policy`` relaxed on its own, and what is not relaxed because it is already as
    loose as it gets (``running``: replicas that run now, the most a budget could ever let move)."""
    switches, on = _switches(policy)
    budget, notes = _disruption(policy, running) if running else ([], ["the disruption budget: nothing runs"])
    found = [*_isolation(policy), *_quotas(policy), *switches, *budget, *_weights(policy)]
    return found, [*(f"{name}: already allowed" for name in on), *notes]


def input_relaxations(policy: Policy, workloads: Iterable[Workload]) -> tuple[list[Relaxation], list[str]]:
    """:func:`relaxations` of ``policy`` for ``workloads`` (whose replicas running now bound the budget)."""
    return relaxations(policy, sum(len(w.running_on) for w in workloads))
