"""The Discover page's state without Qt: tickets that drop stale answers, predictions that
follow the budget and context without reading a header again, the recommended quant, and
downloads as the page shows them.

Repositories come from the local hub (tests/local_hub) through the real catalogue and
header reader, as the page's workers get them; here they are fed to the model by hand.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from local_hub import LocalHub

from app.hub.catalogue import Catalogue, RepoDetails
from app.hub.discover_downloads import DownloadState
from app.hub.discover_model import (
    EXCEEDS_RAM,
    LISTING,
    NO_PROFILE_NOTE,
    NO_RESULTS,
    PLANNING,
    READING,
    SEARCHING,
    Change,
    DiscoverModel,
    SearchQuery,
    result_cells,
)
from app.hub.hub_settings import models_dir
from app.hub.model_download import DownloadProgress, start_or_resume
from app.hub.remote_plans import QuantReading, read_quants
from app.screen_text.units import (
    format_duration,
    seconds_range_text,
    seconds_text,
    speed_range_text,
    speed_text,
)
from app.stores.hub_store import DONE, FAILED, PAUSED, QUEUED, RUNNING, HubStore
from engine.machine.calibration import kind_error, machine_kind
from engine.machine.described_machines import load_described
from engine.machine.profile import Profile
from engine.planning.prediction_range import Sureness

TINY_LLAMA = "shardtest/Tiny-Llama-GGUF"
QWEN3 = "shardtest/Qwen3-30B-A3B-GGUF"
BROKEN = "shardtest/Broken-GGUF"
GIB = 1 << 30


@pytest.fixture
def hub(local_hub: LocalHub, monkeypatch: pytest.MonkeyPatch) -> LocalHub:
    monkeypatch.setenv("HF_ENDPOINT", local_hub.url)
    return local_hub


@pytest.fixture
def laptop() -> Profile:
    """A described laptop with an 8 GB GPU: moving the budget moves the predictions."""
    return load_described("laptop-8gb")


def listed(repo_id: str) -> tuple[RepoDetails, list[QuantReading]]:
    """What the page's worker fetches for a repository: its files, then every header."""
    catalogue = Catalogue()
    details = catalogue.details(repo_id)
    with HubStore() as store:
        readings = read_quants(
            details.models, catalogue.endpoint, repo_id, details.revision,
            catalogue.auth_headers(), store,
        )  # fmt: skip
    return details, readings


def shown(model: DiscoverModel, repo_id: str) -> DiscoverModel:
    """The model with `repo_id` listed, read and (with a profile) planned."""
    ticket = model.open_repository(repo_id)
    assert ticket is not None
    details, readings = listed(repo_id)
    assert model.show_details(ticket, details)
    request = model.show_readings(ticket, readings)
    if request is not None:
        assert model.show_predictions(request, request.run())
    return model


def figures(model: DiscoverModel) -> dict[str, tuple[float, float, float]]:
    return {
        path: (p.decode_tokens_per_s, p.ttft_s, p.resident_share)
        for path, p in model.predictions.items()
        if p is not None
    }


class Heard:
    """The changes a listener heard, in order."""

    def __init__(self, model: DiscoverModel) -> None:
        self.changes: list[Change] = []
        model.subscribe(self.changes.append)


# -- searching ------------------------------------------------------------------------------------


def test_a_newer_search_drops_the_older_answer(hub: LocalHub) -> None:
    model = DiscoverModel()
    heard = Heard(model)
    first = model.begin_search(SearchQuery("qwen"))
    assert model.search_activity.text == SEARCHING
    second = model.begin_search(SearchQuery("tiny", kind="vision"))
    found = Catalogue().search("tiny", kind="vision")
    assert [r.repo_id for r in found] == ["shardtest/Tiny-Vision-GGUF"]
    assert not model.show_results(first, Catalogue().search("qwen"))  # typed over: dropped
    assert model.results == [] and model.search_activity.text == SEARCHING
    assert model.show_results(second, found)
    assert model.results == found and model.search_activity.text == ""
    assert heard.changes == [Change.SEARCH] * 3


def test_no_results_and_a_failed_search_each_say_one_line() -> None:
    model = DiscoverModel()
    ticket = model.begin_search(SearchQuery("zebra"))
    model.show_results(ticket, [])
    assert model.search_activity.text == f"{NO_RESULTS} 'zebra'"
    ticket = model.begin_search(SearchQuery("zebra"))
    model.search_failed(ticket, "cannot reach https://huggingface.co: connection refused")
    assert model.search_activity.problem.startswith("cannot reach")
    assert model.search_activity.text == ""


