"""One or two models from the Hub for this machine, offered when profiling has just finished.

A person who has only the tiny built-in model wants to hear what this machine can
run well. The catalogue's most downloaded GGUF repositories are the candidates
(popular models have the best-kept quants); each is kept only if a 4-bit quant of
its size can fit RAM and the VRAM budget at all (`may_fit`, from the Hub's own
parameter count, before any file is read), then one quant of it, the first of
`PREFERRED_QUANTS` it has, is planned from its header alone (a few MB by range)
exactly as Discover plans it. A suggestion is one the planner predicts readable
here (at least 5 tokens/s, weights within RAM), with its speed and download size.

Gated repositories are passed over (a first-hour person has no token yet), and a
repository that cannot be read is skipped with a log line. No connection at all
is raised (`HubOfflineError`): the wizard says it is offline instead of suggesting.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from app.hub.catalogue import Catalogue, RepoSummary
from app.hub.gguf_files import RemoteModel
from app.hub.hub_errors import HubOfflineError
from app.hub.remote_plans import Prediction, may_fit, predict_quants, read_quants
from app.stores.hub_store import HubStore
from engine.errors import ShardChatError
from engine.machine.profile import Profile

log = logging.getLogger(__name__)

PREFERRED_QUANTS = ("Q4_K_M", "Q4_K_S", "Q4_0", "Q5_K_M", "Q6_K", "Q8_0")
CANDIDATES = 30  # most downloaded repositories looked at
MAX_PLANNED = 6  # repositories whose header is read, at most: a few MB each
N_CTX = 4096


@dataclass(frozen=True)
class ModelSuggestion:
    """A quant of a repository predicted to run well here."""

    repo_id: str
    model: RemoteModel
    prediction: Prediction

    @property
    def download_bytes(self) -> int:
        return self.model.download_size


def suggest_models(
    profile: Profile,
    budget_bytes: int,
    limit: int = 2,
    catalogue: Catalogue | None = None,
) -> list[ModelSuggestion]:
    """Up to `limit` models that the planner predicts readable on this machine, most
    downloaded first; raises HubOfflineError when the Hub cannot be reached at all."""
    catalogue = catalogue or Catalogue()
    found = catalogue.search("", sort="downloads", limit=CANDIDATES)
    fitting = [r for r in found if _worth_planning(r, profile, budget_bytes)]
    suggestions: list[ModelSuggestion] = []
    with HubStore() as store:
        for summary in fitting[:MAX_PLANNED]:
            suggestion = _plan_one(catalogue, store, summary, profile, budget_bytes)
            if suggestion is not None:
                suggestions.append(suggestion)
            if len(suggestions) == limit:
                break
    return suggestions


def _worth_planning(summary: RepoSummary, profile: Profile, budget_bytes: int) -> bool:
    if summary.gated or not summary.n_params:
        return False
    return may_fit(summary.n_params, profile, budget_bytes)


def _plan_one(
    catalogue: Catalogue, store: HubStore, summary: RepoSummary, profile: Profile, budget: int
) -> ModelSuggestion | None:
    """The repository's preferred quant, planned here; None when it would not run well."""
    try:
        details = catalogue.details(summary.repo_id)
        model = preferred_quant(details.models)
        if model is None:
            return None
        readings = read_quants(
            [model], catalogue.endpoint, details.repo_id, details.revision,
            catalogue.auth_headers(), store,
        )  # fmt: skip
    except HubOfflineError:
        raise
    except ShardChatError as exc:  # gated after all, gone, unreadable: the next one
        log.info("no suggestion from %s: %s", summary.repo_id, exc)
        return None
    prediction = predict_quants(readings, profile, budget, N_CTX).get(model.path)
    if prediction is None or not prediction.readable:
        return None
    return ModelSuggestion(details.repo_id, model, prediction)


def preferred_quant(models: tuple[RemoteModel, ...] | list[RemoteModel]) -> RemoteModel | None:
    """The first of PREFERRED_QUANTS the repository has, complete; else None."""
    by_quant = {(m.quant or "").upper(): m for m in models if not m.missing_parts}
    return next((by_quant[q] for q in PREFERRED_QUANTS if q in by_quant), None)
