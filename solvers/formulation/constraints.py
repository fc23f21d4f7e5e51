"""Constraint builders of the exact placement model, one per constraint family."""

from __future__ import annotations

import logging
from collections import defaultdict
from functools import partial

from gpuplan.models.hardware import MILLI_PER_GPU
from gpuplan.models.policy import IsolationKind, Quota
from gpuplan.models.rules.disruption import moves_allowed, outranks, preemptions_allowed, team_moves_allowed
from gpuplan.models.rules.fairness import fair_displaces
from gpuplan.models.rules.isolation import keeps_apart, sharing_group
from gpuplan.models.rules.quota import charges, limit_units, quota_model, quota_unit, use_units
from gpuplan.solvers.formulation.builder import Expr, Var
from gpuplan.solvers.formulation.variables import Candidate, GpuKey, Variables, current_vars
from gpuplan.solvers.problem import PlacementProblem, Request, Running, ShapeSpec, gangs_in_part, may_preempt

log = logging.getLogger(__name__)


def one_alternative(v: Variables) -> None:
    """A replica is placed at most once, with exactly one of its alternatives on one node."""
    for r, placed in v.placed.items():
        if r not in v.fixed:
            v.model.add(v.model.sum(c.x for c in v.by_req.get(r, [])) == placed)


def gpu_links(problem: PlacementProblem, v: Variables) -> None:
    """GPU variables agree with the node choice; multi-GPU replicas stay inside one allowed group."""
    m = v.model
    for cand in v.cands.values():
        shape = problem.requests[cand.req].shapes[cand.alt]
        if cand.whole:
            m.add(m.sum(cand.whole.values()) == shape.gpus * cand.x)
            for var in cand.whole.values():
                m.add(var <= cand.x)
        if cand.groups:
            m.add(m.sum(g for _, g in cand.groups) == cand.x)
            for p, var in cand.whole.items():
                m.add(var <= m.sum(g for grp, g in cand.groups if p in grp))
        if cand.frac:
            m.add(m.sum(cand.frac.values()) == cand.x)
        if cand.mig:
            m.add(m.sum(cand.mig.values()) == cand.x)


def _gpu_uses(v: Variables) -> dict[GpuKey, list[tuple[Candidate, int, Var]]]:
    """Every (candidate, GPU position, variable) by GPU."""
    out: dict[GpuKey, list[tuple[Candidate, int, Var]]] = defaultdict(list)
    for cand in v.cands.values():
        for p, var in cand.gpu_vars():
            out[(cand.node, p)].append((cand, p, var))
    return out


def capacity(problem: PlacementProblem, v: Variables) -> None:
    """CPU and memory per node; milli-GPU per non-MIG GPU (a whole GPU takes all of it)."""
    m = v.model
    by_node: dict[int, list[Candidate]] = defaultdict(list)
    for cand in v.cands.values():
        by_node[cand.node].append(cand)
    for n, cands in by_node.items():
        node = problem.nodes[n]
        shapes = [problem.requests[c.req].shapes[c.alt] for c in cands]
        cpu = node.cpu_milli - v.baseline.cpu.get(n, 0)
        mem = node.memory_mib - v.baseline.memory.get(n, 0)
        if sum(s.cpu_milli for s in shapes) > cpu:
            m.add(m.sum(s.cpu_milli * c.x for s, c in zip(shapes, cands, strict=True)) <= cpu)
        if sum(s.memory_mib for s in shapes) > mem:
            m.add(m.sum(s.memory_mib * c.x for s, c in zip(shapes, cands, strict=True)) <= mem)
    for (n, p), uses in _gpu_uses(v).items():
        if problem.nodes[n].gpus[p].mig is not None:
            continue
        terms = []
        for cand, _, var in uses:
            shape = problem.requests[cand.req].shapes[cand.alt]
            terms.append((MILLI_PER_GPU if shape.kind == "whole" else shape.milli) * var)
        if len(terms) > 1:
            m.add(m.sum(terms) <= v.free_milli((n, p)))


