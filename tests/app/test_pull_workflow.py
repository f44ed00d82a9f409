"""The one pull workflow (app.hub.pull_workflow) that `shardchat models pull` and the Discover
page both run, against the local Hub (tests/local_hub): a name resolved to a quant, a header
refused before a byte of weights, progress through a plain callback, the model in the model
list, a second request joining the job, and a paused pull resumed from its `.part` file.
"""

from __future__ import annotations

import pytest
from local_hub import LocalHub
from local_hub.repos import TestRepos

from app.hub.catalogue import Catalogue
from app.hub.file_transfer import DownloadStopped, TransferPolicy
from app.hub.model_download import DownloadProgress
from app.hub.pull_workflow import PullWorkflow, check_header, resolve, stored
from app.stores.hub_store import DONE, PAUSED
from app.stores.model_library import ModelLibrary
from engine.errors import BadInputError
from engine.machine.profile import Profile

FAST = TransferPolicy(read_timeout_s=2.0, connect_timeout_s=2, first_wait_s=0.01, max_wait_s=0.05)


def _no_profile() -> Profile | None:
    return None


def _must_not_be_asked() -> Profile | None:
    raise AssertionError("a named quant needs no profile")


def test_a_name_resolves_to_its_quant_or_file_and_no_name_to_the_smallest_without_a_profile(
    local_hub: LocalHub, hub_repos: TestRepos
) -> None:
    catalogue = Catalogue(endpoint=local_hub.url)
    repo = hub_repos.tiny_llama
    _details, by_quant = resolve(catalogue, f"{repo}:q8_0", "main", _must_not_be_asked)
    assert by_quant.quant == "Q8_0"
    _details, by_file = resolve(catalogue, f"{repo}:tiny-llama-F16.gguf", "main", _no_profile)
    assert by_file.path == "tiny-llama-F16.gguf"
    details, smallest = resolve(catalogue, repo, "main", _no_profile)
    assert smallest == min(details.models, key=lambda m: m.size)
    with pytest.raises(BadInputError, match=r"no quant or file 'Q6_K' \(.*Q4_0"):
        resolve(catalogue, f"{repo}:Q6_K", "main", _no_profile)


def test_a_file_that_is_not_gguf_is_refused_before_a_byte_of_weights(
    local_hub: LocalHub, hub_repos: TestRepos
) -> None:
    catalogue = Catalogue(endpoint=local_hub.url)
    details, model = resolve(catalogue, f"{hub_repos.broken}:broken-Q4_0.gguf", "main", _no_profile)
    with pytest.raises(BadInputError, match="not downloading .*not a GGUF file"):
        check_header(catalogue, details, model)


def test_a_pull_reports_progress_lands_in_the_model_list_and_a_second_start_joins_it(
    local_hub: LocalHub, hub_repos: TestRepos
) -> None:
    catalogue = Catalogue(endpoint=local_hub.url)
    details, model = resolve(catalogue, f"{hub_repos.tiny_llama}:Q4_0", "main", _no_profile)
    check_header(catalogue, details, model)
    pulls = PullWorkflow(FAST)
    started = pulls.start(details, model)
    joined = pulls.start(details, model)
    assert started.is_new and not joined.is_new
    assert joined.download.id == started.download.id and joined.control is started.control
    seen: list[DownloadProgress] = []
    done = pulls.run(started.download.id, started.control, seen.append, catalogue)
    assert done.status == DONE and done.imported_path is not None
    assert seen and seen[-1].done_bytes == seen[-1].total_bytes == model.download_size
    assert done.imported_path.read_bytes() == (
        hub_repos.local_path(hub_repos.tiny_llama, model.path).read_bytes()
    )
    with ModelLibrary() as library:
        assert library.find(done.imported_path) is not None
    assert pulls.manager.running() == []  # finished: a later start begins afresh


def test_a_paused_pull_starts_again_as_the_same_job_and_fetches_only_what_is_missing(
    local_hub: LocalHub, hub_repos: TestRepos
) -> None:
    catalogue = Catalogue(endpoint=local_hub.url)
    details, model = resolve(catalogue, f"{hub_repos.tiny_llama}:F16", "main", _no_profile)
    pulls = PullWorkflow(FAST)
    started = pulls.start(details, model)
    local_hub.faults.throttle_bytes_per_s = 8e6  # slow enough that progress is seen part-way

    def pause_once_started(progress: DownloadProgress) -> None:
        if 0 < progress.done_bytes < progress.total_bytes:
            assert pulls.pause(progress.download_id)

    with pytest.raises(DownloadStopped):
        pulls.run(started.download.id, started.control, pause_once_started, catalogue)
    paused = stored(started.download.id)
    kept = paused.bytes_on_disk()
    assert paused.status == PAUSED and 0 < kept < paused.total_bytes
    assert not pulls.pause(started.download.id)  # no longer running here
    local_hub.faults.throttle_bytes_per_s = None
    again = pulls.start(details, model)
    assert again.is_new and again.download.id == started.download.id
    done = pulls.run(again.download.id, again.control, lambda _p: None, catalogue)
    assert done.status == DONE
    asked = [r.range for r in local_hub.requests if model.path in r.path and "/cdn/" in r.path]
    assert asked == ["bytes=0-", f"bytes={kept}-"]  # the resume asked only for what was missing
