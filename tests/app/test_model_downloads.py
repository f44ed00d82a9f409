"""Downloads from the local Hub: resumable, verified, imported; every fault has its one line.

The Hub here is tests/local_hub: a real HTTP server on 127.0.0.1 whose `resolve`
URLs redirect to a CDN path with Range support, as huggingface.co does; faults
are injected there (cut connections, stalls, 429/5xx, gating), never mocked in
our code.
"""

from __future__ import annotations

import hashlib
import shutil
import threading
from pathlib import Path

import pytest
from local_hub import HubFile, LocalHub
from local_hub.repos import TestRepos

from app.hub.catalogue import Catalogue
from app.hub.file_transfer import (
    DownloadStopped,
    IntegrityError,
    TransferControl,
    TransferPolicy,
    download_file,
)
from app.hub.gguf_files import choose_model
from app.hub.hub_errors import GatedError, HubError
from app.hub.model_download import (
    DownloadManager,
    DownloadProgress,
    model_folder,
    run_download,
    start_or_resume,
)
from app.hub.remote_file import RemoteFileRef
from app.stores.hub_store import CANCELLED, DONE, FAILED, PAUSED, HubStore
from app.stores.model_library import ModelLibrary
from engine.errors import BadInputError
from engine.model.inventory import read_inventory

FAST = TransferPolicy(read_timeout_s=0.5, connect_timeout_s=2, first_wait_s=0.01, max_wait_s=0.05)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _pull(
    hub: LocalHub, repo_id: str, quant: str, models: Path, control: TransferControl | None = None,
    on_progress=lambda _p: None, token: str | None = None,
):  # fmt: skip
    catalogue = Catalogue(endpoint=hub.url, token=token)
    details = catalogue.details(repo_id)
    model = choose_model(details.models, quant)
    assert model is not None
    with HubStore() as store:
        download = start_or_resume(store, details, model, models)
        return run_download(
            store, download.id, catalogue.endpoint, catalogue.auth_headers(), on_progress,
            control or TransferControl(), FAST,
        )  # fmt: skip


def test_pull_verifies_moves_into_place_and_imports(
    local_hub: LocalHub, hub_repos: TestRepos, tmp_path: Path
) -> None:
    done = _pull(local_hub, hub_repos.tiny_llama, "Q4_0", tmp_path)
    source = hub_repos.local_path(hub_repos.tiny_llama, "tiny-llama-Q4_0.gguf")
    target = model_folder(tmp_path, hub_repos.tiny_llama) / "tiny-llama-Q4_0.gguf"
    assert done.status == DONE and done.imported_path == target
    assert target.read_bytes() == source.read_bytes()
    assert not target.with_name(target.name + ".part").exists()
    with ModelLibrary() as library:
        entry = library.find(target)
    assert entry is not None and entry.exists


def test_a_vision_model_comes_with_its_projector_in_its_own_precision_paired(
    local_hub: LocalHub, hub_repos: TestRepos, tmp_path: Path
) -> None:
    done = _pull(local_hub, hub_repos.tiny_vision, "Q8_0", tmp_path)
    with ModelLibrary() as library:
        entry = library.find(done.imported_path)  # type: ignore[arg-type]
    assert entry is not None and entry.mmproj_path is not None
    assert entry.mmproj_path.name == "mmproj-tiny-vision-Q8_0.gguf" and entry.mmproj_exists


def test_a_split_model_downloads_every_part_and_reads_as_one_model(
    local_hub: LocalHub, hub_repos: TestRepos, tmp_path: Path
) -> None:
    done = _pull(local_hub, hub_repos.tiny_split, "Q8_0", tmp_path)
    parts = sorted(p.name for p in done.folder.glob("*.gguf"))
    assert parts == ["tiny-split-Q8_0-00001-of-00002.gguf", "tiny-split-Q8_0-00002-of-00002.gguf"]
    inventory = read_inventory(done.imported_path)  # type: ignore[arg-type]
    assert inventory.n_layer == 4 and inventory.file_bytes == done.total_bytes