def gpu_memory(problem: PlacementProblem, v: Variables) -> None:
    """GPU memory per non-MIG GPU: the fractions sharing it hold at most its free memory."""
    m = v.model
    for (n, p), uses in _gpu_uses(v).items():
        terms = []
        for cand, _, var in uses:
            shape = problem.requests[cand.req].shapes[cand.alt]
            if shape.kind == "fraction" and shape.gpu_memory_mib:
                terms.append((shape.gpu_memory_mib, var))
        free = v.free_gpu_memory(problem, (n, p))
        if sum(mib for mib, _ in terms) > free:
            m.add(m.sum([mib * var for mib, var in terms]) <= free)


def shares(problem: PlacementProblem, v: Variables) -> None:
    """A time-sliced GPU takes at most its ``replicas`` fractions (the device plugin's shares), those of
    fixed running work included."""
    m = v.model
    for (n, p), uses in _gpu_uses(v).items():
        limit = problem.nodes[n].gpus[p].shares
        if limit is None:
            continue
        fixed = sum(
            1 for r in v.baseline.users.get((n, p), []) if _running_kind(problem.requests[r]) == "fraction"
        )
        fractions = [
            var for cand, _, var in uses if problem.requests[cand.req].shapes[cand.alt].kind == "fraction"
        ]
        if fixed + len(fractions) > limit:
            m.add(m.sum(fractions) <= max(0, limit - fixed))


def _running_alt(req: Request) -> int:
    """The alternative a running replica runs with."""
    assert req.running is not None
    return req.running.alternative


def _running_kind(req: Request) -> str:
    """The kind of shape a running replica runs with."""
    assert req.running is not None
    return req.shapes[req.running.alternative].kind


def mig(v: Variables) -> None:
    """Instances at valid starts only, no shared memory slice, compute and instance-count limits;
    each instance serves at most one replica, exists if it serves one, and a new one only if it does."""
    m = v.model
    serving: dict[tuple[GpuKey, tuple[str, int]], list[Var]] = defaultdict(list)
    for cand in v.cands.values():
        for (p, slot), var in cand.mig.items():
            serving[((cand.node, p), slot)].append(var)
    for key, mg in v.mig_gpus.items():
        spec = mg.spec
        for slot, inst in mg.inst.items():
            users = serving.get((key, slot), [])
            if users:
                m.add(m.sum(users) <= inst)
            if slot not in mg.existing and not isinstance(inst, int):
                # A new instance is created only for the replica it serves: an idle new instance
                # would hold memory slices that later demand cannot use.
                m.add(inst <= m.sum(users))
        if all(isinstance(i, int) for i in mg.inst.values()):
            continue
        cover: dict[int, list[Var | int]] = defaultdict(list)
        for (prof, start), inst in mg.inst.items():
            for j in range(start, start + spec.profile(prof).size_at(start)):
                cover[j].append(inst)
        for insts in cover.values():
            if len(insts) > 1:
                m.add(m.sum(insts) <= 1)
        m.add(
            m.sum(spec.profile(p).compute_slices * i for (p, _), i in mg.inst.items()) <= spec.compute_slices
        )
        m.add(m.sum(mg.inst.values()) <= spec.max_gpu_instances)
        per_profile: dict[str, list[Var | int]] = defaultdict(list)
        for (prof, _), inst in mg.inst.items():
            per_profile[prof].append(inst)
        for prof, insts in per_profile.items():
            if len(insts) > spec.profile(prof).max_instances:
                m.add(m.sum(insts) <= spec.profile(prof).max_instances)


def _gang_members(problem: PlacementProblem) -> dict[str, list[int]]:
    members: dict[str, list[int]] = defaultdict(list)
    for r, req in enumerate(problem.requests):
        if req.gang is not None:
            members[req.gang].append(r)
    return members


