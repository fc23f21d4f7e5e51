"""The per-GPU rules (``models.rules.gpu``): hand-made cases with the rule each must break, and the
agreement of the occupancy's start check with the validator's check of the whole set."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuplan.models.catalog import default_catalog
from gpuplan.models.cluster import EXCLUSIVE, Sharing, TimeSliced
from gpuplan.models.plan import GpuUse
from gpuplan.models.rules.gpu import GpuState, GpuUser, gpu_breaches

CATALOG = default_catalog()
H100 = CATALOG.model("H100-80GB")  # 81920 MiB; 3g.40gb starts at 0 or 4, 1g.10gb at 0-6
L40S = CATALOG.model("L40S")  # 49152 MiB, no MIG


def _ts(replicas: int) -> Sharing:
    return TimeSliced.model_validate({"time-slicing": {"replicas": replicas}})


def _whole(mem: int = 0) -> GpuUser:
    return GpuUser(GpuUse(index=0), mem)


def _frac(milli: int, mem: int = 0) -> GpuUser:
    return GpuUser(GpuUse(index=0, milli=milli), mem)


def _mig(profile: str, start: int, mem: int = 0) -> GpuUser:
    return GpuUser(GpuUse(index=0, mig_profile=profile, mig_start=start), mem)


PLAIN = GpuState(L40S, None, None)
MIG = GpuState(H100, frozenset({("3g.40gb", 0), ("1g.10gb", 4), ("1g.10gb", 5)}), None)


def _rules(users: list[GpuUser], gpu: GpuState) -> list[str]:
    return [b.rule for b in gpu_breaches(users, gpu)]


def test_a_lone_use_breaks_nothing() -> None:
    assert _rules([_whole()], PLAIN) == []
    assert _rules([_frac(999)], PLAIN) == []
    assert _rules([_mig("3g.40gb", 0)], MIG) == []


def test_a_whole_gpu_has_one_user() -> None:
    assert _rules([_whole(), _whole()], PLAIN) == ["whole-exclusive"]
    assert _rules([_whole(), _frac(100)], PLAIN) == ["whole-exclusive"]


def test_fractions_add_up_to_one_gpu_at_most() -> None:
    assert _rules([_frac(500), _frac(500)], PLAIN) == []
    (b,) = gpu_breaches([_frac(600), _frac(300), _frac(200)], PLAIN)
    assert (b.rule, b.amount, b.limit, b.users) == ("gpu-overcommit", 1100, 1000, (0, 1, 2))


def test_mig_mode_excludes_whole_and_fractional_use() -> None:
    assert _rules([_whole()], MIG) == ["mig-mixed-fraction"]
    assert _rules([_mig("3g.40gb", 0), _frac(100)], MIG) == ["mig-mixed-fraction"]
    assert _rules([_mig("3g.40gb", 0)], GpuState(H100, None, None)) == ["mig-layout-mismatch"]
    assert _rules([_mig("3g.40gb", 0)], PLAIN) == ["gpu-model"]  # an L40S offers no MIG profile


def test_mig_uses_name_an_instance_at_a_valid_start_once() -> None:
    assert _rules([_mig("3g.40gb", 4)], MIG) == ["mig-layout-mismatch"]  # valid start, not in the layout
    assert _rules([_mig("3g.40gb", 2)], MIG) == ["mig-start"]  # 3g.40gb starts at 0 or 4 only
    assert _rules([_mig("5g.60gb", 0)], MIG) == ["gpu-model"]
    assert _rules([_mig("1g.10gb", 4), _mig("1g.10gb", 5)], MIG) == []
    assert _rules([_mig("1g.10gb", 4), _mig("1g.10gb", 4)], MIG) == ["mig-instance-shared"]


def test_the_sharing_mode_decides_whole_or_fractions_and_how_many() -> None:
    assert _rules([_frac(100)], GpuState(L40S, None, EXCLUSIVE)) == ["sharing-mode"]
    assert _rules([_whole()], GpuState(L40S, None, _ts(4))) == ["sharing-mode"]
    ts2 = GpuState(L40S, None, _ts(2))
    assert _rules([_frac(100), _frac(100)], ts2) == []
    assert _rules([_frac(100), _frac(100), _frac(100)], ts2) == ["sharing-replicas"]
    # the mode concerns non-MIG GPUs only
    assert _rules([_mig("3g.40gb", 0)], GpuState(H100, MIG.mig, EXCLUSIVE)) == []


def test_gpu_memory_holds_what_replicas_ask() -> None:
    assert _rules([_frac(300, 30_000), _frac(300, 19_152)], PLAIN) == []  # 49,152 MiB exactly
    (b,) = gpu_breaches([_frac(300, 30_000), _frac(300, 20_000)], PLAIN)
    assert (b.rule, b.amount, b.limit) == ("gpu-memory", 50_000, 49_152)
    assert _rules([_whole(50_000)], PLAIN) == ["gpu-memory"]
    # the catalog's observed size of a 3g.40gb instance on an H100-80GB: 39.5 GiB
    assert _rules([_mig("3g.40gb", 0, 40_448)], MIG) == []
    assert _rules([_mig("3g.40gb", 0, 40_960)], MIG) == ["gpu-memory"]
    assert _rules([_mig("3g.40gb", 0, 50_000)], MIG) == ["gpu-memory"]


USES = st.one_of(
    st.builds(_whole, st.sampled_from([0, 40_000, 50_000])),
    st.builds(_frac, st.integers(1, 999), st.sampled_from([0, 10_000, 30_000])),
    st.builds(_mig, st.sampled_from(["3g.40gb", "1g.10gb"]), st.integers(0, 6), st.sampled_from([0, 20_000])),
)
STATES = st.sampled_from(
    [PLAIN, MIG, GpuState(L40S, None, EXCLUSIVE), GpuState(L40S, None, _ts(3)), GpuState(H100, None, None)]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(USES, max_size=5), STATES)
def test_users_joined_one_at_a_time_never_break_a_rule(users: list[GpuUser], gpu: GpuState) -> None:
    """The occupancy's rule: a user joins when no breach of the set with it concerns it. A set built
    that way breaks no rule as a whole, which is what the validator checks."""
    kept: list[GpuUser] = []
    for u in users:
        if not any(len(kept) in b.users for b in gpu_breaches([*kept, u], gpu)):
            kept.append(u)
    assert gpu_breaches(kept, gpu) == []
