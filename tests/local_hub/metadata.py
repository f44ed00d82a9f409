"""A repository published on a LocalHub, and the JSON the Hub's API answers about it.

The shapes follow huggingface_hub 2.4's parsers (ModelInfo, RepoSibling,
RepoFile, RepoFolder) and what huggingface.co returns: a listing carries few
fields unless `expand`ed, model info carries most, ``blobs=true`` adds file
sizes, git blob ids and LFS hashes, and a GGUF repository has a "gguf" summary
taken from its first model file's header.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from .files import GgufHeader, HubFile, read_gguf_header

EXPANDABLE = frozenset(
    [
        *("author", "baseModels", "cardData", "childrenModelCount", "config", "createdAt"),
        *("disabled", "downloads", "downloadsAllTime", "evalResults", "gated", "gguf"),
        *("inference", "inferenceProviderMapping", "lastModified", "library_name", "likes"),
        *("mask_token", "model-index", "pipeline_tag", "private", "resourceGroup"),
        *("safetensors", "sha", "siblings", "spaces", "tags", "transformersInfo"),
        *("trendingScore", "usedStorage", "widgetData"),
    ]
)
# What GET /api/models returns per model without expand, full or cardData (as huggingface.co).
LIST_DEFAULT = [
    *("likes", "trendingScore", "private", "downloads", "tags", "pipeline_tag"),
    *("library_name", "createdAt", "modelId"),
]
LIST_FULL = [*LIST_DEFAULT, "author", "sha", "lastModified", "gated", "disabled", "siblings"]
INFO_DEFAULT = [
    *LIST_FULL,
    "cardData",
    "gguf",
    "spaces",
    "usedStorage",
    "widgetData",
]
_SORT_KEYS = {
    "downloads": "downloads",
    "likes": "likes",
    "createdAt": "created_at",
    "created_at": "created_at",
    "lastModified": "last_modified",
    "last_modified": "last_modified",
    "trendingScore": "trending_score",
    "trending_score": "trending_score",
}
GITATTRIBUTES = "*.gguf filter=lfs diff=lfs merge=lfs -text\n"


@dataclass
class Repo:
    repo_id: str
    files: dict[str, HubFile]
    lfs: set[str]
    sha: str
    card_data: dict[str, Any]
    gated: str | bool
    tags: list[str]
    downloads: int
    likes: int
    trending_score: int
    created_at: str
    last_modified: str
    pipeline_tag: str | None
    library_name: str | None
    gguf_info: dict[str, Any] | None
    _gguf_derived: bool = field(default=False, repr=False)

    @property
    def author(self) -> str:
        return self.repo_id.split("/")[0]

    @property
    def object_id(self) -> str:
        """The Hub's database id ("_id"): 24 hex digits."""
        return hashlib.sha1(self.repo_id.encode()).hexdigest()[:24]

    def is_lfs(self, path: str) -> bool:
        return path in self.lfs

    def gguf(self) -> dict[str, Any] | None:
        """The Hub's "gguf" summary, from the first GGUF (not a projector) whose header parses."""
        if self.gguf_info is None and not self._gguf_derived:
            self._gguf_derived = True
            self.gguf_info = derive_gguf_info(self.files)
        return self.gguf_info


def search(repos: list[Repo], params: Mapping[str, list[str]]) -> list[Repo]:
    """The repositories GET /api/models answers for these query parameters, in order:
    `search` (in the id, any case), `author`, every `filter` tag, `pipeline_tag`, `gated`,
    then `sort` (trending by default), descending unless `direction=1`."""
    if text := first(params, "search"):
        repos = [r for r in repos if text.lower() in r.repo_id.lower()]
    if author := first(params, "author"):
        repos = [r for r in repos if r.author.lower() == author.lower()]
    for wanted in params.get("filter", []) + params.get("filter[]", []):
        repos = [r for r in repos if wanted in r.tags or wanted == r.library_name]
    if pipeline_tag := first(params, "pipeline_tag"):
        repos = [r for r in repos if r.pipeline_tag == pipeline_tag]
    if (gated := first(params, "gated")) is not None:
        repos = [r for r in repos if bool(r.gated) == true(gated)]
    sort = first(params, "sort") or "trendingScore"
    if sort not in _SORT_KEYS:
        raise ValueError(f"Invalid sort: {sort}")
    ordered = sorted(repos, key=lambda r: r.repo_id)
    descending = first(params, "direction") != "1"
    return sorted(ordered, key=lambda r: getattr(r, _SORT_KEYS[sort]), reverse=descending)