def gangs(problem: PlacementProblem, v: Variables) -> None:
    """All replicas of a gang placed or none; a gang that runs in part now
    (:func:`~gpuplan.solvers.problem.gangs_in_part`) may also keep its running replicas alone, each
    where it runs (:func:`gang_kept`: the validator keeps that, ``models.rules.gang.kept_in_part``)."""
    m = v.model
    in_part = gangs_in_part(problem.requests)
    for gang, rs in _gang_members(problem).items():
        if gang not in in_part:
            for r in rs[1:]:
                m.add(v.placed[r] == v.placed[rs[0]])
            continue
        whole = m.bool_var(f"gang_whole[{gang}]")
        kept = gang_kept(problem, v, gang, rs)
        m.add(whole + kept <= 1)
        for r in rs:
            m.add(v.placed[r] == (whole if problem.requests[r].running is None else whole + kept))


def gang_kept(problem: PlacementProblem, v: Variables, gang: str, rs: list[int]) -> Var | int:
    """The gang's flag that is 1 only when the plan keeps it as it runs: every running member stays
    exactly where it runs and no other member is placed (0 for a gang none of whose members runs);
    made once per gang (:attr:`Variables.gang_kept`)."""
    if gang in v.gang_kept:
        return v.gang_kept[gang]
    m = v.model
    kept: Var | int = 0
    if any(problem.requests[r].running is not None for r in rs):
        kept = m.bool_var(f"gang_kept[{gang}]")
        for r in rs:
            if problem.requests[r].running is None:
                m.add(kept <= 1 - v.placed[r])
            elif r not in v.fixed:
                cur = current_vars(v, problem, r)
                for var in cur if cur is not None else ():
                    m.add(kept <= var)
                if cur is None:
                    m.add(kept == 0)
    v.gang_kept[gang] = kept
    return kept


def gang_domains(problem: PlacementProblem, v: Variables) -> None:
    """A gang with domain labels goes to nodes with one value of them (never to a node without one); a
    gang that runs outside that may keep it only by staying exactly where it runs (the validator's
    kept rule: then no member moves and, for a gang that runs in part, no other member is placed)."""
    for gang, rs in _gang_members(problem).items():
        domains = tuple(sorted({d for r in rs if (d := problem.requests[r].gang_domain)}))
        if domains:
            _gang_domain(problem, v, gang, rs, domains)


def _gang_domain(
    problem: PlacementProblem, v: Variables, gang: str, rs: list[int], domains: tuple[str, ...]
) -> None:
    """:func:`gang_domains` for one gang. Fixed members (no variables) sit where they run: their value
    is the gang's, or, outside any value, every other member stays too."""
    m = v.model

    def value(n: int) -> tuple[str | None, ...]:
        return tuple(problem.nodes[n].labels.get(d) for d in domains)

    # 1 only when every running member stays where it runs and no other member is placed.
    kept = gang_kept(problem, v, gang, rs)
    zone: dict[tuple[str | None, ...], Var] = {}

    def zone_of(val: tuple[str | None, ...]) -> Var:
        if val not in zone:
            zone[val] = m.bool_var(f"zone[{gang},{'/'.join(str(x) for x in val)}]")
        return zone[val]

    for r in rs:
        if r in v.fixed:
            val = value(v.fixed[r])
            if None not in val:
                m.add(zone_of(val) + kept >= 1)
            elif not isinstance(kept, int):  # outside every value: kept only if every member stays
                m.add(kept >= 1)
            continue
        for cand in v.by_req.get(r, []):
            val = value(cand.node)
            m.add(cand.x <= (kept if None in val else zone_of(val) + kept))
    m.add(m.sum(zone.values()) <= 1)


