"""What ``GET /api/v1/share`` answers: each member's fair share within its tenant (camelCase)."""

from __future__ import annotations

from kiban.api.schemas import ApiModel
from kiban.services.member_usage import MemberShare
from kiban.services.overview import SECONDS_PER_HOUR


class MemberShareOut(ApiModel):
    """A member of a tenant, as Slurm's ``sshare`` shows a user of an account.

    ``weight`` is its weight in the policy's ``fairShare.members`` (1 when not listed),
    ``share`` that weight's part of its tenant's members' weights. ``rawUsage`` and ``usage``
    are its undecayed and decayed weighted resource-seconds (``...GpuHours``: the same in
    hours, GPU-hours under the default weights); ``effective`` its part of its tenant's decayed
    usage; ``standing`` usage per weight, lowest first within the tenant, ``rank`` its place.
    A job submitted by no member counts for the member ``""``.
    """

    tenant: str
    member: str
    weight: float
    share: float
    raw_usage: float
    usage: float
    raw_usage_gpu_hours: float
    usage_gpu_hours: float
    effective: float
    standing: float
    rank: int


def member_share_out(share: MemberShare) -> MemberShareOut:
    return MemberShareOut(
        tenant=share.tenant,
        member=share.member,
        weight=share.weight,
        share=share.share,
        raw_usage=share.raw_usage,
        usage=share.usage,
        raw_usage_gpu_hours=share.raw_usage / SECONDS_PER_HOUR,
        usage_gpu_hours=share.usage / SECONDS_PER_HOUR,
        effective=share.effective,
        standing=share.standing,
        rank=share.rank,
    )
