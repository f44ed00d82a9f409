"""How fast a model on the Hub would run here, known before a byte of its weights arrives.

The planner needs only the inventory, and the inventory only the headers, so
each quant of a repository is planned exactly as a local file would be: its
headers fetched by range (app.hub.remote_header; every part of a split model,
since each holds its own share of the tensor table), cached by commit in the
hub store, and planned for this machine's profile at the VRAM budget and
context length the person has chosen. The figures are the planner's own:
decode tokens/s, time to first token for a 512-token prompt, and what share of
the weights stays in VRAM; a model whose host-side weights do not fit in RAM
is marked (llama.cpp would page it from disk, far slower than predicted).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from app.hub.gguf_files import RemoteModel
from app.hub.remote_file import RemoteFileRef
from app.hub.remote_header import fetch_header
from app.stores.hub_store import HubStore
from engine.errors import ModelFileError
from engine.machine.profile import Profile
from engine.model.gguf_header import GGUFHeader, parse_header
from engine.model.inventory import ModelInventory, inventory_from_headers
from engine.planning.placement_choice import AUTO, plan_for_choice
from engine.planning.plan import Plan, PlanRequest
from engine.planning.prediction_range import Sureness, sureness

log = logging.getLogger(__name__)

PROMPT_TOKENS = 512
READABLE_TOKENS_PER_S = 5.0  # below this, people stop reading along and wait
HOST_RESERVE_BYTES = 2 << 30  # what the OS and the app itself keep of RAM
GPU_RESERVE_BYTES = 512 << 20  # as app.model_lifecycle.auto_budget leaves for the desktop
Q4_BITS_PER_WEIGHT = 4.85  # Q4_K_M's average, embeddings and 6-bit layers included


@dataclass(frozen=True)
class FetchedInventory:
    inventory: ModelInventory
    fetched_bytes: int  # 0 when every header came from the cache
    fetched_by_file: dict[str, int]


@dataclass(frozen=True)
class Prediction:
    """The planner's verdict on one remote model, for this machine and budget."""

    plan: Plan
    decode_tokens_per_s: float
    ttft_s: float
    resident_share: float  # of the weights' bytes, in VRAM
    host_bytes: int  # weights left in host memory
    fits_ram: bool
    sureness: Sureness  # how far the figures may be off, for the range shown

    @property
    def readable(self) -> bool:
        return self.fits_ram and self.decode_tokens_per_s >= READABLE_TOKENS_PER_S


def remote_inventory(
    model: RemoteModel, endpoint: str, repo_id: str, revision: str, headers: dict[str, str],
    store: HubStore,
) -> FetchedInventory:  # fmt: skip
    """The model's inventory from its parts' headers, fetched or from the cache."""
    parsed: list[GGUFHeader] = []
    fetched: dict[str, int] = {}
    for part in model.parts:
        cached = store.header(repo_id, revision, part.path)
        if cached is not None:
            parsed.append(parse_header(cached[0]))
            continue
        ref = RemoteFileRef(endpoint, repo_id, revision, part.path)
        remote = fetch_header(ref, headers)
        store.keep_header(repo_id, revision, part.path, remote.raw, part.size, remote.fetched_bytes)
        parsed.append(remote.header)
        fetched[part.path] = remote.fetched_bytes
    inventory = inventory_from_headers(parsed, f"hf://{repo_id}/{model.path}", model.size)
    return FetchedInventory(inventory, sum(fetched.values()), fetched)


def predict(
    inventory: ModelInventory, profile: Profile, budget_bytes: int, n_ctx: int, gpu: int = 0
) -> Prediction:
    """Plan the model at this budget and context; raises ValueError for an impossible budget."""
    request = PlanRequest(budget_bytes, n_ctx=n_ctx, prompt_tokens=PROMPT_TOKENS)
    plan = plan_for_choice(inventory, profile, request, AUTO, gpu)
    weights = max(1, inventory.tensor_bytes)
    host = max(0, inventory.tensor_bytes - plan.vram.weights_bytes)
    return Prediction(
        plan=plan,
        decode_tokens_per_s=plan.predicted_decode_tokens_per_s,
        ttft_s=plan.predicted_ttft_s,
        resident_share=min(1.0, plan.vram.weights_bytes / weights),
        host_bytes=host,
        fits_ram=host + HOST_RESERVE_BYTES <= host_memory_bytes(profile),
        sureness=sureness(profile),
    )


def default_budget(profile: Profile) -> int:
    """The budget when the person set none: the profiled GPU less a reserve, else 0."""
    if profile.gpu is None:
        return 0
    return max(0, profile.gpu.vram_total_bytes - GPU_RESERVE_BYTES)


def may_fit(n_params: int, profile: Profile, budget_bytes: int) -> bool:
    """Whether a model of `n_params` can run here at all in a 4-bit quant (Q4_K_M: about 4.8
    bits a weight): what a search can tell before any file of it is read."""
    weights = n_params * Q4_BITS_PER_WEIGHT / 8
    return weights + HOST_RESERVE_BYTES <= host_memory_bytes(profile) + budget_bytes


def host_memory_bytes(profile: Profile) -> int:
    memory = (profile.hardware or {}).get("memory") or {}
    return int(memory.get("total_bytes") or 0)


def recommended(
    models: list[RemoteModel], prediction_of: Callable[[RemoteModel], Prediction | None]
) -> RemoteModel | None:
    """The largest quant still readable here (≥ 5 tokens/s and fits RAM); else the fastest."""
    scored = [(m, p) for m in models if (p := prediction_of(m)) is not None]
    readable = [(m, p) for m, p in scored if p.readable]
    if readable:
        return max(readable, key=lambda mp: mp[0].size)[0]
    fitting = [(m, p) for m, p in scored if p.fits_ram]
    if fitting:
        return max(fitting, key=lambda mp: mp[1].decode_tokens_per_s)[0]
    return None


@dataclass(frozen=True)
class QuantReading:
    """One quant of a repository as read from the Hub: its inventory, or why there is none."""

    model: RemoteModel
    fetched: FetchedInventory | None
    problem: str | None = None

    @property
    def inventory(self) -> ModelInventory | None:
        return self.fetched.inventory if self.fetched else None


def read_quants(
    models: Sequence[RemoteModel], endpoint: str, repo_id: str, revision: str,
    headers: dict[str, str], store: HubStore,
) -> list[QuantReading]:  # fmt: skip
    """Every quant's inventory; a file that is not a usable GGUF gets its reason, not a crash.

    The Hub being unreachable or refusing (gated) is not a problem of one file: it is
    raised, so the caller says it once.
    """
    readings = []
    for model in models:
        if model.missing_parts:
            readings.append(QuantReading(model, None, f"{model.missing_parts} part(s) missing"))
            continue
        try:
            fetched = remote_inventory(model, endpoint, repo_id, revision, headers, store)
        except ModelFileError as exc:
            readings.append(QuantReading(model, None, str(exc)))
            continue
        readings.append(QuantReading(model, fetched))
    return readings


def predict_quants(
    readings: Sequence[QuantReading], profile: Profile, budget_bytes: int, n_ctx: int
) -> dict[str, Prediction | None]:
    """Each readable quant's prediction by its path (None where the planner cannot plan it)."""
    predictions: dict[str, Prediction | None] = {}
    for reading in readings:
        inventory = reading.inventory
        if inventory is None:
            predictions[reading.model.path] = None
            continue
        try:
            predictions[reading.model.path] = predict(inventory, profile, budget_bytes, n_ctx)
        except ValueError as exc:
            log.info("cannot plan %s: %s", reading.model.path, exc)
            predictions[reading.model.path] = None
    return predictions