def _no_sharing(
    v: Variables,
    label: str,
    group_of: dict[int, str],
    uses: dict[GpuKey, list[tuple[Candidate, int, Var]]],
) -> None:
    """No GPU is used by replicas of two different groups (teams or tiers); fixed work on a GPU
    excludes every other group from it (GPUs whose running work already mixes groups: :func:`kept`)."""
    m = v.model
    for (n, p), items in uses.items():
        if len(_current_groups(v, group_of, (n, p))) > 1:
            continue
        held = {group_of[r] for r in v.baseline.users.get((n, p), []) if r in group_of}
        if held:
            for cand, _, var in items:
                if cand.req in group_of and group_of[cand.req] not in held:
                    m.add(var == 0)
            continue
        groups = {group_of[c.req] for c, _, _ in items if c.req in group_of}
        if len(groups) < 2:
            continue
        flag = {g: m.bool_var(f"{label}[n{n},g{p},{g}]") for g in sorted(groups)}
        for cand, _, var in items:
            if cand.req in group_of:
                m.add(var <= flag[group_of[cand.req]])
        m.add(m.sum(flag.values()) <= 1)


def isolation(problem: PlacementProblem, v: Variables) -> None:
    """No GPU shared across teams, or across the tiers of a tiers-no-share rule (team-exclusive nodes
    are enforced when candidates are created)."""
    uses = _gpu_uses(v)
    for label, group_of in _isolation_groups(problem):
        _no_sharing(v, label, group_of, uses)


def quota_units(problem: PlacementProblem, shape: ShapeSpec, n: int, p: int, unit: int) -> int:
    """Quota units (``unit`` per GPU, :func:`~gpuplan.models.rules.quota.quota_unit` of the problem's
    catalog) of one GPU use of ``shape`` on GPU ``p`` of node ``n``."""
    spec = problem.catalog.model(problem.nodes[n].gpus[p].model) if shape.kind == "mig" else None
    return use_units(shape.kind, shape.milli, shape.mig_profile, spec, unit)


def quota_charged(problem: PlacementProblem, q: Quota, req: Request, n: int, p: int) -> bool:
    """Whether a GPU use of ``req`` on GPU ``p`` of node ``n`` counts against quota ``q``."""
    node = problem.nodes[n]
    return charges(
        q,
        quota_model(q, problem.catalog),
        team=req.team,
        preemptible=req.preemptible,
        pool=node.pool,
        gpu_model=node.gpus[p].model,
    )


def charged_units(
    problem: PlacementProblem, q: Quota, req: Request, n: int, where: Running, unit: int
) -> int:
    """Quota units (``unit`` per GPU) ``q`` counts for replica ``req`` placed at ``where`` (on node
    ``n``)."""
    shape = req.shapes[where.alternative]
    pos = {g.index: p for p, g in enumerate(problem.nodes[n].gpus)}
    return sum(
        quota_units(problem, shape, n, pos[g.index], unit)
        for g in where.gpus
        if quota_charged(problem, q, req, n, pos[g.index])
    )


def quotas(problem: PlacementProblem, v: Variables) -> None:
    """Team GPU-equivalents per GPU model or pool stay within quota; with borrowing, only
    non-preemptible work counts against it (borrowed capacity goes to preemptible work). Sums are in
    the catalog's exact quota unit."""
    unit = quota_unit(problem.catalog)
    for q in problem.policy.quotas:
        limit = limit_units(q.gpus, unit)
        if limit is None:
            continue  # an infinite quota never binds
        counts = partial(quota_charged, problem, q)
        held = 0
        for (n, p), users in v.baseline.users.items():
            for r in users:
                req = problem.requests[r]
                assert req.running is not None
                if counts(req, n, p):
                    held += quota_units(problem, req.shapes[req.running.alternative], n, p, unit)
        terms: list[Expr] = []
        for cand in v.cands.values():
            req = problem.requests[cand.req]
            shape = req.shapes[cand.alt]
            terms.extend(
                quota_units(problem, shape, cand.node, p, unit) * var
                for p, var in cand.gpu_vars()
                if counts(req, cand.node, p)
            )
        if terms and held + _current_units(problem, v, q, unit) <= limit:
            v.model.add(v.model.sum(terms) <= max(0, limit - held))  # else running work is over it: kept()