def test_a_dropped_connection_resumes_from_the_last_byte_without_refetching(
    local_hub: LocalHub, hub_repos: TestRepos, tmp_path: Path
) -> None:
    name = "tiny-llama-F16.gguf"
    size = local_hub.repo_file(hub_repos.tiny_llama, name).size
    local_hub.faults.cut_after(name, size // 2, times=2)  # two drops, at 50 % each time
    done = _pull(local_hub, hub_repos.tiny_llama, "F16", tmp_path)
    assert done.status == DONE
    assert _sha256(done.imported_path) == _sha256(  # type: ignore[arg-type]
        hub_repos.local_path(hub_repos.tiny_llama, name)
    )
    # the first try sent half, the second half of the rest, the third the remainder
    assert local_hub.bytes_served(hub_repos.tiny_llama, name) == size
    ranges = [r.range for r in local_hub.requests if name in r.path and "/cdn/" in r.path]
    assert ranges[0] == "bytes=0-" and all(r != "bytes=0-" for r in ranges[1:])


def test_a_stalled_transfer_times_out_and_resumes(
    local_hub: LocalHub, hub_repos: TestRepos, tmp_path: Path
) -> None:
    name = "tiny-llama-Q8_0.gguf"
    size = local_hub.repo_file(hub_repos.tiny_llama, name).size
    local_hub.faults.stall_after(name, size // 3)
    done = _pull(local_hub, hub_repos.tiny_llama, "Q8_0", tmp_path)
    assert done.status == DONE
    assert local_hub.bytes_served(hub_repos.tiny_llama, name) == size


def test_server_errors_are_retried_with_backoff(
    local_hub: LocalHub, hub_repos: TestRepos, tmp_path: Path
) -> None:
    name = "tiny-llama-Q4_0.gguf"
    local_hub.faults.fail_next("/cdn/", 503, times=2)
    done = _pull(local_hub, hub_repos.tiny_llama, "Q4_0", tmp_path)
    assert done.status == DONE
    statuses = [r.status for r in local_hub.requests if "/cdn/" in r.path and name in r.path]
    assert statuses.count(503) == 2


def test_a_corrupted_byte_is_refused_the_partial_discarded_nothing_imported(
    local_hub: LocalHub, hub_repos: TestRepos, tmp_path: Path
) -> None:
    copy = tmp_path / "source" / "corrupt-Q4_0.gguf"
    copy.parent.mkdir()
    shutil.copy(hub_repos.local_path(hub_repos.tiny_llama, "tiny-llama-Q4_0.gguf"), copy)
    hub_file = HubFile.from_path(copy)
    assert hub_file.sha256  # the hash the repository lists: of the good bytes
    data = bytearray(copy.read_bytes())
    data[len(data) // 2] ^= 0xFF  # then one byte flips on the server
    copy.write_bytes(bytes(data))
    local_hub.add_repo("shardtest/Corrupt-GGUF", {"corrupt-Q4_0.gguf": hub_file})
    with pytest.raises(IntegrityError, match="do not match the repository's SHA-256"):
        _pull(local_hub, "shardtest/Corrupt-GGUF", "Q4_0", tmp_path / "models")
    folder = model_folder(tmp_path / "models", "shardtest/Corrupt-GGUF")
    assert list(folder.iterdir()) == [] or all(p.name.startswith(".") for p in folder.iterdir())
    with HubStore() as store:
        (download,) = store.downloads()
    assert download.status == FAILED and "SHA-256" in (download.error or "")
    with ModelLibrary() as library:
        assert all(not e.path.is_relative_to(tmp_path) for e in library.models())


def test_pause_keeps_the_part_and_resume_finishes_it_without_refetching(
    local_hub: LocalHub, hub_repos: TestRepos, tmp_path: Path
) -> None:
    name = "tiny-llama-F16.gguf"
    size = local_hub.repo_file(hub_repos.tiny_llama, name).size
    local_hub.faults.throttle_bytes_per_s = 8e6  # slow enough that progress is seen part-way
    control = TransferControl()

    def pause_once_started(progress: DownloadProgress) -> None:
        if 0 < progress.done_bytes < size:
            control.pause()

    with pytest.raises(DownloadStopped) as stopped:
        _pull(local_hub, hub_repos.tiny_llama, "F16", tmp_path, control, pause_once_started)
    assert not stopped.value.cancelled
    part = model_folder(tmp_path, hub_repos.tiny_llama) / (name + ".part")
    kept = part.stat().st_size
    assert 0 < kept < size
    with HubStore() as store:
        assert store.downloads()[0].status == PAUSED
    local_hub.faults.throttle_bytes_per_s = None
    done = _pull(local_hub, hub_repos.tiny_llama, "F16", tmp_path)
    assert done.status == DONE
    ranges = [r.range for r in local_hub.requests if name in r.path and "/cdn/" in r.path]
    assert ranges == ["bytes=0-", f"bytes={kept}-"]  # the resume asked only for what was missing


def test_cancel_discards_the_partial(
    local_hub: LocalHub, hub_repos: TestRepos, tmp_path: Path
) -> None:
    control = TransferControl()
    local_hub.faults.throttle_bytes_per_s = 8e6

    def cancel_once_started(progress: DownloadProgress) -> None:
        if progress.done_bytes:
            control.cancel()

    with pytest.raises(DownloadStopped) as stopped:
        _pull(local_hub, hub_repos.tiny_llama, "F16", tmp_path, control, cancel_once_started)
    assert stopped.value.cancelled
    folder = model_folder(tmp_path, hub_repos.tiny_llama)
    assert not list(folder.glob("*.part")) and not list(folder.glob("*.gguf"))
    with HubStore() as store:
        assert store.downloads()[0].status == CANCELLED


def test_gated_needs_a_token_then_the_terms_then_downloads(
    local_hub: LocalHub, hub_repos: TestRepos, tmp_path: Path
) -> None:
    with pytest.raises(GatedError, match="add a Hugging Face token"):
        _pull(local_hub, hub_repos.gated, "Q4_0", tmp_path)
    with pytest.raises(GatedError, match="accept its terms at http"):
        _pull(local_hub, hub_repos.gated, "Q4_0", tmp_path, token=hub_repos.token)
    local_hub.accept_terms(hub_repos.token, hub_repos.gated)
    done = _pull(local_hub, hub_repos.gated, "Q4_0", tmp_path, token=hub_repos.token)
    assert done.status == DONE


def test_not_enough_disk_space_refuses_before_a_byte(
    local_hub: LocalHub, hub_repos: TestRepos, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import app.hub.model_download as model_download

    # the operating system's answer for a nearly full disk (we cannot fill this one)
    usage = shutil.disk_usage(tmp_path)._replace(free=10 << 20)
    monkeypatch.setattr(model_download.shutil, "disk_usage", lambda _path: usage)
    with pytest.raises(BadInputError, match="not enough disk space"):
        _pull(local_hub, hub_repos.tiny_llama, "Q4_0", tmp_path)
    assert local_hub.bytes_served(hub_repos.tiny_llama, "tiny-llama-Q4_0.gguf") == 0


def test_a_full_disk_during_the_download_is_one_line(
    local_hub: LocalHub, hub_repos: TestRepos, tmp_path: Path
) -> None:
    name = "tiny-llama-Q4_0.gguf"
    dest = tmp_path / name
    dest.with_name(name + ".part").symlink_to("/dev/full")  # every write: ENOSPC
    hub_file = local_hub.repo_file(hub_repos.tiny_llama, name)
    ref = RemoteFileRef(local_hub.url, hub_repos.tiny_llama, "main", name)
    with pytest.raises(HubError, match="is full; free some space and resume"):
        download_file(ref, {}, dest, hub_file.size, hub_file.sha256, lambda _n: None,
                      TransferControl(), FAST)  # fmt: skip
    assert not dest.exists()


def test_a_second_request_joins_the_running_job(
    local_hub: LocalHub, hub_repos: TestRepos, tmp_path: Path
) -> None:
    catalogue = Catalogue(endpoint=local_hub.url)
    details = catalogue.details(hub_repos.tiny_llama)
    model = choose_model(details.models, "Q4_0")
    assert model is not None
    with HubStore() as store:
        first = start_or_resume(store, details, model, tmp_path)
        second = start_or_resume(store, details, model, tmp_path)
    assert first.id == second.id
    manager = DownloadManager()
    control, is_new = manager.control_for(first.id)
    joined, joined_is_new = manager.control_for(second.id)
    assert is_new and not joined_is_new and joined is control


def test_another_process_holding_the_model_is_told_not_overwritten(
    local_hub: LocalHub, hub_repos: TestRepos, tmp_path: Path
) -> None:
    from filelock import FileLock

    catalogue = Catalogue(endpoint=local_hub.url)
    details = catalogue.details(hub_repos.tiny_llama)
    model = choose_model(details.models, "Q4_0")
    assert model is not None
    with HubStore() as store:
        download = start_or_resume(store, details, model, tmp_path)
        download.folder.mkdir(parents=True)
        held = threading.Event()
        release = threading.Event()

        def other_process() -> None:  # a lock held by another holder: same as another process
            with FileLock(str(download.folder / ".tiny-llama-Q4_0.gguf.lock")):
                held.set()
                release.wait(10)

        holder = threading.Thread(target=other_process)
        holder.start()
        assert held.wait(10)
        try:
            with pytest.raises(BadInputError, match="already downloading"):
                run_download(store, download.id, local_hub.url, {}, lambda _p: None,
                             TransferControl(), FAST)  # fmt: skip
        finally:
            release.set()
            holder.join()