def test_result_cells_mark_gated_repositories(hub: LocalHub) -> None:
    found = {r.repo_id: r for r in Catalogue().search("")}
    assert result_cells(found["shardtest/Gated-GGUF"])[0] == "shardtest/Gated-GGUF  (gated)"
    assert result_cells(found[QWEN3]) == (QWEN3, "MoE", "30.5B", "85.0K", "320")
    assert result_cells(found["shardtest/Tiny-Vision-GGUF"])[1] == "vision"
    assert result_cells(found["shardtest/Broken-GGUF"])[2] == "—"  # the Hub read no GGUF


# -- a repository and its quants ------------------------------------------------------------------


def test_without_a_profile_the_quants_are_listed_without_figures(hub: LocalHub) -> None:
    model = DiscoverModel()
    ticket = model.open_repository(TINY_LLAMA)
    assert ticket is not None and model.repo_activity.text == LISTING
    assert model.open_repository(TINY_LLAMA) is None  # asked again: nothing refetched
    details, readings = listed(TINY_LLAMA)
    model.show_details(ticket, details)
    assert model.repo_activity.text == READING
    assert [row.model.quant for row in model.quant_rows()] == ["Q4_0", "Q8_0", "F16"]
    assert model.show_readings(ticket, readings) is None  # nothing to plan with
    assert model.prediction_note() == NO_PROFILE_NOTE and model.repo_activity.text == ""
    cells = [row.cells() for row in model.quant_rows()]
    assert [c[:5] for c in cells][0] == ("Q4_0", "5.1 MiB", "—", "—", "—")
    assert model.recommended_path is None and model.selected_path == "tiny-llama-Q4_0.gguf"


def test_the_recommended_quant_is_marked_and_selected_until_one_is_picked(
    hub: LocalHub, laptop: Profile
) -> None:
    model = shown(DiscoverModel(laptop, None, 4096), QWEN3)
    rows = model.quant_rows()
    assert [row.model.quant for row in rows] == ["Q2_K", "Q4_K_M", "Q8_0"]
    assert all(row.prediction is not None for row in rows)
    best = [row for row in rows if row.recommended]
    assert len(best) == 1 and best[0].model.path == model.recommended_path
    assert model.selected_path == model.recommended_path
    assert best[0].cells()[0].startswith("★ ") and "recommended" in best[0].notes()
    assert best[0].cells()[2].endswith(" tok/s") and best[0].cells()[4].endswith("%")
    model.select_quant(rows[0].model.path)  # the person picks one: replanning keeps it
    request = model.set_budget(2 * GIB)
    assert request is not None
    model.show_predictions(request, request.run())
    assert model.selected_path == rows[0].model.path


def test_moving_the_budget_or_context_replans_from_the_headers_already_read(
    hub: LocalHub, laptop: Profile
) -> None:
    model = shown(DiscoverModel(laptop, 6 * GIB, 4096), QWEN3)
    before = {path: p.resident_share for path, p in model.predictions.items() if p}
    hub.reset_counters()
    heard = Heard(model)
    request = model.set_budget(0)
    assert request is not None and model.repo_activity.text == PLANNING
    assert request.budget_bytes == 0 and request.readings == tuple(model.readings or ())
    assert model.set_budget(0) is None  # the same budget again: nothing to do
    model.show_predictions(request, request.run())
    after = {path: p.resident_share for path, p in model.predictions.items() if p}
    assert set(after) == set(before) and all(share == 0 for share in after.values())
    assert any(share > 0 for share in before.values())
    assert heard.changes == [Change.REPOSITORY, Change.QUANTS] * 2
    back = model.set_budget(6 * GIB)
    assert back is not None
    model.show_predictions(back, back.run())
    at_4k = figures(model)
    longer = model.set_context(32768)  # the KV cache takes VRAM the weights had
    assert longer is not None
    model.show_predictions(longer, longer.run())
    at_32k = figures(model)
    assert set(at_32k) == set(at_4k) and at_32k != at_4k
    assert "32,768-token context" in model.prediction_note()
    assert hub.requests == []  # not one request: the headers were kept