def running(problem: PlacementProblem, v: Variables) -> None:
    """Running work stays, migrates or is preempted (preemptible and, under
    ``disruption.preempt_only_for_higher_tier``, only when a waiting replica of a strictly higher tier
    starts on its node, or one fair share lets displace it), within the disruption budget."""
    m = v.model
    budget = problem.policy.disruption
    moves: list[Expr] = []
    preempts: list[Expr] = []
    team_moves: dict[str, list[Expr]] = defaultdict(list)
    newcomers: dict[int, list[Candidate]] = defaultdict(list)
    for c in v.cands.values():
        if problem.requests[c.req].running is None:
            newcomers[c.node].append(c)
    node_pos = {nd.name: n for n, nd in enumerate(problem.nodes)}
    for r, req in enumerate(problem.requests):
        if req.running is None or r in v.fixed:
            continue
        cur = current_vars(v, problem, r)
        stay = m.bool_var(f"stay[{req.workload}#{req.replica}]")
        v.stay[r] = stay
        if cur is None:
            log.warning("running replica %s#%d is not where its shape allows", req.workload, req.replica)
            m.add(stay == 0)
        else:
            for var in cur:
                m.add(stay <= var)
        m.add(stay <= v.placed[r])
        moved = v.placed[r] - stay
        preempted = 1 - v.placed[r]
        moves.append(moved)
        team_moves[req.team].append(moved)
        if not may_preempt(problem.policy, req):
            m.add(v.placed[r] == 1)
            continue
        preempts.append(preempted)
        if budget.preempt_only_for_higher_tier:
            running = (req.team, req.tier_rank, req.preemptible)
            displacers = [
                c.x
                for c in newcomers[node_pos[req.running.node]]
                if outranks(problem.requests[c.req].tier_rank, req.tier_rank)
                or fair_displaces(
                    problem.policy,
                    problem.fair_share,
                    (problem.requests[c.req].team, problem.requests[c.req].tier_rank),
                    running,
                )
            ]
            if displacers:
                m.add(preempted <= m.sum(displacers))
            else:
                m.add(v.placed[r] == 1)
    if moves:
        m.add(m.sum(moves) <= moves_allowed(budget))
    if preempts:
        m.add(m.sum(preempts) <= preemptions_allowed(budget))
    per_team = team_moves_allowed(budget)
    if per_team is not None:
        for terms in team_moves.values():
            m.add(m.sum(terms) <= per_team)


def symmetry(problem: PlacementProblem, v: Variables) -> None:
    """Identical waiting replicas of one workload are placed in replica order."""
    prev: dict[str, int] = {}
    for r, req in enumerate(problem.requests):
        if req.running is not None:
            continue
        if req.workload in prev:
            v.model.add(v.placed[prev[req.workload]] >= v.placed[r])
        prev[req.workload] = r


def _current_users(v: Variables, key: GpuKey) -> list[int]:
    """Running replicas (fixed or free to move) whose current place uses GPU ``key``."""
    return v.baseline.users.get(key, []) + v.running_at.get(key, [])


def _current_groups(v: Variables, group_of: dict[int, str], key: GpuKey) -> set[str]:
    """The isolation groups running work on GPU ``key`` belongs to now."""
    return {group_of[r] for r in _current_users(v, key) if r in group_of}


def _current_units(problem: PlacementProblem, v: Variables, q: Quota, unit: int) -> int:
    """Quota units that quota ``q`` counts for running replicas free to move, at their current place."""
    node_pos = {nd.name: n for n, nd in enumerate(problem.nodes)}
    total = 0
    for r in {r for users in v.running_at.values() for r in users}:
        req = problem.requests[r]
        assert req.running is not None
        total += charged_units(problem, q, req, node_pos[req.running.node], req.running, unit)
    return total


def _stays(v: Variables, rs: list[int]) -> list[Expr]:
    """``stay`` of each replica of ``rs`` free to move (fixed replicas have none: they stay)."""
    return [v.stay[r] for r in rs if r in v.stay]


