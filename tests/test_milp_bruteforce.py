"""The MIP's optimum equals brute-force enumeration of the same plans on small random instances."""

from __future__ import annotations

import math
import random
from dataclasses import replace

import pytest

from optimizer import milp
from optimizer.milp import Status, Targets, purchase, solution_costs, solve
from optimizer.perf.specs import TrainPlan
from optimizer.plans import Candidate, Group, PlanTable, leaf_split
from optimizer.problem.procurement import RackLimits


def _procurement(g: Group, ext: random.Random) -> Group:
    """Make a random group owned in part, rented, or capped (issue 6), or leave it bought."""
    kind = ext.choice(["buy", "buy", "owned", "rented", "capped"])
    if kind == "owned":
        gpus = ext.randint(1, 3 * g.slots)
        return replace(g, owned_gpus=gpus, owned_servers=ext.randint(0, -(-gpus // g.slots)),
                       owned_nics=g.fabric is not None and ext.random() < 0.5, pool=f"pool-{g.gpu}")
    if kind == "rented":
        return replace(g, gpu_usd=0.0, server_usd=0.0, gpu_w=0.0, server_w=0.0, port_usd=0.0, port_w=0.0,
                       switch_usd=0.0, switch_w=0.0, offer=f"offer-{g.gpu}", rent_usd_per_gpu_h=ext.uniform(0.5, 12),
                       rent_hours=ext.choice([0.0, 8766.0, 3 * 8766.0]), rent_step=g.slots if g.full_only else 1)
    if kind == "capped":
        return replace(g, buy_cap=ext.randint(1, 40))
    return g


def _fabric(g: Group, net: random.Random) -> Group:
    """A random fabric build: leaf oversubscription 1-4, links priced and powered (issue 6)."""
    if g.fabric is None:
        return g
    down, up = leaf_split(g.switch_ports, net.choice([1.0, 1.0, 1.5, 2.0, 3.0, 4.0]))
    return replace(g, leaf_down=down, leaf_up=up, cable_usd=net.uniform(0, 800), cable_w=net.uniform(0, 20),
                   uplink_usd=net.uniform(0, 800), uplink_w=net.uniform(0, 20))


def random_instance(rng: random.Random, ext: random.Random | None = None,
                    net: random.Random | None = None) -> tuple[PlanTable, Targets]:
    """A random plan table and targets; ``ext`` (if given) adds owned, rented and capped groups,
    maintenance, installation and racks; ``net`` sizes fabrics at a random oversubscription."""
    groups: dict[str, Group] = {}
    candidates: list[Candidate] = []
    for gi in range(rng.randint(1, 3)):
        slots = rng.choice([2, 4, 8])
        fabric = rng.choice([None, "f"])
        g = Group(f"gpu{gi}", f"srv{gi}", fabric, slots, rng.random() < 0.5, rng.uniform(1e3, 3e4),
                  rng.uniform(1e3, 8e4), rng.uniform(70, 1000), rng.uniform(200, 5000),
                  rng.choice([1, 2, 4]) if fabric else 0, rng.uniform(100, 3000) if fabric else 0.0,
                  rng.uniform(5, 30) if fabric else 0.0, rng.choice([8, 16, 32]) if fabric else 0,
                  rng.uniform(2e3, 4e4) if fabric else 0.0, rng.uniform(50, 1000) if fabric else 0.0,
                  rack_units=rng.choice([2, 4, 8]))
        g = _fabric(g, net or random.Random(0))
        if ext is not None:
            g = _procurement(g, ext)
        groups[g.key] = g
        for ci in range(rng.randint(1, 4)):
            tp = rng.choice([t for t in (1, 2, 4) if t <= slots])
            pp = rng.choice([p for p in (1, 2) if fabric is not None or tp * p <= slots])
            mp = tp * pp
            top = max(1, (slots // mp) if fabric is None else rng.randint(2, 24))
            lo = rng.randint(1, top)
            hi = rng.randint(lo, top)
            plan = TrainPlan(tp=tp, pp=pp, dp=hi)
            candidates.append(Candidate(f"{g.key}/c{ci}", g.key, plan, lo, hi, rng.uniform(1e3, 2e4) * mp, 0.0))
    objective = rng.choice(["min_cost", "min_time"])
    tokens = 1e12
    best_rate = max(c.replica_tokens_per_s * c.dp_max for c in candidates)
    if objective == "min_cost":
        deadline = tokens / (best_rate * rng.uniform(0.05, 1.2))
        budget = rng.choice([None, rng.uniform(5e4, 2e6)])
    else:
        deadline, budget = None, rng.uniform(2e4, 2e6)
    cap = rng.choice([None, rng.uniform(2e3, 1e5)])
    targets = Targets(objective, tokens, deadline, budget, rng.choice(["capex", "tco"]), cap, rng.uniform(0, 10))
    if ext is not None:
        racks = None
        if ext.random() < 0.5:
            racks = RackLimits(ext.choice([None, ext.randint(1, 6)]), ext.uniform(5e3, 4e4), 42, ext.uniform(0, 8e3),
                               ext.choice([None, ext.randint(1, 8)]))
        targets = replace(targets, maintenance=ext.uniform(0, 0.5), install_usd_per_server=ext.uniform(0, 3e3),
                          racks=racks)
    return PlanTable(tuple(candidates), groups), targets


def brute_force(table: PlanTable, t: Targets) -> float | None:
    best = None
    for c in table.candidates:
        g = table.groups[c.group]
        for dp in range(c.dp_min, c.dp_max + 1):
            used = c.gpus_per_replica * dp
            n = purchase(g, used)
            if g.fabric is None and n.servers > 1:
                continue  # without a network the plan must fit one server
            if g.rented and n.gpus != used:
                continue  # rented GPUs are billed: whole instances only
            if g.buy_cap is not None and n.gpus - n.owned_gpus > g.buy_cap:
                continue
            costs = solution_costs(table, t, (n,), c)
            if t.racks is not None and t.racks.max_racks is not None and costs.racks > t.racks.max_racks:
                continue
            tco = costs.capex + costs.opex(t) + costs.rent
            power = costs.power_w
            rate = c.replica_tokens_per_s * dp
            if t.required_tokens_per_s is not None and rate < t.required_tokens_per_s:
                continue
            if t.power_cap_w is not None and power > t.power_cap_w:
                continue
            spend = tco if t.budget_covers == "tco" else costs.capex + costs.rent
            if t.budget_usd is not None and spend > t.budget_usd:
                continue
            value = rate if t.objective == "min_time" else tco
            if best is None or (value > best if t.objective == "min_time" else value < best):
                best = value
    return best


def _check(seed: int, backend: str, extended: bool = False) -> None:
    rng = random.Random(seed)
    table, targets = random_instance(rng, random.Random(seed * 7 + 1) if extended else None,
                                     random.Random(seed * 13 + 5))
    expected = brute_force(table, targets)
    sol = solve(table, targets, backend, time_limit_s=20, mip_gap=0.0)
    if expected is None:
        assert sol.status == Status.INFEASIBLE, (seed, sol)
        return
    assert sol.status == Status.OPTIMAL, seed
    assert math.isclose(sol.objective, expected, rel_tol=1e-6, abs_tol=1e-6), (seed, sol.objective, expected)
    # the reported plan achieves the objective it claims
    value = sol.tokens_per_s if targets.objective == "min_time" else sol.tco
    assert math.isclose(value, expected, rel_tol=1e-6, abs_tol=1e-6), seed


@pytest.mark.parametrize("seed", range(200))
def test_ortools_equals_brute_force(seed):
    _check(seed, "ortools")


@pytest.mark.parametrize("seed", range(0, 200, 5))
def test_pulp_equals_brute_force(seed):
    _check(seed, "pulp")


@pytest.mark.parametrize("seed", range(150))
def test_procurement_ortools_equals_brute_force(seed):
    """Owned inventory, rented offers (on demand and committed), availability caps, maintenance,
    installation and racks: the MIP still finds the brute-force optimum."""
    _check(seed, "ortools", extended=True)


@pytest.mark.parametrize("seed", range(0, 150, 5))
def test_procurement_pulp_equals_brute_force(seed):
    _check(seed, "pulp", extended=True)


def test_procurement_instances_cover_every_kind():
    kinds, racks = set(), set()
    for seed in range(150):
        table, targets = random_instance(random.Random(seed), random.Random(seed * 7 + 1))
        for g in table.groups.values():
            kinds.add("rented-job" if g.rented and not g.rent_hours else "rented" if g.rented
                      else "owned" if g.pool else "capped" if g.buy_cap is not None else "bought")
        if targets.racks is not None:
            racks.add(targets.racks.max_racks is not None)
    assert kinds == {"rented-job", "rented", "owned", "capped", "bought"}
    assert racks == {True, False}


def test_instances_cover_both_objectives_and_infeasibility():
    kinds = set()
    for seed in range(200):
        table, targets = random_instance(random.Random(seed))
        kinds.add((targets.objective, brute_force(table, targets) is None))
    assert kinds == {("min_cost", False), ("min_cost", True), ("min_time", False), ("min_time", True)}


def test_fast_pruning_keeps_exactly_what_the_dominance_rule_keeps():
    """prune_dominated (rate-ordered, tuple ranges) against the pairwise rule ``dominates``."""
    from optimizer.plans import dominates, prune_dominated

    for seed in range(50):
        rng = random.Random(seed)
        cands = []
        for i in range(rng.randint(5, 40)):
            tp, pp = rng.choice([1, 2, 4]), rng.choice([1, 2])
            lo = rng.randint(1, 10)
            plan = TrainPlan(tp=tp, pp=pp, dp=lo)
            cands.append(Candidate(f"g/c{i:02d}", rng.choice(["g1", "g2"]), plan, lo, lo + rng.randint(0, 10),
                                   rng.choice([1.0, 2.0, 3.0]) * tp * pp * rng.uniform(0.5, 1.5), 0.0))
        fast, pruned = prune_dominated(list(cands))
        order = sorted(cands, key=lambda c: (-c.replica_tokens_per_s / c.gpus_per_replica, c.gpus_per_replica,
                                             c.dp_min, -c.dp_max, c.key))
        reference: list[Candidate] = []
        for c in order:
            if not any(dominates(a, c) for a in reference):
                reference.append(c)
        assert {c.key for c in fast} == {c.key for c in reference}, seed
        assert pruned == len(cands) - len(reference)


def test_fabric_instances_reach_oversubscribed_two_tier_optima():
    """The random fabrics are not all single switches: some optima need leaves and spines at an
    oversubscription above 1, so the brute-force checks above cover constraint (6)'s two-tier rows."""
    seen = set()
    for seed in range(200):
        table, targets = random_instance(random.Random(seed), None, random.Random(seed * 13 + 5))
        sol = solve(table, targets, "ortools", time_limit_s=20, mip_gap=0.0)
        for p in sol.purchases:
            g = table.groups[p.group]
            if p.spine_switches:
                seen.add(g.oversubscription > 1)
    assert seen == {True, False}


@pytest.mark.parametrize("seed", range(0, 150, 3))
def test_screening_groups_gives_the_answer_of_the_program_over_every_group(seed, monkeypatch):
    """One training job: solving the groups one by one and then the best together (``screen_groups``)
    gives the optimum, and the tie-broken answer, of the one program over every group."""
    table, targets = random_instance(random.Random(seed), random.Random(seed * 7 + 1), random.Random(seed * 13 + 5))
    screened = solve(table, targets, "ortools", time_limit_s=20, mip_gap=0.0)
    monkeypatch.setattr(milp, "one_job", lambda table: False)
    whole = solve(table, targets, "ortools", time_limit_s=20, mip_gap=0.0)
    assert screened.status == whole.status, seed
    if whole.status is Status.OPTIMAL:
        assert math.isclose(screened.objective, whole.objective, rel_tol=1e-9, abs_tol=1e-9), seed
        assert math.isclose(screened.tco, whole.tco, rel_tol=1e-6, abs_tol=1e-6), seed
        assert math.isclose(screened.tokens_per_s, whole.tokens_per_s, rel_tol=1e-6, abs_tol=1e-6), seed


def test_screening_instances_have_several_groups():
    several = sum(len(random_instance(random.Random(s), random.Random(s * 7 + 1), random.Random(s * 13 + 5))[0].groups)
                  > 1 for s in range(0, 150, 3))
    assert several >= 25


@pytest.mark.parametrize("seed", range(0, 150, 3))
def test_screening_bounds_never_exceed_a_groups_own_optimum(seed):
    """The bound each group is screened by (rate ceiling for min_time, cost floor for min_cost) is
    no better than what the group alone reaches: skipping on it is exact."""
    from optimizer.milp.program import Program
    from optimizer.milp.screen import _bound

    table, targets = random_instance(random.Random(seed), random.Random(seed * 7 + 1), random.Random(seed * 13 + 5))
    for h, g in table.groups.items():
        cands = [c for c in table.candidates if c.group == h]
        one = replace(table, candidates=tuple(cands), groups={h: g})
        status, objective, _ = Program(one, targets, "ortools").optimise(targets, 20, 0.0)
        bound = _bound(cands, g, targets)
        if status is Status.OPTIMAL:
            assert (bound >= objective * (1 - 1e-9) if targets.objective == "min_time"
                    else bound <= objective * (1 + 1e-9) + 1e-6), (seed, h, bound, objective)
        elif targets.objective == "min_cost" and math.isinf(bound):
            assert status is Status.INFEASIBLE, (seed, h)