def test_an_answer_for_an_older_budget_or_repository_is_dropped(
    hub: LocalHub, laptop: Profile
) -> None:
    model = shown(DiscoverModel(laptop, 6 * GIB, 4096), TINY_LLAMA)
    older = model.set_budget(1 * GIB)
    newer = model.set_budget(2 * GIB)
    assert older is not None and newer is not None
    assert not model.show_predictions(older, older.run())
    assert model.planning
    assert model.show_predictions(newer, newer.run()) and not model.planning
    stale = model.set_budget(3 * GIB)
    assert stale is not None
    listing = model.open_repository(QWEN3)
    assert listing is not None
    assert not model.show_predictions(stale, stale.run())  # for the repository left behind
    assert model.predictions == {} and model.details is None
    details, _readings = listed(TINY_LLAMA)
    assert not model.show_details(listing - 1, details)


def test_the_budget_stays_within_the_profiled_gpu(laptop: Profile, recorded_profile) -> None:
    model = DiscoverModel(laptop, 64 * GIB, 4096)
    assert laptop.gpu is not None
    assert model.budget_bytes == model.vram_total_bytes == laptop.gpu.vram_total_bytes
    cpu_only = recorded_profile
    model.use_machine(cpu_only, None, 4096)
    assert model.budget_bytes == 0 and model.vram_total_bytes == 0
    assert "the CPU (no GPU in the profile)" in model.prediction_note()


def test_a_quant_too_big_for_ram_says_so(hub: LocalHub, recorded_profile) -> None:
    epyc = recorded_profile
    model = shown(DiscoverModel(epyc, None, 4096), QWEN3)
    q8 = next(row for row in model.quant_rows() if row.model.quant == "Q8_0")
    assert q8.prediction is not None and not q8.prediction.fits_ram
    assert q8.cells()[2] == EXCEEDS_RAM and "needs more RAM" in q8.notes()
    assert model.recommended_path != q8.model.path


def test_a_broken_file_is_one_row_with_its_reason(hub: LocalHub, laptop: Profile) -> None:
    model = shown(DiscoverModel(laptop, None, 4096), BROKEN)
    notes = sorted(row.notes() for row in model.quant_rows())
    assert notes == [
        "unusable: shardtest/Broken-GGUF/broken-Q4_0.gguf: not a GGUF file (wrong magic bytes)",
        "unusable: shardtest/Broken-GGUF/truncated-Q4_0.gguf: truncated GGUF (the file ends "
        "in its header)",
    ]
    assert model.recommended_path is None and model.repo_activity.problem == ""


def test_a_repository_that_fails_keeps_what_was_listed(hub: LocalHub) -> None:
    model = DiscoverModel()
    ticket = model.open_repository("shardtest/Gated-GGUF")
    assert ticket is not None
    details, _ = listed(TINY_LLAMA)
    model.show_details(ticket, replace(details, repo_id="shardtest/Gated-GGUF"))
    model.repository_failed(ticket, "shardtest/Gated-GGUF is gated: add a Hugging Face token")
    assert model.repo_activity.problem.endswith("add a Hugging Face token")
    assert len(model.quant_rows()) == 3  # the sizes stay shown
    assert model.open_repository("shardtest/Gated-GGUF") is not None  # a failure can be retried


# -- downloads ------------------------------------------------------------------------------------


def a_download() -> DownloadState:
    details, _ = listed(TINY_LLAMA)
    with HubStore() as store:
        download = start_or_resume(store, details, details.models[0], models_dir())
    return DownloadState.of(download)


def test_a_download_left_running_by_a_gone_process_is_paused(hub: LocalHub) -> None:
    details, _ = listed(TINY_LLAMA)
    with HubStore() as store:
        download = start_or_resume(store, details, details.models[0], models_dir())
        store.set_status(download.id, RUNNING)
        download = store.download(download.id)
    assert DownloadState.of(download).status == RUNNING
    state = DownloadState.of(download, running_here=False)
    assert state.status == PAUSED and state.can_resume and not state.can_pause
    assert state.progress_text() == "paused at 0 B of 5.1 MiB"
    assert state.name == "shardtest/Tiny-Llama-GGUF · tiny-llama-Q4_0.gguf"


