"""The first-launch wizard: meet the machine, measure it, show the figures, pick a model.

Shown when no profile exists for this machine's fingerprint (see
`app.profiling_job.needs_profiling`), and again from the menu. Measuring runs
in a `ProfilingJob` on its own thread; a bridge turns the job's reports into
queued signals, so the pages update on the GUI thread and the window stays
responsive for the minutes a fast profile takes. Cancelling, going back, or
closing the wizard stops the job and stores nothing; skipping is fine, and
ShardChat then runs without a plan until the machine is profiled.

The pages only render: the facts come from `app.screen_text.profile_summary`, the run
from the job, the model check from `engine.model.inventory`. That check reads
the file's whole header (2 s for a 49k-token vocabulary), so it runs on a
worker and its outcome comes back through a queued signal.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QButtonGroup,
    QDialog,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QRadioButton,
    QVBoxLayout,
    QWidget,
    QWizard,
    QWizardPage,
)

from app.machine_profile import this_machine_profile
from app.screen_text.profile_summary import (
    Row,
    expected_duration_text,
    hardware_rows,
    result_rows,
    suggested_budget_bytes,
)
from app.screen_text.units import format_bytes
from app.stores.profile_store import ProfileStore
from engine.errors import BadInputError
from engine.machine.hardware import probe_hardware
from engine.machine.hardware_info import HardwareInfo
from engine.machine.profile import Profile, ProfileMode, Quietness
from engine.model.default_model import default_model_path
from engine.model.inventory import ModelInventory, read_inventory
from ui.profiling.model_suggestions_box import SuggestionsBox
from ui.profiling.profiling_page import ProfilingPage
from ui.thread_bridge import Background

if TYPE_CHECKING:  # engine.profiling.profiler loads llama.cpp; only its type is needed here
    pass

log = logging.getLogger(__name__)

WELCOME_PAGE, HARDWARE_PAGE, PROFILING_PAGE, RESULTS_PAGE, MODEL_PAGE, DONE_PAGE = range(6)


class FactsForm(QWidget):
    """(label, value) rows as a form; each value is selectable and named for screen readers."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._form = QFormLayout(self)
        self.values: dict[str, QLabel] = {}

    def show_rows(self, rows: list[Row]) -> None:
        while self._form.rowCount():
            self._form.removeRow(0)
        self.values = {}
        for label, value in rows:
            shown = QLabel(value)
            shown.setWordWrap(True)
            shown.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            shown.setAccessibleName(label)
            self._form.addRow(f"{label}:", shown)
            self.values[label] = shown


class WelcomePage(QWizardPage):
    """What profiling is for, and how long it takes here (the last run on this machine)."""

    def __init__(self, previous: Profile | None) -> None:
        super().__init__()
        self.setTitle("Welcome to ShardChat")
        self.setSubTitle("Before the first chat, ShardChat measures this computer once.")
        self.text = QLabel(
            "ShardChat splits big models between your GPU and your CPU. To split them well it "
            "times llama.cpp's own kernels on this machine, and nothing leaves your computer. "
            f"It takes {expected_duration_text(previous)}. The figures are stored and reused "
            "until the hardware or llama.cpp changes.\n\nYou can skip this now and run it "
            "later from the menu."
        )
        self.text.setWordWrap(True)
        self.text.setAccessibleName("What profiling does")
        QVBoxLayout(self).addWidget(self.text)


class HardwarePage(QWizardPage):
    """What the probe found: CPU, memory, GPUs with their PCIe links, llama.cpp build."""

    def __init__(self, hardware: HardwareInfo) -> None:
        super().__init__()
        self.setTitle("Hardware found")
        self.setSubTitle("This is what will be measured.")
        self.facts = FactsForm()
        self.facts.show_rows(hardware_rows(hardware))
        QVBoxLayout(self).addWidget(self.facts)


class ResultsPage(QWizardPage):
    """The measured figures and the suggested VRAM budget."""

    def __init__(self, profiling: ProfilingPage, budget_bytes: int) -> None:
        super().__init__()
        self.setTitle("Results")
        self.setSubTitle("What ShardChat measured; the planner uses these figures.")
        self._profiling = profiling
        self._budget_bytes = budget_bytes
        self.facts = FactsForm()
        QVBoxLayout(self).addWidget(self.facts)

    def initializePage(self) -> None:
        profile = self._profiling.profile
        if profile is not None:
            self.facts.show_rows(result_rows(profile, self._budget_bytes))


