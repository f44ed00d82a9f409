"""What a plan is: its request, its VRAM account, and how each token tier runs.

Plain values, so plans can be printed, compared, stored and sent between
threads; `engine.planning.planner` makes them and `engine.planning.execution` runs them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any

from engine.model.inventory import SubLayerKind

DEFAULT_TIERS = (1, 4, 16, 64, 256, 1024)
NEVER_OFFLOAD = 1 << 30  # an op-offload boundary no batch reaches

SubLayerKey = tuple[int | None, SubLayerKind]


class PlanFamily(str, Enum):
    GPU_ONLY = "gpu_only"
    STATIC = "static"
    DYNAMIC = "dynamic"
    CPU_ONLY = "cpu_only"


EXECUTABLE_FAMILIES = frozenset({PlanFamily.GPU_ONLY, PlanFamily.STATIC, PlanFamily.CPU_ONLY})


class Objective(str, Enum):
    INTERACTIVE = "interactive"  # time to first token and one chat's decode speed
    BATCH = "batch"  # aggregate throughput of n_parallel sequences


@dataclass(frozen=True)
class PlanRequest:
    vram_budget_bytes: int
    n_ctx: int = 4096
    n_parallel: int = 1
    objective: Objective = Objective.INTERACTIVE
    tiers: tuple[int, ...] = DEFAULT_TIERS
    prompt_tokens: int = 512  # the prompt time-to-first-token is predicted for
    # the one context's sequences beside the conversation (API clients, a job's documents)
    # and the KV cells they share: the account covers the whole context
    parallel_sequences: int = 0
    shared_cells: int = 0
    # False: each sequence a KV stream of the conversation's size (a headless server's
    # slots, engine.llama.load_params.KV_LAYOUT), not one pool
    kv_unified: bool = True

    @property
    def kv_cells(self) -> int:
        """The KV cells of the whole context: the conversation's window and the shared pool,
        or a window-sized stream for each sequence (the conversation's, the parallel ones
        and the one a batch job's opening is kept in)."""
        if not self.kv_unified:
            return self.n_ctx * (self.parallel_sequences + 2)
        return self.n_ctx + self.shared_cells

    def __post_init__(self) -> None:
        if self.vram_budget_bytes < 0:
            raise ValueError("the VRAM budget cannot be negative")
        if self.n_ctx < 16 or self.n_parallel < 1 or self.prompt_tokens < 1:
            raise ValueError("n_ctx must be >= 16, n_parallel and prompt_tokens >= 1")
        if not self.tiers or sorted(set(self.tiers)) != list(self.tiers) or self.tiers[0] < 1:
            raise ValueError("tiers must be increasing positive token counts")


@dataclass(frozen=True)
class VramAccount:
    """What the plan puts in VRAM; `total_bytes` never exceeds the budget."""

    budget_bytes: int
    weights_bytes: int
    kv_cache_bytes: int
    compute_bytes: int
    margin_bytes: int
    # of compute_bytes: the staging slots streamed weights are uploaded ahead through
    # (llama.cpp reports them in its compute buffer)
    staging_bytes: int = 0

    @property
    def total_bytes(self) -> int:
        return self.weights_bytes + self.kv_cache_bytes + self.compute_bytes + self.margin_bytes


@dataclass(frozen=True)
class FamilyEstimate:
    family: PlanFamily
    seconds: float  # one step of the tier
    streamed_bytes: int  # weights crossing PCIe per step
    executable: bool

    @property
    def tokens_per_s(self) -> float:
        return 0.0 if self.seconds <= 0 else 1.0 / self.seconds


@dataclass(frozen=True)
class TierPlan:
    tier: int
    chosen: FamilyEstimate
    others: tuple[FamilyEstimate, ...]

    @property
    def tokens_per_s(self) -> float:
        return self.tier / self.chosen.seconds

    @property
    def runner_up(self) -> FamilyEstimate | None:
        return min(self.others, key=lambda e: e.seconds, default=None)


@dataclass(frozen=True)
class Plan:
    """A placement and how every tier runs under it, with the llama.cpp parameters it needs."""

    model_name: str
    request: PlanRequest
    resident: tuple[SubLayerKey, ...]
    resident_tensor_names: tuple[str, ...]
    vram: VramAccount
    tiers: tuple[TierPlan, ...]
    n_gpu_layers: int
    n_threads: int
    n_threads_batch: int
    n_ubatch: int
    op_offload_min_batch: int
    reason: str
    predicted_ttft_s: float
    predicted_decode_tokens_per_s: float
    # flash attention (exact): no attention-score buffer, so more of a small budget for weights
    flash_attn: bool = True
    # staging slots its streamed prompt steps upload through ahead of the compute (0: serial),
    # and why that many (engine.planning.prefetch_choice)
    prefetch_slots: int = 0
    prefetch_reason: str = ""
    extras: dict[str, Any] = field(default_factory=dict)

    def tier_for(self, n_tokens: int) -> int:
        """The smallest tier that holds n_tokens new tokens (the largest for bigger steps)."""
        tiers = self.request.tiers
        return next((t for t in tiers if n_tokens <= t), tiers[-1])

    def family_for(self, n_tokens: int) -> PlanFamily:
        """The family a step of n_tokens executes as.

        Between two tiers the op-offload boundary decides, not the tier above: llama.cpp
        streams host weights to the GPU from that batch size on, whatever the tiers are.
        """
        tier = self.tier_for(n_tokens)
        chosen = next(t.chosen.family for t in self.tiers if t.tier == tier)
        if chosen in (PlanFamily.STATIC, PlanFamily.GPU_ONLY):
            return (
                PlanFamily.GPU_ONLY if n_tokens >= self.op_offload_min_batch else PlanFamily.STATIC
            )
        return chosen

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["resident"] = [[block, kind.value] for block, kind in self.resident]
        return data
