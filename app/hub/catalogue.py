"""Searching Hugging Face for GGUF models and listing what one repository offers.

Through huggingface_hub's `HfApi` (search, model info, repository tree), so the
Hub's own paging, headers and retries (`http_backoff`) are used and a mirror set
with `HF_ENDPOINT` works. Each call first asks whether the Hub can be reached at
all (app.hub.connection), so no connection is one line at once, not 25 s of
retries. Calls that huggingface_hub makes without retrying (model info) are
retried here with tenacity on 429 and 5xx answers.

A repository's files become `RemoteModel`s (app.hub.gguf_files): one per quant,
split parts together, each with its vision projector. The model card gives a
summary (its first paragraph of prose) and the licence.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal, TypeVar

from huggingface_hub import HfApi, ModelCard
from huggingface_hub.errors import HfHubHTTPError
from huggingface_hub.hf_api import ModelInfo, RepoFile
from huggingface_hub.utils import http_backoff
from tenacity import Retrying as _Retrying
from tenacity import retry_if_exception, stop_after_attempt, wait_exponential

from app.hub.connection import require_connection
from app.hub.gguf_files import RemoteFile, RemoteModel, group_models
from app.hub.hub_errors import TRANSIENT_STATUS, hub_errors
from app.hub.hub_settings import hub_endpoint, hub_token
from app.hub.remote_file import RemoteFileRef
from app.hub.search_order import SORT_KEYS

log = logging.getLogger(__name__)

Sort = Literal["downloads", "likes", "recent"]
Kind = Literal["text", "moe", "vision"]
VISION_TAGS = frozenset({"image-text-to-text", "visual-question-answering", "image-to-text"})
_MOE_ARCH = re.compile(r"moe|mixtral|deepseek2|dbrx|arctic|granitemoe|gpt-?oss|llama4", re.I)
_SUMMARY_SKIP = re.compile(r"^\s*(#|!\[|<|\||\[!|```|>|---|\*\*\*|-\s|\*\s|\d+\.\s)")
_SEARCH_EXPAND = ["downloads", "likes", "lastModified", "createdAt", "tags", "pipeline_tag",
                  "gated", "gguf", "cardData"]  # fmt: skip
MAX_SUMMARY_CHARS = 400
T = TypeVar("T")


@dataclass(frozen=True)
class RepoSummary:
    """One search result: enough to list it and filter it."""

    repo_id: str
    downloads: int
    likes: int
    last_modified: datetime | None
    pipeline_tag: str | None
    tags: tuple[str, ...]
    gated: bool
    n_params: int | None  # from the Hub's own reading of the GGUF
    architecture: str | None
    license: str | None

    @property
    def kind(self) -> Kind:
        if self.pipeline_tag in VISION_TAGS or VISION_TAGS.intersection(self.tags):
            return "vision"
        if self.architecture and _MOE_ARCH.search(self.architecture):
            return "moe"
        return "text"


@dataclass(frozen=True)
class RepoDetails:
    """A repository at one commit: its models by quant, card summary, licence, gating."""

    repo_id: str
    revision: str  # the commit sha the files were listed at
    models: tuple[RemoteModel, ...]
    summary: str
    license: str | None
    gated: bool
    files: tuple[RemoteFile, ...]


class Catalogue:
    """The Hub as ShardChat uses it; one per thread (huggingface_hub's client is shared)."""

    def __init__(self, endpoint: str | None = None, token: str | None = None) -> None:
        self.endpoint = (endpoint or hub_endpoint()).rstrip("/")
        found = hub_token()
        self.token = token if token is not None else (found.value if found else None)
        self._api = HfApi(endpoint=self.endpoint, token=self.token or False)

    def search(
        self,
        query: str,
        *,
        kind: Kind | None = None,
        sort: Sort = "downloads",
        limit: int = 30,
        max_params: int | None = None,
    ) -> list[RepoSummary]:
        """GGUF repositories whose name holds `query`, best first by `sort`."""
        require_connection(self.endpoint)
        with hub_errors(self.endpoint, has_token=bool(self.token)):
            found = self._api.list_models(
                search=query or None,
                filter="gguf",
                sort=SORT_KEYS[sort],  # type: ignore[arg-type]
                limit=limit if kind is None and max_params is None else limit * 4,
                expand=_SEARCH_EXPAND,  # type: ignore[arg-type]
            )
            results = [_summary(info) for info in found]
        results = [r for r in results if kind is None or r.kind == kind]
        if max_params is not None:
            results = [r for r in results if r.n_params is not None and r.n_params <= max_params]
        return results[:limit]

    def details(self, repo_id: str, revision: str = "main") -> RepoDetails:
        """The repository's GGUF models at `revision`, listed at the commit it resolves to."""
        require_connection(self.endpoint)
        with hub_errors(self.endpoint, repo_id, has_token=bool(self.token)):
            info = _retrying(lambda: self._api.model_info(repo_id, revision=revision))
            commit = info.sha or revision
            tree = self._api.list_repo_tree(repo_id, revision=commit, recursive=True)
            files = tuple(_remote_file(f) for f in tree if isinstance(f, RepoFile))
            card = self._card(repo_id, commit, files)
        return RepoDetails(
            repo_id=repo_id,
            revision=commit,
            models=tuple(group_models(files)),
            summary=card_summary(card.text) if card else "",
            license=_license(info, card),
            gated=bool(info.gated),
            files=files,
        )

    def auth_headers(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self.token}"} if self.token else {}

    def _card(self, repo_id: str, commit: str, files: Sequence[RemoteFile]) -> ModelCard | None:
        if not any(f.path == "README.md" for f in files):
            return None
        response = http_backoff(
            "GET",
            RemoteFileRef(self.endpoint, repo_id, commit, "README.md").url,
            headers=self.auth_headers(),
        )
        if response.status_code != 200:
            log.info("no model card for %s (HTTP %s)", repo_id, response.status_code)
            return None
        return ModelCard(response.text)


def card_summary(text: str) -> str:
    """The card's first paragraph of prose: what people read before deciding."""
    for paragraph in re.split(r"\n\s*\n", text):
        lines = [line.strip() for line in paragraph.strip().splitlines()]
        if not lines or any(_SUMMARY_SKIP.match(line) for line in lines):
            continue
        summary = " ".join(lines)
        if len(summary) > MAX_SUMMARY_CHARS:
            summary = summary[: MAX_SUMMARY_CHARS - 1].rsplit(" ", 1)[0] + "…"
        return summary
    return ""


def _retrying(call: Callable[[], T]) -> T:
    """Retry a call huggingface_hub itself does not retry, on 429 and 5xx only."""
    for attempt in _Retrying(
        retry=retry_if_exception(_is_transient),
        stop=stop_after_attempt(4),
        wait=wait_exponential(multiplier=0.5, max=8),
        reraise=True,
    ):
        with attempt:
            return call()
    raise AssertionError("unreachable: tenacity reraises")  # pragma: no cover


def _is_transient(exc: BaseException) -> bool:
    response = getattr(exc, "response", None)
    return isinstance(exc, HfHubHTTPError) and (
        getattr(response, "status_code", None) in TRANSIENT_STATUS
    )


def _summary(info: ModelInfo) -> RepoSummary:
    gguf = info.gguf or {}
    total = gguf.get("total")
    return RepoSummary(
        repo_id=info.id,
        downloads=info.downloads or 0,
        likes=info.likes or 0,
        last_modified=info.last_modified,
        pipeline_tag=info.pipeline_tag,
        tags=tuple(info.tags or ()),
        gated=bool(info.gated),
        n_params=int(total) if isinstance(total, (int, float)) else None,
        architecture=gguf.get("architecture"),
        license=_license(info, None),
    )


def _remote_file(file: RepoFile) -> RemoteFile:
    return RemoteFile(file.path, int(file.size), file.lfs.sha256 if file.lfs else None)


def _license(info: ModelInfo, card: ModelCard | None) -> str | None:
    for data in (info.card_data, card.data if card else None):
        value = getattr(data, "license", None) if data is not None else None
        if value:
            return str(value)
    return None