def _isolation_groups(problem: PlacementProblem) -> list[tuple[str, dict[int, str]]]:
    """(label, group of each request concerned) of every isolation rule that keeps GPU users apart
    (:func:`~gpuplan.models.rules.isolation.sharing_group`), as :func:`isolation` and :func:`kept`
    read them."""
    out: list[tuple[str, dict[int, str]]] = []
    for i, rule in enumerate(problem.policy.isolation):
        if not keeps_apart(rule):
            continue
        groups = ((r, sharing_group(rule, q.team, q.tier)) for r, q in enumerate(problem.requests))
        kind = "team" if rule.kind is IsolationKind.NO_SHARED_GPU_ACROSS_TEAMS else "tier"
        out.append((f"{kind}{i}", {r: g for r, g in groups if g is not None}))
    return out


def kept(problem: PlacementProblem, v: Variables) -> None:
    """Rules the current state already breaks (quotas, GPUs shared across isolation groups; after
    :func:`running`, which makes the ``stay`` flags): the validator keeps such a violation when every
    replica it concerns stays where it runs, so the model says exactly that: either the rule holds, or
    nothing counts there but replicas that stay (``over`` = 1). Team-exclusive nodes and topology
    needs are kept by the candidates (``variables.keep_current``)."""
    m = v.model
    node_pos = {nd.name: n for n, nd in enumerate(problem.nodes)}
    unit = quota_unit(problem.catalog)
    for i, q in enumerate(problem.policy.quotas):
        limit = limit_units(q.gpus, unit)
        if limit is None:
            continue
        held = sum(
            quota_units(problem, problem.requests[r].shapes[_running_alt(problem.requests[r])], n, p, unit)
            for (n, p), users in v.baseline.users.items()
            for r in users
            if quota_charged(problem, q, problem.requests[r], n, p)
        )
        if held + _current_units(problem, v, q, unit) <= limit:
            continue
        terms: list[Expr] = []
        size = held
        for cand in v.cands.values():
            req = problem.requests[cand.req]
            for p, var in cand.gpu_vars():
                if quota_charged(problem, q, req, cand.node, p):
                    units = quota_units(problem, req.shapes[cand.alt], cand.node, p, unit)
                    terms.append(units * var)
                    size += units
        staying: list[Expr] = []
        for r in v.stay:
            req = problem.requests[r]
            assert req.running is not None
            units = charged_units(problem, q, req, node_pos[req.running.node], req.running, unit)
            if units:
                staying.append(units * v.stay[r])
        over = m.bool_var(f"quota_over[{i}]")
        m.add(held + m.sum(terms) <= limit + size * over)
        m.add(m.sum(terms) - m.sum(staying) <= size * (1 - over))
    uses = _gpu_uses(v)
    for label, group_of in _isolation_groups(problem):
        for key, items in uses.items():
            if len(_current_groups(v, group_of, key)) < 2:
                continue
            flags: dict[str, Expr] = {group_of[r]: 1 for r in v.baseline.users.get(key, []) if r in group_of}
            for cand, _, var in items:
                g = group_of.get(cand.req)
                if g is None:
                    continue
                if g not in flags:
                    flags[g] = m.bool_var(f"{label}[n{key[0]},g{key[1]},{g}]")
                m.add(var <= flags[g])
            over = m.bool_var(f"{label}_over[n{key[0]},g{key[1]}]")
            m.add(m.sum(flags.values()) <= 1 + len(flags) * over)
            fresh = m.sum(var for _, _, var in items) - m.sum(_stays(v, v.running_at.get(key, [])))
            m.add(fresh <= len(items) * (1 - over))


def add_all(problem: PlacementProblem, v: Variables) -> None:
    """Every constraint family."""
    one_alternative(v)
    gpu_links(problem, v)
    capacity(problem, v)
    gpu_memory(problem, v)
    shares(problem, v)
    mig(v)
    gangs(problem, v)
    isolation(problem, v)
    quotas(problem, v)
    running(problem, v)
    gang_domains(problem, v)
    kept(problem, v)
    symmetry(problem, v)