def first(params: Mapping[str, list[str]], name: str) -> str | None:
    values = params.get(name)
    return values[0] if values else None


def true(value: str | None) -> bool:
    return value is not None and value.lower() in ("1", "true", "yes")


def derive_gguf_info(files: Mapping[str, HubFile]) -> dict[str, Any] | None:
    for path in sorted(files):
        name = path.rsplit("/", 1)[-1]
        if not name.endswith(".gguf") or name.startswith("mmproj"):
            continue
        header = gguf_header(files[path])
        if header is None:
            continue
        arch = header.architecture
        info: dict[str, Any] = {"total": header.parameter_count, "architecture": arch}
        if (context := header.value(f"{arch}.context_length")) is not None:
            info["context_length"] = context
        if (template := header.value("tokenizer.chat_template")) is not None:
            info["chat_template"] = template
        tokens = header.value("tokenizer.ggml.tokens") or []
        for key, id_key in (("bos_token", "bos_token_id"), ("eos_token", "eos_token_id")):
            token_id = header.value(f"tokenizer.ggml.{id_key}")
            if token_id is not None and 0 <= token_id < len(tokens):
                info[key] = tokens[token_id]
        return info
    return None


def gguf_header(file: HubFile) -> GgufHeader | None:
    """The header of a GGUF file, reading 1 MiB, then more while it runs on (64 MiB at most)."""
    n_bytes = 1 << 20
    while True:
        try:
            data = file.read(0, min(n_bytes, file.size))
            if data[:4] != b"GGUF":
                return None
            return read_gguf_header(data)
        except (ValueError, OSError):
            if n_bytes >= min(file.size, 64 << 20):
                return None
            n_bytes *= 4


def with_card(
    files: Mapping[str, HubFile], card: str, front: Mapping[str, Any]
) -> tuple[dict[str, HubFile], dict[str, Any]]:
    """`files` with a README.md (from `card` under `front` as YAML front matter, unless they
    hold one: then its own front matter counts) and a .gitattributes; and the front matter."""
    repo_files = dict(files)
    if "README.md" in repo_files:
        front = front_matter(repo_files["README.md"])
    elif card or front:
        repo_files["README.md"] = HubFile.from_bytes(card_text(card, front).encode())
    repo_files.setdefault(".gitattributes", HubFile.from_bytes(GITATTRIBUTES.encode()))
    return repo_files, dict(front)


def hub_tags(tags: Sequence[str], pipeline_tag: str | None, front: Mapping[str, Any]) -> list[str]:
    """The tags the Hub shows: the repository's, its pipeline, its licence, and two it adds."""
    shown = list(tags)
    for extra in (pipeline_tag, f"license:{front['license']}" if "license" in front else None):
        if extra and extra not in shown:
            shown.append(extra)
    return [*shown, "endpoints_compatible", "region:us"]


def card_text(card: str, front_matter: Mapping[str, Any]) -> str:
    if not front_matter:
        return card
    yaml_text = yaml.safe_dump(dict(front_matter), sort_keys=False, allow_unicode=True)
    return f"---\n{yaml_text}---\n\n{card}"


def front_matter(readme: HubFile) -> dict[str, Any]:
    if readme.size > 1 << 20:
        return {}
    text = readme.read().decode("utf-8", errors="replace")
    match = re.match(r"---\n(.*?)\n---\n", text, re.S)
    if not match:
        return {}
    try:
        loaded = yaml.safe_load(match.group(1))
    except yaml.YAMLError:
        return {}
    return loaded if isinstance(loaded, dict) else {}


