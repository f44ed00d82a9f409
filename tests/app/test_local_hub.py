"""The local Hugging Face Hub speaks the Hub's protocol as huggingface_hub 2.4 and httpx2 see it.

Every check goes through the real client: HfApi's listings, file metadata from
the 302, hf_hub_download, http_backoff, and httpx2 Range requests that follow
the redirect to the CDN. Faults are checked by what a client observes.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable
from pathlib import Path

import gguf
import httpx2
import pytest
from huggingface_hub import HfApi, get_hf_file_metadata, hf_hub_download, hf_hub_url
from huggingface_hub.errors import (
    EntryNotFoundError,
    GatedRepoError,
    HfHubHTTPError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.hf_api import RepoFile, RepoFolder
from huggingface_hub.utils import http_backoff
from local_hub import LocalHub, TestRepos, publish_test_repos, read_gguf_header
from local_hub.files import HubFile, virtual_block

Q4 = "tiny-llama-Q4_0.gguf"
Q8 = "tiny-llama-Q8_0.gguf"
QWEN_Q4_K_M = "Qwen3-30B-A3B-Q4_K_M.gguf"


def _api(hub: LocalHub, token: str | bool = False) -> HfApi:
    return HfApi(endpoint=hub.url, token=token)


def _url(hub: LocalHub, repo_id: str, filename: str) -> str:
    return hf_hub_url(repo_id, filename, endpoint=hub.url)


def _local(repos: TestRepos, repo_id: str, filename: str) -> bytes:
    return repos.local_path(repo_id, filename).read_bytes()


# ---------------------------------------------------------------- listings


def test_list_models_searches_filters_sorts_and_expands(
    local_hub: LocalHub, hub_repos: TestRepos
) -> None:
    expand = ["gguf", "gated", "downloads", "likes", "sha", "cardData", "siblings", "author"]
    expand += ["pipeline_tag"]  # without it, no pipeline_tag: expand lists all that comes back
    models = list(
        _api(local_hub).list_models(
            search="tiny",
            filter="gguf",
            sort="downloads",
            limit=10,
            expand=expand,  # type: ignore[arg-type]
        )
    )

    assert [m.id for m in models] == [
        hub_repos.tiny_llama,
        hub_repos.tiny_vision,
        hub_repos.tiny_split,
    ]
    llama = models[0]
    assert (llama.downloads, llama.likes, llama.gated, llama.author) == (
        1000,
        10,
        False,
        "shardtest",
    )
    assert llama.sha == hub_repos.shas[hub_repos.tiny_llama]
    assert llama.card_data is not None and llama.card_data.license == "apache-2.0"
    assert {s.rfilename for s in llama.siblings or []} >= {Q8, Q4, "tiny-llama-F16.gguf"}
    header = read_gguf_header(_local(hub_repos, hub_repos.tiny_llama, Q8)[: 4 << 20])
    assert llama.gguf is not None
    assert llama.gguf["architecture"] == "llama"
    assert llama.gguf["total"] == header.parameter_count
    assert llama.gguf["context_length"] == 2048
    assert models[1].pipeline_tag == "image-text-to-text"


def test_list_models_limit_author_and_tag_filters(
    local_hub: LocalHub, hub_repos: TestRepos
) -> None:
    api = _api(local_hub)
    assert len(list(api.list_models(filter="gguf", sort="likes", limit=2))) == 2
    assert len(list(api.list_models(author="shardtest"))) == len(hub_repos.shas)
    vision = list(api.list_models(filter=["gguf", "image-text-to-text"]))
    assert [m.id for m in vision] == [hub_repos.tiny_vision]
    assert [m.id for m in api.list_models(search="TINY-llama")] == [hub_repos.tiny_llama]
    assert list(api.list_models(search="no-such-model")) == []


def test_list_models_default_fields_are_the_real_hubs(local_hub: LocalHub) -> None:
    """Without expand, huggingface.co leaves out gated, sha, author and gguf: so do we."""
    (model,) = _api(local_hub).list_models(search="Gated")
    assert model.downloads == 30 and model.tags and "gguf" in model.tags
    assert (model.gated, model.sha, model.author, model.gguf) == (None, None, None, None)
    (expanded,) = _api(local_hub).list_models(search="Gated", expand=["gated"])
    assert expanded.gated == "manual"


def test_listing_pages_follow_the_link_header(local_hub: LocalHub, hub_repos: TestRepos) -> None:
    local_hub.models_page_size = 2
    local_hub.tree_page_size = 2

    models = list(_api(local_hub).list_models(author="shardtest"))
    tree = list(_api(local_hub).list_repo_tree(hub_repos.tiny_llama))

    assert len(models) == len(hub_repos.shas)
    assert len(tree) == 6  # .gitattributes, README.md, config.json and three GGUFs
    pages = [r for r in local_hub.requests if r.path == "/api/models"]
    assert len(pages) == 3 and "cursor=2" in pages[1].query


def test_model_info_with_files_metadata(local_hub: LocalHub, hub_repos: TestRepos) -> None:
    info = _api(local_hub).model_info(hub_repos.tiny_llama, files_metadata=True)

    assert info.sha == hub_repos.shas[hub_repos.tiny_llama]
    assert info.gated is False
    assert info.card_data is not None and info.card_data.license == "apache-2.0"
    siblings = {s.rfilename: s for s in info.siblings or []}
    for name in (Q8, Q4, "tiny-llama-F16.gguf"):
        content = _local(hub_repos, hub_repos.tiny_llama, name)
        lfs = siblings[name].lfs
        assert siblings[name].size == len(content)
        assert lfs is not None and lfs.sha256 == hashlib.sha256(content).hexdigest()
    config = _local(hub_repos, hub_repos.tiny_llama, "config.json")
    assert siblings["config.json"].lfs is None
    assert siblings["config.json"].blob_id == _git_blob_id(config)


def test_model_info_at_a_revision_and_errors(local_hub: LocalHub, hub_repos: TestRepos) -> None:
    api = _api(local_hub)
    sha = hub_repos.shas[hub_repos.tiny_split]
    assert api.model_info(hub_repos.tiny_split, revision=sha).sha == sha
    with pytest.raises(RevisionNotFoundError):
        api.model_info(hub_repos.tiny_split, revision="v9")
    with pytest.raises(RepositoryNotFoundError) as anonymous:
        api.model_info("shardtest/No-Such-GGUF")
    with pytest.raises(RepositoryNotFoundError) as with_token:
        _api(local_hub, hub_repos.token).model_info("shardtest/No-Such-GGUF")
    assert (anonymous.value.response.status_code, with_token.value.response.status_code) == (
        401,
        404,
    )


def test_repo_tree_lists_folders_and_lfs_files(local_hub: LocalHub, hub_repos: TestRepos) -> None:
    api = _api(local_hub)
    tree = list(api.list_repo_tree(hub_repos.tiny_split, recursive=True, expand=True))
    top = list(api.list_repo_tree(hub_repos.tiny_split))
    inside = list(api.list_repo_tree(hub_repos.tiny_split, path_in_repo="Q8_0"))

    folders = [e.path for e in tree if isinstance(e, RepoFolder)]
    files = {e.path: e for e in tree if isinstance(e, RepoFile)}
    parts = [_part(1), _part(2)]
    assert folders == ["Q8_0"]
    assert set(parts) <= set(files)
    for part in parts:
        content = _local(hub_repos, hub_repos.tiny_split, part)
        entry = files[part]
        assert entry.size == len(content)
        assert entry.lfs is not None and entry.lfs.sha256 == hashlib.sha256(content).hexdigest()
        assert entry.last_commit is not None
    assert files["README.md"].lfs is None
    assert {e.path for e in top} == {".gitattributes", "README.md", "Q8_0", "tiny-split-Q4_0.gguf"}
    assert [e.path for e in inside] == parts
    with pytest.raises(EntryNotFoundError):
        list(api.list_repo_tree(hub_repos.tiny_split, path_in_repo="Q2_K"))


# ---------------------------------------------------------------- files


def test_file_metadata_comes_from_the_302(local_hub: LocalHub, hub_repos: TestRepos) -> None:
    content = _local(hub_repos, hub_repos.tiny_llama, Q4)
    meta = get_hf_file_metadata(_url(local_hub, hub_repos.tiny_llama, Q4), token=False)

    assert meta.size == len(content)
    assert meta.etag == hashlib.sha256(content).hexdigest()
    assert meta.commit_hash == hub_repos.shas[hub_repos.tiny_llama]
    assert meta.location.startswith(local_hub.cdn_url + "/cdn/")
    assert [(r.method, r.status) for r in local_hub.requests] == [("HEAD", 302)]

    readme = get_hf_file_metadata(_url(local_hub, hub_repos.tiny_llama, "README.md"), token=False)
    card = httpx2.get(_url(local_hub, hub_repos.tiny_llama, "README.md")).content
    assert readme.etag == _git_blob_id(card) and readme.size == len(card)
    assert card.startswith(b"---\nlicense: apache-2.0\n")


def test_hf_hub_download_round_trips(
    local_hub: LocalHub, hub_repos: TestRepos, tmp_path: Path
) -> None:
    for name in (Q4, "config.json"):
        path = hf_hub_download(
            hub_repos.tiny_llama, name, endpoint=local_hub.url, cache_dir=tmp_path, token=False
        )
        assert Path(path).read_bytes() == _local(hub_repos, hub_repos.tiny_llama, name)
        assert local_hub.bytes_served(hub_repos.tiny_llama, name) == Path(path).stat().st_size


def test_range_get_follows_the_redirect(local_hub: LocalHub, hub_repos: TestRepos) -> None:
    content = _local(hub_repos, hub_repos.tiny_llama, Q8)
    size = len(content)
    url = _url(local_hub, hub_repos.tiny_llama, Q8)
    with httpx2.Client(follow_redirects=True) as client:
        middle = client.get(url, headers={"Range": "bytes=1000-1999"})
        tail = client.get(url, headers={"Range": f"bytes={size - 5}-"})
        suffix = client.get(url, headers={"Range": "bytes=-7"})
        head = client.head(url)
        beyond = client.get(url, headers={"Range": f"bytes={size}-"})

    assert middle.status_code == 206 and middle.content == content[1000:2000]
    assert middle.headers["Content-Range"] == f"bytes 1000-1999/{size}"
    assert middle.headers["Accept-Ranges"] == "bytes"
    assert tail.content == content[-5:] and suffix.content == content[-7:]
    assert head.status_code == 200 and int(head.headers["Content-Length"]) == size
    assert head.content == b""
    assert beyond.status_code == 416 and beyond.headers["Content-Range"] == f"bytes */{size}"
    assert [r.status for r in local_hub.requests if r.path.startswith("/cdn/")] == [
        206,
        206,
        206,
        200,
        416,
    ]


def test_cdn_urls_must_keep_their_signature(local_hub: LocalHub, hub_repos: TestRepos) -> None:
    location = httpx2.head(_url(local_hub, hub_repos.tiny_llama, Q4)).headers["Location"]
    assert httpx2.head(location).status_code == 200
    assert httpx2.head(location.split("?")[0]).status_code == 403


def test_bytes_served_counts_body_bytes_only(local_hub: LocalHub, hub_repos: TestRepos) -> None:
    url = _url(local_hub, hub_repos.tiny_llama, Q8)
    with httpx2.Client(follow_redirects=True) as client:
        client.head(url)
        client.get(url, headers={"Range": "bytes=0-4095"})
        client.get(url, headers={"Range": "bytes=100-199"})
        client.get(_url(local_hub, hub_repos.tiny_llama, "config.json"))

    assert local_hub.bytes_served(hub_repos.tiny_llama, Q8) == 4096 + 100
    assert local_hub.bytes_served(hub_repos.tiny_llama, "config.json") == len(
        _local(hub_repos, hub_repos.tiny_llama, "config.json")
    )
    assert local_hub.bytes_served(hub_repos.tiny_llama, Q4) == 0
    local_hub.reset_counters()
    assert local_hub.bytes_served(hub_repos.tiny_llama, Q8) == 0 and local_hub.requests == []


# ---------------------------------------------------------------- the shape-true MoE


def test_shape_true_moe_header_over_http(local_hub: LocalHub, hub_repos: TestRepos) -> None:
    url = _url(local_hub, hub_repos.qwen3_moe, QWEN_Q4_K_M)
    meta = get_hf_file_metadata(url, token=False)
    with httpx2.Client(follow_redirects=True) as client:
        head = client.get(url, headers={"Range": "bytes=0-8388607"}).content
        last = client.get(url, headers={"Range": "bytes=-16"}).content

    header = read_gguf_header(head)
    assert head[:4] == b"GGUF" and header.version == 3
    assert meta.size is not None and 17e9 < meta.size < 19.5e9  # the real one is 18.6 GB
    assert header.data_start + header.data_size == meta.size
    assert len(header.tensors) == 3 + 48 * 12
    assert header.parameter_count == 30_532_122_624  # the real model's count
    assert header.value("general.architecture") == "qwen3moe"
    assert header.value("general.file_type") == gguf.LlamaFileType.MOSTLY_Q4_K_M
    assert header.value("qwen3moe.expert_count") == 128
    assert header.value("qwen3moe.expert_used_count") == 8
    assert header.value("qwen3moe.context_length") == 40960
    tokens = header.value("tokenizer.ggml.tokens")
    assert len(tokens) == len(set(tokens)) == 151_936
    assert len(header.value("tokenizer.ggml.token_type")) == 151_936
    assert len(header.value("tokenizer.ggml.merges")) > 150_000
    types = {t.name: t.qtype.name for t in header.tensors}
    assert types["output.weight"] == "Q6_K" and types["token_embd.weight"] == "Q4_K"
    assert types["blk.0.ffn_down_exps.weight"] == "Q6_K"  # llama.cpp's "more bits" layers
    assert types["blk.6.ffn_down_exps.weight"] == "Q4_K"
    assert types["blk.6.ffn_gate_exps.weight"] == "Q4_K"
    assert types["blk.6.ffn_gate_inp.weight"] == types["blk.6.attn_norm.weight"] == "F32"
    block, size = virtual_block(), meta.size
    assert last == bytes(block[(size - 16 + i) % len(block)] for i in range(16))


def test_shape_true_quants_have_their_true_sizes(local_hub: LocalHub, hub_repos: TestRepos) -> None:
    info = _api(local_hub).model_info(hub_repos.qwen3_moe, files_metadata=True)
    sizes = {s.rfilename: s.size or 0 for s in info.siblings or []}
    assert 31e9 < sizes["Qwen3-30B-A3B-Q8_0.gguf"] < 33.5e9
    assert 10e9 < sizes["Qwen3-30B-A3B-Q2_K.gguf"] < 12e9
    assert info.gguf is not None and info.gguf["total"] == 30_532_122_624
    assert info.gguf["architecture"] == "qwen3moe" and info.gguf["eos_token"] == "<|im_end|>"


# ---------------------------------------------------------------- faults


def test_429_and_503_are_retried_by_http_backoff(local_hub: LocalHub, hub_repos: TestRepos) -> None:
    url = _url(local_hub, hub_repos.tiny_llama, Q4)
    # without Retry-After (huggingface_hub waits Retry-After + 1 s), base_wait_time applies
    local_hub.faults.fail_next(Q4, 429, headers={})
    local_hub.faults.fail_next(Q4, 503, times=2)

    response = http_backoff("HEAD", url, base_wait_time=0.01, follow_redirects=False)

    assert response.status_code == 302
    assert [(r.status, r.fault) for r in local_hub.requests] == [
        (429, "status"),
        (503, "status"),
        (503, "status"),
        (302, None),
    ]
    assert local_hub.faults.pending == 0


def test_a_status_fault_reaches_huggingface_hub_as_an_error(
    local_hub: LocalHub, hub_repos: TestRepos
) -> None:
    local_hub.faults.fail_next("/api/models", 500)
    with pytest.raises(HfHubHTTPError) as failed:
        _api(local_hub).model_info(hub_repos.tiny_llama)
    assert failed.value.response.status_code == 500
    assert _api(local_hub).model_info(hub_repos.tiny_llama).id == hub_repos.tiny_llama


def test_429_carries_retry_after_zero_unless_told(
    local_hub: LocalHub, hub_repos: TestRepos
) -> None:
    url = _url(local_hub, hub_repos.tiny_llama, Q4)
    local_hub.faults.fail_next(Q4, 429)
    local_hub.faults.fail_next(Q4, 429, headers={"Retry-After": "7"})
    first, second = httpx2.head(url), httpx2.head(url)
    assert (first.status_code, first.headers["Retry-After"]) == (429, "0")
    assert second.headers["Retry-After"] == "7"


def test_cut_after_breaks_a_streaming_read(local_hub: LocalHub, hub_repos: TestRepos) -> None:
    content = _local(hub_repos, hub_repos.tiny_llama, Q8)
    url = _url(local_hub, hub_repos.tiny_llama, Q8)
    local_hub.faults.cut_after(Q8, 100_000)

    received = bytearray()
    with (
        httpx2.Client(follow_redirects=True) as client,
        pytest.raises(httpx2.RemoteProtocolError),
        client.stream("GET", url) as response,
    ):
        for chunk in response.iter_bytes():
            received += chunk

    assert bytes(received) == content[:100_000]
    assert httpx2.get(url, follow_redirects=True).content == content  # only once
    assert local_hub.bytes_served(hub_repos.tiny_llama, Q8) == 100_000 + len(content)
    assert [r.fault for r in local_hub.requests if r.path.startswith("/cdn/")] == ["cut", None]


def test_hf_hub_download_resumes_after_a_cut(
    local_hub: LocalHub, hub_repos: TestRepos, tmp_path: Path
) -> None:
    """huggingface_hub keeps what it wrote (10 MiB chunks) and asks for the rest with a Range."""
    f16 = "tiny-llama-F16.gguf"  # 14.5 MB: one whole chunk arrives before the cut
    local_hub.faults.cut_after(f16, 11_000_000)
    path = hf_hub_download(
        hub_repos.tiny_llama, f16, endpoint=local_hub.url, cache_dir=tmp_path, token=False
    )
    assert Path(path).read_bytes() == _local(hub_repos, hub_repos.tiny_llama, f16)
    ranges = [r.range for r in local_hub.requests if r.path.startswith("/cdn/")]
    assert ranges == [None, f"bytes={10 << 20}-"]


def test_stall_after_ends_in_a_read_timeout(local_hub: LocalHub, hub_repos: TestRepos) -> None:
    content = _local(hub_repos, hub_repos.tiny_llama, Q8)
    url = _url(local_hub, hub_repos.tiny_llama, Q8)
    local_hub.faults.stall_after(Q8, 50_000)

    received = bytearray()
    timeout = httpx2.Timeout(5.0, read=0.5)
    started = time.monotonic()
    with (
        httpx2.Client(follow_redirects=True, timeout=timeout) as client,
        pytest.raises(httpx2.ReadTimeout),
        client.stream("GET", url) as response,
    ):
        for chunk in response.iter_bytes():
            received += chunk

    assert time.monotonic() - started < 5
    assert bytes(received) == content[:50_000]
    assert httpx2.get(url, follow_redirects=True).content == content


def test_release_stalls_lets_the_body_finish(local_hub: LocalHub, hub_repos: TestRepos) -> None:
    content = _local(hub_repos, hub_repos.tiny_llama, Q4)
    url = _url(local_hub, hub_repos.tiny_llama, Q4)
    local_hub.faults.stall_after(Q4, 10_000)
    result: dict[str, bytes] = {}
    reader = threading.Thread(
        target=lambda: result.update(body=httpx2.get(url, follow_redirects=True).content)
    )
    reader.start()
    _wait_until(lambda: local_hub.bytes_served(hub_repos.tiny_llama, Q4) == 10_000)
    assert reader.is_alive()  # stalled, not finished

    local_hub.faults.release_stalls()
    reader.join(timeout=10)

    assert result["body"] == content


def test_closing_the_hub_ends_a_stall(hub_repos: TestRepos, hub_workdir: Path) -> None:
    hub = LocalHub().start()
    publish_test_repos(hub, hub_workdir)
    hub.faults.stall_after(Q4, 10_000)
    errors: list[Exception] = []

    def read() -> None:
        try:
            httpx2.get(_url(hub, hub_repos.tiny_llama, Q4), follow_redirects=True, timeout=30)
        except httpx2.HTTPError as exc:
            errors.append(exc)

    reader = threading.Thread(target=read)
    reader.start()
    _wait_until(lambda: hub.bytes_served(hub_repos.tiny_llama, Q4) == 10_000)
    hub.close()
    reader.join(timeout=10)
    assert not reader.is_alive() and isinstance(errors[0], httpx2.RemoteProtocolError)


def test_throttle_paces_bodies(local_hub: LocalHub, hub_repos: TestRepos) -> None:
    local_hub.faults.throttle_bytes_per_s = 20e6
    started = time.monotonic()
    body = httpx2.get(
        _url(local_hub, hub_repos.tiny_llama, Q8),
        headers={"Range": "bytes=0-1999999"},
        follow_redirects=True,
    ).content
    elapsed = time.monotonic() - started
    assert len(body) == 2_000_000
    assert elapsed >= 0.095  # 2 MB at 20 MB/s


def test_faults_only_touch_matching_paths(local_hub: LocalHub, hub_repos: TestRepos) -> None:
    local_hub.faults.fail_next(Q8, 500)
    assert httpx2.head(_url(local_hub, hub_repos.tiny_llama, Q4)).status_code == 302
    assert httpx2.head(_url(local_hub, hub_repos.tiny_llama, Q8)).status_code == 500
    assert httpx2.head(_url(local_hub, hub_repos.tiny_llama, Q8)).status_code == 302


# ---------------------------------------------------------------- access


def test_gated_repo_needs_a_token_and_accepted_terms(
    local_hub: LocalHub, hub_repos: TestRepos, tmp_path: Path
) -> None:
    gated, name, token = hub_repos.gated, "gated-Q4_0.gguf", hub_repos.token
    info = _api(local_hub).model_info(gated)
    assert info.gated == "manual"
    assert len(list(_api(local_hub).list_repo_tree(gated))) == 3  # readable without a token

    with pytest.raises(GatedRepoError) as anonymous:
        hf_hub_download(gated, name, endpoint=local_hub.url, cache_dir=tmp_path, token=False)
    with pytest.raises(GatedRepoError) as not_accepted:
        hf_hub_download(gated, name, endpoint=local_hub.url, cache_dir=tmp_path, token=token)
    local_hub.accept_terms(token, gated)
    path = hf_hub_download(gated, name, endpoint=local_hub.url, cache_dir=tmp_path, token=token)

    assert anonymous.value.response.status_code == 401
    assert "Please log in" in anonymous.value.response.headers["X-Error-Message"]
    assert not_accepted.value.response.status_code == 403
    assert "not in the authorized list" in not_accepted.value.response.headers["X-Error-Message"]
    assert Path(path).read_bytes() == _local(hub_repos, gated, name)
    card = hf_hub_download(gated, "README.md", endpoint=local_hub.url, cache_dir=tmp_path)
    assert "license: other" in Path(card).read_text()


def test_an_unknown_token_is_refused(local_hub: LocalHub, hub_repos: TestRepos) -> None:
    api = _api(local_hub, "hf_not_a_token")
    with pytest.raises(HfHubHTTPError) as refused:
        api.model_info(hub_repos.tiny_llama)
    assert refused.value.response.status_code == 401
    assert not isinstance(refused.value, RepositoryNotFoundError)
    assert _api(local_hub, hub_repos.token).whoami()["name"] == "shardtest-user"


def test_missing_files_and_revisions(
    local_hub: LocalHub, hub_repos: TestRepos, tmp_path: Path
) -> None:
    def download(filename: str, revision: str | None = None) -> str:
        return hf_hub_download(
            hub_repos.tiny_llama,
            filename,
            revision=revision,
            endpoint=local_hub.url,
            cache_dir=tmp_path,
            token=False,
        )

    with pytest.raises(EntryNotFoundError):
        download("tiny-llama-Q3_K.gguf")
    with pytest.raises(RevisionNotFoundError):
        download(Q4, revision="0" * 40)
    with pytest.raises(RepositoryNotFoundError):
        get_hf_file_metadata(_url(local_hub, "shardtest/Missing-GGUF", Q4), token=False)


# ---------------------------------------------------------------- the files themselves


def test_split_parts_are_written_like_gguf_split(hub_repos: TestRepos) -> None:
    parts = [read_gguf_header(_local(hub_repos, hub_repos.tiny_split, _part(i))) for i in (1, 2)]
    total = sum(len(part.tensors) for part in parts)
    for number, part in enumerate(parts):
        assert part.fields["split.no"] == (number, gguf.GGUFValueType.UINT16, None)
        assert part.fields["split.count"] == (2, gguf.GGUFValueType.UINT16, None)
        assert part.fields["split.tensors.count"] == (total, gguf.GGUFValueType.INT32, None)
    assert parts[0].architecture == "llama" and "tokenizer.ggml.tokens" in parts[0].fields
    assert set(parts[1].fields) == {"split.no", "split.count", "split.tensors.count"}
    assert abs(len(parts[0].tensors) - len(parts[1].tensors)) <= 1
    second = gguf.GGUFReader(hub_repos.local_path(hub_repos.tiny_split, _part(2)))
    assert [t.name for t in second.tensors] == [t.name for t in parts[1].tensors]


def test_projector_comes_in_two_precisions(hub_repos: TestRepos) -> None:
    f16, q8 = (
        gguf.GGUFReader(hub_repos.local_path(hub_repos.tiny_vision, f"mmproj-tiny-vision-{q}.gguf"))
        for q in ("F16", "Q8_0")
    )
    ours = read_gguf_header(
        _local(hub_repos, hub_repos.tiny_vision, "mmproj-tiny-vision-Q8_0.gguf")
    )
    q8_types = {t.name: t.tensor_type.name for t in q8.tensors}
    assert [t.name for t in f16.tensors] == list(q8_types)
    assert q8_types["mm.0.weight"] == "Q8_0" and q8_types["v.patch_embd.weight"] == "F16"
    assert q8.fields["clip.projector_type"].contents() == "qwen2vl_merger"
    assert q8.fields["general.file_type"].contents() == gguf.LlamaFileType.MOSTLY_Q8_0
    # our quick header reader agrees with gguf's
    assert {t.name: t.tensor_type.name for t in q8.tensors} == {
        t.name: t.qtype.name for t in ours.tensors
    }
    assert [int(t.data_offset) for t in q8.tensors] == [
        ours.data_start + t.offset for t in ours.tensors
    ]
    assert {k: f.contents() for k, f in q8.fields.items() if not k.startswith("GGUF.")} == {
        k: v[0] for k, v in ours.fields.items()
    }


def test_broken_files_are_not_gguf(local_hub: LocalHub, hub_repos: TestRepos) -> None:
    broken = _local(hub_repos, hub_repos.broken, "broken-Q4_0.gguf")
    truncated = _local(hub_repos, hub_repos.broken, "truncated-Q4_0.gguf")
    assert len(broken) == 4096 and broken.startswith(b"<!DOCTYPE html>")
    assert len(truncated) == 3000 and truncated[:4] == b"GGUF"
    with pytest.raises(ValueError, match="truncated"):
        read_gguf_header(truncated)
    meta = get_hf_file_metadata(_url(local_hub, hub_repos.broken, "truncated-Q4_0.gguf"))
    assert meta.size == 3000
    assert _api(local_hub).model_info(hub_repos.broken).gguf is None


def test_virtual_files_read_consistently() -> None:
    head = b"GGUF-head"
    small = HubFile.virtual(head, 3 << 20)
    content = small.read()
    assert content[: len(head)] == head and len(content) == 3 << 20
    assert small.read(1_048_000, 1_049_000) == content[1_048_000:1_049_000]
    assert small.sha256 == hashlib.sha256(content).hexdigest()
    big = HubFile.virtual(head, 20 << 30)
    assert big.is_lfs and not big.sha256_matches_content
    assert big.sha256 == hashlib.sha256(b"virtual" + head + str(20 << 30).encode()).hexdigest()
    assert big.read(5 << 30, (5 << 30) + 10) == small.read(1 << 20, (1 << 20) + 10)


# ---------------------------------------------------------------- helpers


def _part(number: int) -> str:
    return f"Q8_0/tiny-split-Q8_0-0000{number}-of-00002.gguf"


def _git_blob_id(content: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()


def _wait_until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    """Poll `condition` until it holds: waits for the server to get there, not for time."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("the server never got there")
        time.sleep(0.005)
