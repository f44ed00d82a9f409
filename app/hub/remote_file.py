"""Naming one file of one repository at one commit, as every Hub request needs it."""

from __future__ import annotations

from dataclasses import dataclass

from huggingface_hub import hf_hub_url


@dataclass(frozen=True)
class RemoteFileRef:
    endpoint: str
    repo_id: str
    revision: str  # a commit sha when known, so every range reads the same bytes
    path: str

    @property
    def url(self) -> str:
        """The `resolve` URL: it redirects to the CDN that serves the bytes."""
        return hf_hub_url(self.repo_id, self.path, revision=self.revision, endpoint=self.endpoint)

    @property
    def label(self) -> str:
        return f"{self.repo_id}/{self.path}"