def commit_sha(
    repo_id: str, generation: int, files: Mapping[str, HubFile], card: str, front: Mapping
) -> str:
    digest = hashlib.sha1(f"{repo_id}\0{generation}\0{card}\0{sorted(front.items())!r}".encode())
    for path in sorted(files):
        digest.update(f"\0{path}\0{files[path].fingerprint}".encode())
    return digest.hexdigest()


def model_json(repo: Repo, properties: Sequence[str], blobs: bool) -> dict:
    values: dict[str, Any] = {"_id": repo.object_id, "id": repo.repo_id}
    for name in properties:
        value = _model_property(repo, name, blobs)
        if value is not _ABSENT:
            values[name] = value
    return values


_ABSENT = object()


def _model_property(repo: Repo, name: str, blobs: bool) -> Any:
    simple = {
        "modelId": repo.repo_id,
        "author": repo.author,
        "sha": repo.sha,
        "lastModified": repo.last_modified,
        "createdAt": repo.created_at,
        "private": False,
        "gated": repo.gated,
        "disabled": False,
        "downloads": repo.downloads,
        "downloadsAllTime": repo.downloads,
        "likes": repo.likes,
        "trendingScore": repo.trending_score,
        "tags": list(repo.tags),
        "spaces": [],
        "widgetData": None,
    }
    if name in simple:
        return simple[name]
    if name == "library_name":
        return repo.library_name if repo.library_name else _ABSENT
    if name == "pipeline_tag":
        return repo.pipeline_tag if repo.pipeline_tag else _ABSENT
    if name == "cardData":
        return dict(repo.card_data) if repo.card_data else _ABSENT
    if name == "siblings":
        return [_sibling(repo, path, blobs) for path in sorted(repo.files)]
    if name == "gguf":
        info = repo.gguf()
        return dict(info) if info is not None else _ABSENT
    if name == "usedStorage":
        return sum(file.size for file in repo.files.values())
    return _ABSENT


def _sibling(repo: Repo, path: str, blobs: bool) -> dict[str, Any]:
    if not blobs:
        return {"rfilename": path}
    file = repo.files[path]
    sibling: dict[str, Any] = {"rfilename": path, "size": file.size, "blobId": file.git_oid}
    if repo.is_lfs(path):
        sibling["lfs"] = {
            "sha256": file.sha256,
            "size": file.size,
            "pointerSize": len(file.lfs_pointer),
        }
    return sibling


def folders_of(repo: Repo) -> set[str]:
    folders: set[str] = set()
    for path in repo.files:
        parts = path.split("/")[:-1]
        folders.update("/".join(parts[: i + 1]) for i in range(len(parts)))
    return folders


def tree_entries(repo: Repo, path: str, recursive: bool) -> list[str] | None:
    """Paths under folder `path` ("" = root), folders before files at each level; None if no
    such folder."""
    folders = folders_of(repo)
    if path and path not in folders:
        return None
    prefix = f"{path}/" if path else ""
    below = sorted(p for p in [*folders, *repo.files] if p.startswith(prefix) and p != path)
    if not recursive:
        below = [p for p in below if "/" not in p[len(prefix) :]]
    return sorted(below, key=lambda p: (p.split("/")[:-1], p not in folders, p))


def entry_json(repo: Repo, path: str, expanded: bool) -> dict[str, Any]:
    file = repo.files.get(path)
    if file is None:
        entry: dict[str, Any] = {
            "type": "directory",
            "oid": hashlib.sha1(f"tree {repo.sha} {path}".encode()).hexdigest(),
            "size": 0,
            "path": path,
        }
    else:
        entry = {"type": "file", "oid": file.git_oid, "size": file.size, "path": path}
        if repo.is_lfs(path):
            entry["lfs"] = {
                "oid": file.sha256,
                "size": file.size,
                "pointerSize": len(file.lfs_pointer),
            }
    if expanded:
        entry["lastCommit"] = {"id": repo.sha, "title": "Upload", "date": repo.last_modified}
        if file is not None:
            entry["securityFileStatus"] = {
                "status": "safe",
                "avScan": {"virusFound": False, "virusNames": None},
                "pickleImportScan": None,
            }
    return entry