class ModelPage(QWizardPage):
    """The embedded default model, preselected, or a GGUF file the user imports."""

    checked = Signal(bool)  # an imported file was checked: True when it is now the choice

    def __init__(self, read_inventory: Callable[[str], ModelInventory] = read_inventory) -> None:
        """`read_inventory` is the engine's reader; a test wraps it to see its thread."""
        super().__init__()
        self._read_inventory = read_inventory
        self._reader = Background("wizard-model", owner=self)
        self._checking = 0  # imports being read: no Next or Finish meanwhile
        self.setTitle("Choose a model")
        self.setSubTitle("The small embedded model works at once; import a bigger GGUF any time.")
        self.default_choice = QRadioButton()
        self.default_choice.setAccessibleName("Use the embedded default model")
        self.imported_choice = QRadioButton()
        self.imported_choice.setAccessibleName("Use the imported model")
        self.imported_choice.hide()
        self.import_button = QPushButton("Import a GGUF file…")
        self.import_button.setAccessibleName("Import a GGUF file")
        self.import_button.clicked.connect(self._browse)
        self.reason_label = QLabel()
        self.reason_label.setWordWrap(True)
        self.reason_label.setAccessibleName("Model check")  # reading, or why it was refused
        self._imported_path = ""
        self._default_path = self._offer_default()
        self._choices = QButtonGroup(self)
        for choice in (self.default_choice, self.imported_choice):
            self._choices.addButton(choice)
            choice.toggled.connect(lambda _checked: self.completeChanged.emit())
        importing = QHBoxLayout()
        importing.addWidget(self.import_button)
        importing.addStretch(1)
        layout = QVBoxLayout(self)
        layout.addWidget(self.default_choice)
        layout.addWidget(self.imported_choice)
        layout.addLayout(importing)
        layout.addWidget(self.reason_label)
        self.suggestions = SuggestionsBox(parent=self)
        layout.addSpacing(12)
        layout.addWidget(self.suggestions)
        layout.addStretch(1)

    def _offer_default(self) -> str:
        try:
            path = default_model_path()
        except BadInputError as exc:
            self.default_choice.setText("Embedded default model (not installed)")
            self.default_choice.setEnabled(False)
            self.reason_label.setText(str(exc))
            return ""
        size = format_bytes(path.stat().st_size)
        self.default_choice.setText(f"Embedded default: {path.stem} ({size})")
        self.default_choice.setChecked(True)
        return str(path)

    def isComplete(self) -> bool:
        return bool(self.chosen_model()) and not self._checking

    def chosen_model(self) -> str:
        if self.imported_choice.isChecked():
            return self._imported_path
        return self._default_path if self.default_choice.isChecked() else ""

    def import_model(self, path: str) -> None:
        """Check the file as a chat model on the worker; `checked` says how it went.

        A chat model becomes the choice; a refused file gets its reason and the
        choice stays as it was.
        """
        self._checking += 1
        self.import_button.setEnabled(False)
        self.reason_label.setText(f"Reading {Path(path).name}…")
        self.completeChanged.emit()
        self._reader.run(lambda: self._check(path), lambda read: self._show_checked(path, read))

    def _check(self, path: str) -> ModelInventory | str:
        """On the worker: the file's inventory, or why it is no model."""
        try:
            return self._read_inventory(path)
        except BadInputError as exc:
            return str(exc)
        except Exception as exc:  # the page must not wait forever on a reader's bug
            log.exception("checking %s failed", path)
            return f"{path}: cannot be read ({type(exc).__name__}: {exc})"

    def _show_checked(self, path: str, outcome: ModelInventory | str) -> None:
        self._checking -= 1
        self.import_button.setEnabled(not self._checking)
        accepted = self._take_import(path, outcome)
        self.completeChanged.emit()
        self.checked.emit(accepted)

    def _take_import(self, path: str, outcome: ModelInventory | str) -> bool:
        if isinstance(outcome, str):
            self.reason_label.setText(outcome)
            return False
        inventory = outcome
        if inventory.is_vision_projector:
            self.reason_label.setText(
                f"{path}: a vision projector (mmproj), not a chat model; choose the model's "
                "own GGUF file"
            )
            return False
        self._imported_path = str(Path(path))
        size = format_bytes(inventory.file_bytes)
        self.imported_choice.setText(f"Imported: {inventory.name} ({size}), {path}")
        self.imported_choice.show()
        self.imported_choice.setChecked(True)
        self.reason_label.clear()
        return True

    def _browse(self) -> None:
        path, _filter = QFileDialog.getOpenFileName(
            self, "Import a GGUF model", "", "GGUF models (*.gguf);;All files (*)"
        )
        if path:
            self.import_model(path)


