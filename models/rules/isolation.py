"""Isolation: which teams a node's team-exclusive rules allow, and which users may share a GPU under
``no-shared-gpu-across-teams`` and ``tiers-no-share``.
"""

from __future__ import annotations

from collections.abc import Iterable

from gpuplan.models.policy import IsolationKind, IsolationRule


def covers(rule: IsolationRule, node: str, pool: str | None) -> bool:
    """Whether ``rule`` is a team-exclusive rule that reserves node ``node`` (of ``pool``): it lists the
    node, or names its pool (an empty pool name names none, as the rule's own check reads it)."""
    return rule.kind is IsolationKind.TEAM_EXCLUSIVE and (
        node in rule.nodes or (bool(rule.pool) and pool == rule.pool)
    )


def reserved_teams(rules: Iterable[IsolationRule], node: str, pool: str | None) -> frozenset[str] | None:
    """The teams the team-exclusive rules covering node ``node`` (of ``pool``) allow there: only a team
    every one of them names (``None``: no rule covers the node, any team)."""
    teams: frozenset[str] | None = None
    for rule in rules:
        if rule.team is None or not covers(rule, node, pool):
            continue
        mine = frozenset({rule.team})
        teams = mine if teams is None else teams & mine
    return teams


def team_allowed(reserved: frozenset[str] | None, team: str) -> bool:
    """Whether a replica of ``team`` may run on a node whose rules allow ``reserved``
    (:func:`reserved_teams`)."""
    return reserved is None or team in reserved


def keeps_apart(rule: IsolationRule) -> bool:
    """Whether ``rule`` keeps users of a GPU apart (``no-shared-gpu-across-teams``, ``tiers-no-share``)."""
    return rule.kind in (IsolationKind.NO_SHARED_GPU_ACROSS_TEAMS, IsolationKind.TIERS_NO_SHARE)


def sharing_group(rule: IsolationRule, team: str, tier: str) -> str | None:
    """The group a replica of ``team`` and ``tier`` belongs to under a rule that keeps GPU users apart:
    its team (``no-shared-gpu-across-teams``), its tier when the rule names it (``tiers-no-share``);
    ``None``: the rule does not concern it."""
    if rule.kind is IsolationKind.NO_SHARED_GPU_ACROSS_TEAMS:
        return team
    if rule.kind is IsolationKind.TIERS_NO_SHARE and tier in rule.tiers:
        return tier
    return None


def may_share(rule: IsolationRule, one: tuple[str, str], other: tuple[str, str]) -> bool:
    """Whether two users, each ``(team, tier)``, may share a GPU under ``rule``: unless the rule puts them
    in two different groups (:func:`sharing_group`)."""
    a, b = sharing_group(rule, *one), sharing_group(rule, *other)
    return a is None or b is None or a == b


def sharing_groups(rule: IsolationRule, users: Iterable[tuple[str, str]]) -> set[str]:
    """The groups of ``rule`` the users ``(team, tier)`` of one GPU belong to: the GPU breaks the rule
    when there are two or more (no two of them :func:`may_share`)."""
    return {g for team, tier in users if (g := sharing_group(rule, team, tier)) is not None}
