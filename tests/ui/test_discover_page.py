"""The model manager's Discover tab against a local Hub (tests/local_hub), with real Qt
events offscreen: search, a repository's quants with this machine's predictions, the
budget and context moving them, downloads paused, cut and resumed, and "Load now".

Every Hub call runs on the page's workers; the tests wait on what the page shows
(qtbot.waitUntil) or on its signals, never on time.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import keyring
import keyring.backends.fail
import pytest
from local_hub import TEST_TOKEN, LocalHub
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QInputDialog

from app.hub.catalogue import Catalogue
from app.hub.discover_downloads import DownloadState
from app.hub.discover_model import (
    EXCEEDS_RAM,
    NO_PROFILE_NOTE,
    QUANT_COLUMNS,
    DiscoverModel,
)
from app.hub.file_transfer import TransferPolicy
from app.hub.hub_settings import hub_token, models_dir
from app.hub.model_download import model_folder, start_or_resume
from app.screen_text.units import format_bytes
from app.stores.hub_store import DONE, PAUSED, RUNNING, HubStore
from app.stores.model_library import ModelLibrary
from engine.generation.sampling import GREEDY
from engine.machine.described_machines import load_described
from engine.machine.profile import Profile
from ui.chat.shown_conversation import NO_MODEL_LINES
from ui.desktop import Desktop
from ui.models.discover_page import DOWNLOAD_COLUMNS, DiscoverJobs, DiscoverPage
from ui.models.model_manager import NAME, ModelManager

TINY_LLAMA = "shardtest/Tiny-Llama-GGUF"
TINY_VISION = "shardtest/Tiny-Vision-GGUF"
QWEN3 = "shardtest/Qwen3-30B-A3B-GGUF"
GATED = "shardtest/Gated-GGUF"
BROKEN = "shardtest/Broken-GGUF"
WAIT_MS = 60_000
QUANT, SIZE, SPEED, FIRST_TOKEN, IN_VRAM, NOTES = range(len(QUANT_COLUMNS))
MIB = 1 << 20
# patient enough for a loaded machine, quick to retry after a cut (tests change nothing else)
QUICK_RETRIES = TransferPolicy(read_timeout_s=10.0, first_wait_s=0.05, max_wait_s=0.2)
DANGER = ("#b00020", "#f87171")  # the theme's error red, light and dark


@pytest.fixture
def hub(local_hub: LocalHub, monkeypatch: pytest.MonkeyPatch) -> LocalHub:
    monkeypatch.setenv("HF_ENDPOINT", local_hub.url)
    return local_hub


@pytest.fixture
def library() -> Iterator[ModelLibrary]:
    with ModelLibrary() as lib:
        yield lib


Opener = Callable[..., tuple[ModelManager, DiscoverPage]]


@pytest.fixture
def open_discover(qtbot, hub: LocalHub, library: ModelLibrary) -> Iterator[Opener]:
    """Open the model manager on its Discover tab, planning for `profile`; afterwards the
    jobs stop and their workers finish before the hub closes."""
    made: list[DiscoverJobs] = []

    def open_it(
        profile: Profile | None = None, n_ctx: int = 4096
    ) -> tuple[ModelManager, DiscoverPage]:
        jobs = DiscoverJobs(DiscoverModel(profile, None, n_ctx), policy=QUICK_RETRIES)
        made.append(jobs)
        manager = ModelManager(library, discover=jobs)
        qtbot.addWidget(manager)
        manager.show()
        return manager, manager.show_discover()

    yield open_it
    for jobs in made:
        jobs.shutdown(wait=True)


@pytest.fixture
def laptop() -> Profile:
    """A described laptop with an 8 GB GPU (and 16 GB of RAM): the budget moves predictions."""
    return load_described("laptop-8gb")


def result_ids(page: DiscoverPage) -> list[str]:
    table = page.results
    return [table.item(row, 0).data(Qt.ItemDataRole.UserRole) for row in range(table.rowCount())]


def quant_cells(page: DiscoverPage) -> list[list[str]]:
    table = page.quants
    return [
        [table.item(row, column).text() for column in range(table.columnCount())]
        for row in range(table.rowCount())
    ]


def pick_result(qtbot, page: DiscoverPage, repo_id: str) -> None:
    qtbot.waitUntil(lambda: repo_id in result_ids(page), timeout=WAIT_MS)
    page.results.selectRow(result_ids(page).index(repo_id))


def wait_for_figures(qtbot, page: DiscoverPage) -> list[list[str]]:
    """The quant table once every quant is read and planned."""
    qtbot.waitUntil(
        lambda: page.model.readings is not None and not page.model.planning, timeout=WAIT_MS
    )
    return quant_cells(page)


def pick_quant(page: DiscoverPage, quant: str) -> None:
    rows = [cells[QUANT].lstrip("★ ") for cells in quant_cells(page)]
    page.quants.selectRow(rows.index(quant))


def download_of(page: DiscoverPage) -> DownloadState | None:
    row = page.model.selected_row()
    return row.download if row is not None else None


def wait_for_status(qtbot, page: DiscoverPage, status: str) -> DownloadState:
    qtbot.waitUntil(lambda: (d := download_of(page)) is not None and d.status == status,
                    timeout=WAIT_MS)  # fmt: skip
    state = download_of(page)
    assert state is not None
    return state


def stored_status(download_id: int) -> str:
    with HubStore() as store:
        return store.download(download_id).status


def is_red(label) -> bool:  # noqa: ANN001 - a QLabel
    return any(colour in label.styleSheet() for colour in DANGER)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# -- searching ------------------------------------------------------------------------------------


def test_the_tab_opens_on_popular_models_and_enter_searches(qtbot, open_discover: Opener) -> None:
    manager, page = open_discover()
    qtbot.waitUntil(lambda: len(result_ids(page)) == 6, timeout=WAIT_MS)
    assert result_ids(page)[0] == QWEN3  # most downloaded first
    assert manager.tabs.tabText(manager.tabs.currentIndex()) == "Discover"
    qtbot.keyClicks(page.search_box, "tiny")
    qtbot.keyClick(page.search_box, Qt.Key.Key_Return)
    assert page.search_status.text() == "searching…"
    qtbot.waitUntil(lambda: len(result_ids(page)) == 3, timeout=WAIT_MS)
    assert manager.isVisible()  # Enter searched; it did not close the dialog
    page.kind_box.setCurrentText("Vision")
    page.kind_box.activated.emit(page.kind_box.currentIndex())
    qtbot.waitUntil(lambda: result_ids(page) == [TINY_VISION], timeout=WAIT_MS)
    cells = [page.results.item(0, c).text() for c in range(page.results.columnCount())]
    assert cells == [TINY_VISION, "vision", "6.4M", "400", "4"]
    page.kind_box.setCurrentText("Any kind")
    page.search_box.setText("gated")
    qtbot.mouseClick(page.search_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: result_ids(page) == [GATED], timeout=WAIT_MS)
    assert page.results.item(0, 0).text() == f"{GATED}  (gated)"


def test_offline_the_tab_says_so_at_once_and_searches_only_when_asked(
    qtbot, open_discover: Opener, monkeypatch: pytest.MonkeyPatch, hub: LocalHub
) -> None:
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens there
    started = time.monotonic()
    manager, page = open_discover()
    qtbot.waitUntil(lambda: is_red(page.search_status), timeout=WAIT_MS)
    assert time.monotonic() - started < 3  # not 25 s of retries first
    text = page.search_status.text()
    assert text.startswith("Offline: no connection to the Hub (http://127.0.0.1:9")
    assert "\n" not in text and "Errno" not in text and page.results.rowCount() == 0
    # nothing searches by itself now: not a new order, not the tab shown again
    page.sort_box.setCurrentIndex(1)
    page.sort_box.activated.emit(1)
    manager.tabs.setCurrentIndex(0)
    manager.tabs.setCurrentIndex(manager.tabs.indexOf(page))
    assert page.search_status.text() == text and page.model.query is None
    # asked, with the Hub back: it searches
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    qtbot.mouseClick(page.search_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: len(result_ids(page)) == 6, timeout=WAIT_MS)
    assert not is_red(page.search_status) and not page.model.offline


# -- a repository, its quants and the predictions -------------------------------------------------


def test_quants_are_planned_for_this_machine_and_follow_the_budget_and_context(
    qtbot, open_discover: Opener, laptop: Profile, hub: LocalHub
) -> None:
    _manager, page = open_discover(laptop)
    pick_result(qtbot, page, QWEN3)
    assert page.repo_status.text() in ("listing the repository…", "reading headers…")
    cells = wait_for_figures(qtbot, page)
    assert [row[QUANT].lstrip("★ ") for row in cells] == ["Q2_K", "Q4_K_M", "Q8_0"]
    assert all(re.fullmatch(r"[\d.,]+–[\d.,]+ tok/s", row[SPEED]) for row in cells)  # a range
    assert all(re.fullmatch(r"[\d.]+–[\d.]+ m?s", row[FIRST_TOKEN]) for row in cells)
    starred = [row for row in range(3) if page.quants.item(row, QUANT).text().startswith("★ ")]
    assert len(starred) == 1 and page.quants.item(starred[0], QUANT).font().bold()
    assert page.quants.selectedItems()[0].row() == starred[0]  # the recommended one, chosen
    assert page.title.text() == QWEN3 and "licence apache-2.0" in page.meta.text()
    assert page.summary.text().startswith("Qwen3-30B-A3B's shapes")
    assert "7.5 GiB of VRAM" in page.note.text()
    at_full_budget = [row[IN_VRAM] for row in cells]
    hub.reset_counters()
    page.budget_slider.setValue(0)  # what the slider does when the person drags it to 0
    qtbot.waitUntil(lambda: [row[IN_VRAM] for row in wait_for_figures(qtbot, page)] ==
                    ["0%"] * 3, timeout=WAIT_MS)  # fmt: skip
    assert at_full_budget != ["0%"] * 3 and "0 B of VRAM" in page.note.text()
    at_4k = quant_cells(page)
    page.budget_slider.setValue(4096)  # 4 GiB, then a longer context
    qtbot.waitUntil(lambda: page.model.budget_bytes == 4096 * MIB, timeout=WAIT_MS)
    at_4k = wait_for_figures(qtbot, page)
    index = page.context_box.findData(32768)
    page.context_box.setCurrentIndex(index)
    page.context_box.activated.emit(index)
    qtbot.waitUntil(lambda: page.model.n_ctx == 32768 and not page.model.planning, timeout=WAIT_MS)
    assert quant_cells(page) != at_4k and "32,768-token context" in page.note.text()
    assert hub.requests == []  # replanned from the headers read once: nothing fetched again


def test_without_a_profile_the_quants_show_with_a_line_saying_to_profile(
    qtbot, open_discover: Opener
) -> None:
    _manager, page = open_discover(None)
    pick_result(qtbot, page, TINY_LLAMA)
    cells = wait_for_figures(qtbot, page)
    assert [row[:5] for row in cells] == [
        ["Q4_0", "5.1 MiB", "—", "—", "—"],
        ["Q8_0", "8.1 MiB", "—", "—", "—"],
        ["F16", "13.8 MiB", "—", "—", "—"],
    ]
    assert page.note.text() == NO_PROFILE_NOTE
    assert not page.budget_slider.isEnabled() and not page.context_box.isEnabled()


def test_a_quant_beyond_this_machines_ram_is_marked(
    qtbot, open_discover: Opener, recorded_profile
) -> None:
    epyc = recorded_profile
    _manager, page = open_discover(epyc)
    pick_result(qtbot, page, QWEN3)
    cells = {row[QUANT].lstrip("★ "): row for row in wait_for_figures(qtbot, page)}
    assert cells["Q8_0"][SPEED] == EXCEEDS_RAM
    assert page.quants.item(2, SPEED).foreground().color().name() in DANGER
    assert "no GPU in the profile" in page.note.text() and page.budget_label.text() == "no GPU"


def test_a_gated_repository_says_how_to_get_in(
    qtbot, open_discover: Opener, laptop: Profile, hub: LocalHub
) -> None:
    _manager, page = open_discover(laptop)
    pick_result(qtbot, page, GATED)
    qtbot.waitUntil(lambda: is_red(page.repo_status), timeout=WAIT_MS)
    line = page.repo_status.text()
    assert line.startswith(f"{GATED} is gated: add a Hugging Face token")
    assert f"accept its terms at {hub.url}/{GATED}" in line and "\n" not in line
    assert "gated" in page.meta.text() and quant_cells(page)[0][SIZE] == "5.1 MiB"


def test_with_a_token_a_gated_repository_asks_to_accept_its_terms(
    qtbot, open_discover: Opener, monkeypatch: pytest.MonkeyPatch, hub: LocalHub
) -> None:
    monkeypatch.setenv("HF_TOKEN", TEST_TOKEN)
    _manager, page = open_discover(None)
    pick_result(qtbot, page, GATED)
    qtbot.waitUntil(lambda: is_red(page.repo_status), timeout=WAIT_MS)
    assert "accept its terms at" in page.repo_status.text()
    assert "with the account of your token" in page.repo_status.text()


@pytest.fixture
def no_keyring() -> Iterator[None]:
    """A saved token goes to a file in the test's own config folder, never to the keyring
    of the person running the tests."""
    before = keyring.get_keyring()
    keyring.set_keyring(keyring.backends.fail.Keyring())
    yield
    keyring.set_keyring(before)


def test_a_token_added_on_the_page_opens_a_gated_repository(
    qtbot, open_discover: Opener, laptop: Profile, hub: LocalHub, no_keyring: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    hub.accept_terms(TEST_TOKEN, GATED)
    _manager, page = open_discover(laptop)
    pick_result(qtbot, page, GATED)
    qtbot.waitUntil(lambda: is_red(page.repo_status), timeout=WAIT_MS)
    assert page.token_button.isVisible()
    asked: list[str] = []

    def paste_token(_parent, _title, prompt, _echo):  # noqa: ANN001, ANN202 - Qt's signature
        asked.append(prompt)
        return TEST_TOKEN, True

    monkeypatch.setattr(QInputDialog, "getText", paste_token)
    qtbot.mouseClick(page.token_button, Qt.MouseButton.LeftButton)
    cells = wait_for_figures(qtbot, page)
    assert not is_red(page.repo_status) and cells[0][SPEED].endswith(" tok/s")
    assert "Access Tokens" in asked[0]
    found = hub_token()
    assert found is not None and found.value == TEST_TOKEN and found.source == "file"


def test_a_missing_repository_and_broken_files_are_one_line_each(
    qtbot, open_discover: Opener, laptop: Profile
) -> None:
    _manager, page = open_discover(laptop)
    page.open_repository("shardtest/No-Such-GGUF")
    qtbot.waitUntil(lambda: is_red(page.repo_status), timeout=WAIT_MS)
    assert page.repo_status.text().startswith("no repository 'shardtest/No-Such-GGUF'")
    pick_result(qtbot, page, BROKEN)
    cells = wait_for_figures(qtbot, page)
    assert sorted(row[NOTES].split(": ")[-1] for row in cells) == [
        "not a GGUF file (wrong magic bytes)", "truncated GGUF (the file ends in its header)",
    ]  # fmt: skip
    assert not is_red(page.repo_status)
    assert not page.download_button.isEnabled()
    assert page.quants.item(0, NOTES).foreground().color().name() in DANGER


# -- downloading ----------------------------------------------------------------------------------


def test_download_shows_progress_lands_in_my_models_and_loads(
    qtbot, open_discover: Opener, laptop: Profile, hub: LocalHub, library: ModelLibrary
) -> None:
    manager, page = open_discover(laptop)
    pick_result(qtbot, page, TINY_VISION)
    wait_for_figures(qtbot, page)
    quant = page.model.selected_quant()
    assert quant is not None and quant.projector is not None
    whole = format_bytes(quant.download_size)  # the projector counts
    assert page.download_button.text() == f"Download Q8_0 · {whole}"
    hub.faults.throttle_bytes_per_s = 4 * MIB  # a few seconds: the progress can be seen
    qtbot.mouseClick(page.download_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: " left" in page.download_status.text(), timeout=WAIT_MS)
    assert page.progress.isVisible() and page.pause_button.isEnabled()
    assert "/s · " in page.download_status.text() and not page.download_button.isVisible()
    assert page.downloads.rowCount() == 1 and page.downloads.isVisible()
    hub.faults.throttle_bytes_per_s = None
    state = wait_for_status(qtbot, page, DONE)
    folder = model_folder(models_dir(), TINY_VISION)
    model_file = folder / "tiny-vision-Q8_0.gguf"
    projector = folder / "mmproj-tiny-vision-Q8_0.gguf"
    entry = library.find(model_file)
    assert entry is not None and entry.mmproj_path == projector.resolve()
    assert state.model_file == model_file and page.progress.value() == 1000
    assert page.download_status.text() == f"downloaded ({whole}), in My models"
    names = [manager.table.item(row, NAME).text() for row in range(manager.table.rowCount())]
    assert len(names) == 2 and manager.selected().path == model_file.resolve()
    assert page.load_button.isEnabled() and not page.download_button.isVisible()
    assert not page.pause_button.isVisible() and not page.cancel_button.isVisible()
    with qtbot.waitSignal(manager.load_requested, timeout=WAIT_MS) as requested:
        qtbot.mouseClick(page.load_button, Qt.MouseButton.LeftButton)
    assert requested.args == [str(model_file), str(projector)]
    assert not manager.isVisible()  # loading closes the manager, as from My models


def test_a_second_click_joins_the_running_download(
    qtbot, open_discover: Opener, laptop: Profile, hub: LocalHub
) -> None:
    _manager, page = open_discover(laptop)
    pick_result(qtbot, page, TINY_LLAMA)
    wait_for_figures(qtbot, page)
    pick_quant(page, "F16")
    hub.reset_counters()  # the header reads are not the download
    hub.faults.throttle_bytes_per_s = 2 * MIB
    page.download_button.click()
    page.download_button.click()  # before the first has even started
    qtbot.waitUntil(lambda: "downloading already" in page.repo_status.text(), timeout=WAIT_MS)
    with HubStore() as store:
        assert len(store.downloads()) == 1
    assert page.jobs.manager.running() == [download_of(page).download_id]  # type: ignore[union-attr]
    hub.faults.throttle_bytes_per_s = None
    wait_for_status(qtbot, page, DONE)
    size = hub.repo_file(TINY_LLAMA, "tiny-llama-F16.gguf").size
    assert hub.bytes_served(TINY_LLAMA, "tiny-llama-F16.gguf") == size  # fetched once


def test_pause_then_resume_completes_from_where_it_stopped(
    qtbot, open_discover: Opener, laptop: Profile, hub: LocalHub, hub_repos
) -> None:
    _manager, page = open_discover(laptop)
    pick_result(qtbot, page, TINY_LLAMA)
    wait_for_figures(qtbot, page)
    pick_quant(page, "F16")
    hub.reset_counters()  # the header reads are not the download
    hub.faults.throttle_bytes_per_s = 2 * MIB
    qtbot.mouseClick(page.download_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: (d := download_of(page)) is not None and d.done_bytes >= 2 * MIB,
                    timeout=WAIT_MS)  # fmt: skip
    qtbot.mouseClick(page.pause_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not page.jobs.manager.running(), timeout=WAIT_MS)
    paused = wait_for_status(qtbot, page, PAUSED)
    assert stored_status(paused.download_id) == PAUSED
    assert page.pause_button.text() == "Resume" and not page.download_button.isVisible()
    assert page.download_status.text().startswith("paused at ")
    served_before = hub.bytes_served(TINY_LLAMA, "tiny-llama-F16.gguf")
    part = model_folder(models_dir(), TINY_LLAMA) / "tiny-llama-F16.gguf.part"
    kept = part.stat().st_size
    hub.faults.throttle_bytes_per_s = None
    qtbot.mouseClick(page.pause_button, Qt.MouseButton.LeftButton)  # now Resume
    done = wait_for_status(qtbot, page, DONE)
    size = hub.repo_file(TINY_LLAMA, "tiny-llama-F16.gguf").size
    served = hub.bytes_served(TINY_LLAMA, "tiny-llama-F16.gguf")
    assert 0 < served_before < size and served < served_before + size  # resumed, not redone
    ranges = [r.range for r in hub.requests if r.path.endswith("tiny-llama-F16.gguf") and r.range]
    assert kept > 0 and ranges[-1] == f"bytes={kept}-"  # from the end of the .part file
    assert done.model_file is not None
    assert sha256(done.model_file) == sha256(
        hub_repos.local_path(TINY_LLAMA, "tiny-llama-F16.gguf")
    )


def test_resume_pressed_while_the_pause_is_still_stopping_resumes_once_stopped(
    qtbot, open_discover: Opener, laptop: Profile, hub: LocalHub
) -> None:
    _manager, page = open_discover(laptop)
    pick_result(qtbot, page, TINY_LLAMA)
    wait_for_figures(qtbot, page)
    pick_quant(page, "F16")
    hub.faults.stall_after("tiny-llama-F16", 2 * MIB)  # the worker waits in a read
    qtbot.mouseClick(page.download_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: (d := download_of(page)) is not None and d.done_bytes > 0,
                    timeout=WAIT_MS)  # fmt: skip
    download_id = download_of(page).download_id  # type: ignore[union-attr]
    qtbot.mouseClick(page.pause_button, Qt.MouseButton.LeftButton)
    assert page.pause_button.text() == "Resume"
    qtbot.mouseClick(page.pause_button, Qt.MouseButton.LeftButton)
    assert page.jobs.manager.running() == [download_id]  # it had not stopped yet
    hub.faults.release_stalls()  # the next bytes arrive: it stops, then goes on
    done = wait_for_status(qtbot, page, DONE)
    with HubStore() as store:
        assert [d.status for d in store.downloads()] == [DONE]
    assert done.model_file is not None and done.model_file.is_file()


def test_a_cut_connection_mid_download_still_completes(
    qtbot, open_discover: Opener, laptop: Profile, hub: LocalHub, hub_repos
) -> None:
    _manager, page = open_discover(laptop)
    pick_result(qtbot, page, TINY_LLAMA)
    wait_for_figures(qtbot, page)
    pick_quant(page, "Q8_0")
    hub.faults.cut_after("tiny-llama-Q8_0", 3 * MIB)
    qtbot.mouseClick(page.download_button, Qt.MouseButton.LeftButton)
    done = wait_for_status(qtbot, page, DONE)
    assert any(record.fault == "cut" for record in hub.requests)
    assert done.model_file is not None
    assert sha256(done.model_file) == sha256(
        hub_repos.local_path(TINY_LLAMA, "tiny-llama-Q8_0.gguf")
    )
    assert not is_red(page.download_status)


def test_cancel_stops_the_download_and_deletes_its_part(
    qtbot, open_discover: Opener, laptop: Profile, hub: LocalHub
) -> None:
    _manager, page = open_discover(laptop)
    pick_result(qtbot, page, TINY_LLAMA)
    wait_for_figures(qtbot, page)
    pick_quant(page, "F16")
    hub.faults.throttle_bytes_per_s = 2 * MIB
    qtbot.mouseClick(page.download_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: (d := download_of(page)) is not None and d.done_bytes > 0,
                    timeout=WAIT_MS)  # fmt: skip
    download_id = download_of(page).download_id  # type: ignore[union-attr]
    qtbot.mouseClick(page.cancel_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not page.jobs.manager.running(), timeout=WAIT_MS)
    qtbot.waitUntil(lambda: stored_status(download_id) == "cancelled", timeout=WAIT_MS)
    part = model_folder(models_dir(), TINY_LLAMA) / "tiny-llama-F16.gguf.part"
    assert not part.exists() and download_of(page) is None
    assert page.download_button.isVisible() and page.download_button.isEnabled()
    assert page.downloads.rowCount() == 0


def test_a_failed_download_is_one_red_line_and_can_be_resumed(
    qtbot, open_discover: Opener, laptop: Profile, hub: LocalHub
) -> None:
    _manager, page = open_discover(laptop)
    pick_result(qtbot, page, TINY_LLAMA)
    wait_for_figures(qtbot, page)
    pick_quant(page, "Q4_0")
    hub.faults.fail_next("tiny-llama-Q4_0", 404, times=20)
    qtbot.mouseClick(page.download_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: is_red(page.download_status), timeout=WAIT_MS)
    assert "\n" not in page.download_status.text()
    assert page.pause_button.text() == "Resume" and page.cancel_button.isEnabled()
    hub.faults.clear()
    qtbot.mouseClick(page.pause_button, Qt.MouseButton.LeftButton)
    wait_for_status(qtbot, page, DONE)
    assert not is_red(page.download_status)


def test_unfinished_downloads_of_an_earlier_run_are_listed_with_resume(
    qtbot, open_discover: Opener, laptop: Profile, hub: LocalHub, library: ModelLibrary
) -> None:
    details = Catalogue().details(TINY_LLAMA)
    with HubStore() as store:  # an earlier run started it and was killed mid-way
        earlier = start_or_resume(store, details, details.models[0], models_dir())
        store.set_status(earlier.id, RUNNING)
    manager, page = open_discover(laptop)
    qtbot.waitUntil(lambda: page.downloads.rowCount() == 1, timeout=WAIT_MS)
    assert page.downloads.horizontalHeaderItem(0).text() == DOWNLOAD_COLUMNS[0]
    assert page.downloads.item(0, 0).text() == f"{TINY_LLAMA} · tiny-llama-Q4_0.gguf"
    assert page.downloads.item(0, 1).text() == "paused at 0 B of 5.1 MiB"
    assert page.resume_selected.isEnabled() and not page.pause_selected.isEnabled()
    with qtbot.waitSignal(page.jobs.imported, timeout=WAIT_MS) as imported:
        qtbot.mouseClick(page.resume_selected, Qt.MouseButton.LeftButton)
    assert library.find(imported.args[0]) is not None
    qtbot.waitUntil(lambda: page.load_selected.isEnabled(), timeout=WAIT_MS)
    with qtbot.waitSignal(manager.load_requested, timeout=WAIT_MS) as requested:
        qtbot.mouseClick(page.load_selected, Qt.MouseButton.LeftButton)
    assert requested.args == [imported.args[0], None]


def test_every_control_of_the_discover_tab_is_named(qtbot, open_discover: Opener) -> None:
    _manager, page = open_discover()
    named = [
        page.search_box, page.kind_box, page.sort_box, page.search_button, page.results,
        page.budget_slider, page.context_box, page.quants, page.download_button, page.progress,
        page.pause_button, page.cancel_button, page.load_button, page.downloads,
        page.resume_selected, page.pause_selected, page.cancel_selected, page.load_selected,
    ]  # fmt: skip
    names = [widget.accessibleName() for widget in named]
    assert all(names) and len(set(names)) == len(names)


# -- in the desktop app ---------------------------------------------------------------------------


def test_the_desktop_opens_discover_plans_like_its_loads_and_downloads_outlive_the_dialog(
    qtbot, desktops, hub: LocalHub, default_model_file: Path
) -> None:
    desktop = Desktop(str(default_model_file), None, 2048, GREEDY, lambda: (None, "no GPU"))
    desktops.append(desktop)
    qtbot.addWidget(desktop.window)
    with qtbot.waitSignal(desktop.bridge.model_loaded, timeout=WAIT_MS):
        desktop.start()
    assert "Tools → Models → Discover (Ctrl+Shift+M)" in NO_MODEL_LINES[0]
    assert desktop.window.discover_action.shortcut().toString() == "Ctrl+Shift+M"
    desktop.window.discover_action.trigger()
    manager = desktop.window.findChild(ModelManager)
    assert manager is not None and manager.tabs.currentWidget() is manager.discover
    page = manager.discover
    assert page.model is desktop.discover.model and page.model.n_ctx == 2048
    assert page.note.text() == NO_PROFILE_NOTE  # as the chat's loads: no profile
    pick_result(qtbot, page, TINY_LLAMA)
    wait_for_figures(qtbot, page)
    hub.faults.throttle_bytes_per_s = 2 * MIB
    qtbot.mouseClick(page.download_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: (d := download_of(page)) is not None and d.done_bytes > 0,
                    timeout=WAIT_MS)  # fmt: skip
    manager.close()  # the desktop keeps the jobs: the download goes on
    hub.faults.throttle_bytes_per_s = None
    picker = desktop.window.model_picker
    qtbot.waitUntil(lambda: len(picker.entries()) == 2, timeout=WAIT_MS)
    assert any(entry.path.endswith("tiny-llama-Q4_0.gguf") for entry in picker.entries())
    again = desktop.open_discover().discover
    state = again.model.downloads()[0]
    assert state.status == DONE and again.downloads.item(0, 1).text() == state.progress_text()