def test_progress_moves_a_running_download_only(hub: LocalHub) -> None:
    model = DiscoverModel()
    state = replace(a_download(), status=QUEUED)
    heard = Heard(model)
    model.track(state)
    model.show_progress(DownloadProgress(state.download_id, 1 << 20, 4 << 20, float(1 << 20), "f"))
    shown_state = model.download(state.download_id)
    assert shown_state is not None and shown_state.status == RUNNING
    assert shown_state.progress_text() == "1.0 MiB of 4.0 MiB · 1.0 MiB/s · 3 s left"
    assert heard.changes == [Change.DOWNLOADS, Change.QUANTS, Change.DOWNLOADS]
    model.mark(state.download_id, PAUSED)
    model.show_progress(DownloadProgress(state.download_id, 2 << 20, 4 << 20, 1.0, "f"))
    paused = model.download(state.download_id)
    assert paused is not None and paused.done_bytes == 1 << 20 and paused.status == PAUSED
    model.download_failed(state.download_id, "the disk is full")
    failed = model.download(state.download_id)
    assert failed is not None and failed.status == FAILED and failed.can_resume


def test_downloads_show_in_their_quant_row_and_earlier_ones_do_not_override(
    hub: LocalHub,
) -> None:
    model = shown(DiscoverModel(), TINY_LLAMA)
    state = a_download()
    model.track(replace(state, status=RUNNING, done_bytes=100))
    model.add_unfinished([replace(state, status=PAUSED)])  # read back from the store
    assert model.downloads() == [replace(state, status=RUNNING, done_bytes=100)]
    row = model.quant_rows()[0]
    assert row.download is not None and "downloading" in row.notes()
    model.joined(state)
    assert model.repo_activity.text == "Tiny Llama · Q4_0 is downloading already"
    done = replace(state, status=DONE, model_file=Path("/m/tiny-llama-Q4_0.gguf"))
    model.track(done)
    assert model.quant_rows()[0].notes() == "downloaded" and done.can_load
    assert done.progress_text() == "downloaded (5.1 MiB), in My models"


def test_each_figure_is_shown_as_the_range_its_kind_of_machine_was_off_by(
    hub: LocalHub, laptop: Profile
) -> None:
    """Issue 29: a quant is chosen by its predicted speed, so the speed is shown with the
    spread the calibration table measured for the machine's kind, and the note says so."""
    model = shown(DiscoverModel(laptop, None, 4096), QWEN3)
    error = kind_error(machine_kind(laptop))
    assert 0 < error < 0.5
    for row in model.quant_rows():
        prediction = row.prediction
        assert prediction is not None and prediction.sureness.error == error
        low, high = (float(v.replace(",", "")) for v in row.cells()[2][: -len(" tok/s")].split("–"))
        speed = prediction.decode_tokens_per_s
        assert low < speed < high  # the prediction is inside its range...
        assert low == pytest.approx(speed / (1 + error), rel=0.06)  # ...as wide as its kind's error
        assert high == pytest.approx(speed / (1 - error), rel=0.06)
    assert f"±{error:.0%}" in model.prediction_note()
    assert f"{machine_kind(laptop)} machines" in model.prediction_note()


def test_durations_and_speeds_read_like_a_browser_download() -> None:
    assert [format_duration(s) for s in (0.2, 42, 252, 4000)] == [
        "1 s", "42 s", "4 min 12 s", "1 h 06 min",
    ]  # fmt: skip
    assert [seconds_text(s) for s in (0.0001, 0.042, 2.345)] == ["< 1 ms", "42 ms", "2.3 s"]
    assert [speed_text(v) for v in (4.25, 99.96, 11835.2)] == [
        "4.2 tok/s", "100.0 tok/s", "11,835 tok/s",
    ]  # fmt: skip
    spread, measured = Sureness(0.1, "CUDA"), Sureness(None, "CUDA")
    assert [speed_range_text(v, spread) for v in (3.2, 40.0, 1500.0)] == [
        "2.9–3.6 tok/s", "36–44 tok/s", "1,364–1,667 tok/s",
    ]  # fmt: skip
    assert [seconds_range_text(s, spread) for s in (0.0004, 0.05, 2.4, 140.0)] == [
        "< 1 ms", "45–55 ms", "2.2–2.6 s", "126–154 s",
    ]  # fmt: skip
    assert speed_range_text(40.0, measured) == "40.0 tok/s"  # measured here: no range
    assert seconds_range_text(2.4, measured) == "2.4 s"


def test_listeners_can_leave() -> None:
    model = DiscoverModel()
    heard: list[Change] = []
    model.subscribe(heard.append)
    model.begin_search(SearchQuery("a"))
    model.unsubscribe(heard.append)
    model.begin_search(SearchQuery("b"))
    assert heard == [Change.SEARCH]