class DonePage(QWizardPage):
    def __init__(self, profiling: ProfilingPage, model: ModelPage) -> None:
        super().__init__()
        self.setTitle("Ready")
        self._profiling, self._model = profiling, model
        self.summary = QLabel()
        self.summary.setWordWrap(True)
        self.summary.setAccessibleName("Summary")
        QVBoxLayout(self).addWidget(self.summary)

    def initializePage(self) -> None:
        profile = self._profiling.profile
        measured = f"A {profile.mode.value} profile" if profile else "No profile"
        model = Path(self._model.chosen_model()).name
        wizard = self.wizard()
        choice = wizard.download_choice if isinstance(wizard, ProfileWizard) else None
        download = (
            f"\n\nDiscover will download {PurePosixPath(choice[1]).name} from {choice[0]}; "
            "load it from there when it is done."
            if choice
            else ""
        )
        busy = (
            " It was measured while other programs kept the machine busy: profile again "
            "from the menu when it is quiet."
            if profile is not None and _measured_busy(profile)
            else ""
        )
        self.summary.setText(
            f"{measured} of this machine is stored.{busy} ShardChat will chat with {model}."
            f"{download}\n\nYou can profile again from the menu when the hardware changes."
        )


def _measured_busy(profile: Profile) -> bool:
    return profile.machine_load is not None and profile.machine_load.verdict is not Quietness.QUIET


class ProfileWizard(QWizard):
    """welcome → hardware → profiling → results → model → done; Skip leaves no profile."""

    def __init__(
        self,
        hardware: HardwareInfo | None = None,
        mode: ProfileMode = ProfileMode.FAST,
        store_path: Path | None = None,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.setWindowTitle("Set up ShardChat")
        self.hardware = hardware or probe_hardware()
        self.budget_bytes = suggested_budget_bytes(self.hardware)
        self.setOption(QWizard.WizardOption.NoBackButtonOnStartPage)
        self.setOption(QWizard.WizardOption.NoCancelButtonOnLastPage)
        self.setButtonText(QWizard.WizardButton.CancelButton, "Skip")
        self.hardware_page = HardwarePage(self.hardware)
        self.profiling_page = ProfilingPage(mode, self.hardware, store_path)
        self.results_page = ResultsPage(self.profiling_page, self.budget_bytes)
        self.model_page = ModelPage()
        self.done_page = DonePage(self.profiling_page, self.model_page)
        with ProfileStore(store_path) as store:
            previous = this_machine_profile(self.hardware, store, any_build=True)
        self.welcome_page = WelcomePage(previous)
        pages = (
            self.welcome_page, self.hardware_page, self.profiling_page, self.results_page,
            self.model_page, self.done_page,
        )  # fmt: skip
        for page_id, page in enumerate(pages):
            self.setPage(page_id, page)
        self.setStartId(WELCOME_PAGE)
        self.download_choice: tuple[str, str] | None = None  # a suggested model to download
        self.model_page.suggestions.download_requested.connect(self._choose_download)
        self.currentIdChanged.connect(self._suggest_on_model_page)

    def _suggest_on_model_page(self, page_id: int) -> None:
        """Once a profile is measured, the model page suggests Hub models that fit it."""
        box = self.model_page.suggestions
        profile = self.profile()
        if page_id == MODEL_PAGE and profile is not None and box.isHidden():
            box.look_for(profile, self.budget_bytes)

    def _choose_download(self, repo_id: str, model_path: str) -> None:
        self.download_choice = (repo_id, model_path)

    def profile(self) -> Profile | None:
        """The profile measured and stored in this wizard, or None if skipped or cancelled."""
        return self.profiling_page.profile

    def chosen_model(self) -> str:
        return self.model_page.chosen_model()

    def done(self, result: int) -> None:
        """Finish, Skip, Esc or the window's close button: never leave a run behind."""
        self.profiling_page.stop_job()
        self.model_page.suggestions.shutdown()
        if result != QDialog.DialogCode.Accepted:
            self.download_choice = None  # skipped: nothing starts behind the person's back
        super().done(result)
