"""The whole desktop app as one object: window, engine worker, history, controllers.

`run_gui` shows it under an event loop; tests, screenshots and the latency
benchmark build the same object, so what they check is what people run.
"""

from __future__ import annotations

import gc
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QIcon

from app.engine_host.early_engine import EarlyEngine
from app.engine_host.engine_router import EngineRouter
from app.model_lifecycle.load_planning import LoadRequest, stored_profile
from app.screen_text.model_choices import picker_entries
from app.screen_text.server_view import ServerView, status_text
from app.start_up_gc import collect_again
from app.stores.chat_store import ChatStore
from app.stores.model_library import ModelLibrary
from engine.errors import BadInputError
from engine.generation.sampling import SamplingSettings
from engine.machine.profile import Profile
from engine.model.default_model import default_model_path
from ui.chat.chat_controller import ChatController
from ui.conversation.image_attachments import load_image_file
from ui.conversation.message_html import warm_up
from ui.engine_bridge import EngineBridge
from ui.lent.lent_computers_controller import LentComputersController
from ui.model_drop import GgufDropFilter
from ui.server.server_controller import ServerController
from ui.server.sharing_controller import SharingController
from ui.summaries.batch_controller import BatchController
from ui.theme import DARK, LIGHT, ThemeManager, theme_menu
from ui.vram.vram_controller import GpuReader, VramController, read_first_gpu
from ui.window.main_window import MainWindow
from ui.window_state import WindowState

if TYPE_CHECKING:  # the Hub's client comes with them: imported when first opened
    from ui.models.discover_page import DiscoverJobs
    from ui.models.model_manager import ModelManager
    from ui.profiling.profile_wizard import ProfileWizard

ICON = Path(__file__).resolve().parent.parent / "assets" / "shardchat.svg"
STATUS_MS = 6000


class Desktop:
    def __init__(
        self,
        model_path: str,
        profile: Profile | None,
        n_ctx: int = 4096,
        settings: SamplingSettings | None = None,
        read_gpu: GpuReader = read_first_gpu,
        theme: ThemeManager | None = None,
        early: EarlyEngine | None = None,
    ) -> None:
        """`theme` is the app's (run_gui applies it); without one the window follows a
        manager of its own that restyles nothing but the conversation. `early`: the engine,
        already loading the model (app.engine_host.early_engine), taken over instead of
        starting one."""
        self.bridge = EngineBridge()
        self._early = early
        self.worker = early.engine if early is not None else EngineRouter(self.bridge).start()
        self.window = MainWindow()
        self.window.setWindowIcon(QIcon(str(ICON)))
        self.models = ModelLibrary()
        self.model_drop = GgufDropFilter(self.window)
        self.model_drop.watch(self.window.chat_view)  # else the view takes file drops itself
        self.store = ChatStore()
        self.state = WindowState()
        load = early.load if early is not None else self._load_request(model_path, n_ctx, profile)
        self.chat = ChatController(
            self.window, self.worker, self.bridge, self.store, load, settings or SamplingSettings()
        )
        self.vram = VramController(self.window.vram_panel, self.worker, self.bridge, None, read_gpu)
        self.batch = BatchController(self.window.batch_panel, self.worker, self.bridge)
        # the local API server: off unless switched on; it serves the model loaded here
        self.server = ServerController(self.window.server_panel, self.worker, self.bridge)
        # lending this computer to others (llama.cpp's RPC server): off unless switched on
        self.sharing = SharingController(self.window.sharing_panel)
        self.lent_computers = LentComputersController(self.window.vram_panel.lent_computers)
        # the Discover tab's searches and downloads (self.discover): made when first needed
        self._discover: DiscoverJobs | None = None
        self._discover_inputs: tuple[Profile | None, int | None, int] = (profile, None, n_ctx)
        self.theme = theme or ThemeManager(parent=self.window)
        self.window.view_menu.addSeparator()
        self.window.view_menu.addMenu(theme_menu(self.theme, self.window))
        self.window.chat_view.use_theme(self.theme.current())
        self._connect()

    def _connect(self) -> None:
        self.vram.plan_applied.connect(self.chat.use_plan)
        self.chat.plan_used.connect(self.vram.use_plan)
        self.vram.message.connect(self._say)
        self.batch.message.connect(self._say)
        self.server.view_changed.connect(self._show_server)
        self.window.server_panel.copied.connect(lambda url: self._say(f"copied {url}"))
        self.window.profile_action.triggered.connect(self.profile_again)
        self.window.models_action.triggered.connect(self.open_models)
        self.window.discover_action.triggered.connect(self.open_discover)
        for job_moved in (self.bridge.job_progressed, self.bridge.job_finished):
            job_moved.connect(lambda _event: self.window.jobs_view.refresh())
        self.vram.plan_applied.connect(lambda plan: self._discover_budget(plan.vram.budget_bytes))
        self.window.import_model_action.triggered.connect(
            lambda: self.open_models().choose_and_import()
        )
        self.model_drop.files_dropped.connect(self.take_dropped_files)
        self.theme.theme_changed.connect(self.window.chat_view.use_theme)
        picker = self.window.model_picker
        picker.model_chosen.connect(self.chat.load_model)
        picker.manage_requested.connect(self.open_models)
        self.bridge.model_loaded.connect(lambda event: self.show_models(event.model_path))
        self.bridge.model_loaded.connect(
            lambda event: self.lent_computers.use_model(
                event.model_path, event.model_name, event.n_ctx, event.split
            )
        )
        self.lent_computers.across_changed.connect(self.run_across)
        self.bridge.model_loaded.connect(lambda _event: freeze_long_lived_objects())
        self.bridge.model_loaded.connect(self._warm_up_once)
        self.bridge.request_failed.connect(lambda _event: self.show_models(None))

    def run_across(self, on: bool) -> None:
        """Load the model again, split across the lent computers (in a process of its own)
        or back on this computer alone; the chat carries over."""
        self.worker.use_lent_computers(on)
        self.chat.reload_model()

    def show_models(self, loaded: str | None) -> None:
        """The model picker lists the model list's models (the loaded one, or the one
        still loaded after a failed switch, selected)."""
        current = loaded if loaded is not None else self.chat.model_path()
        entries = picker_entries(self.models, str(default_model_path()))
        self.window.model_picker.show_entries(entries, current)

    def take_dropped_files(self, paths: list[Path]) -> None:
        """Dropped on the window: models go to the model manager, a folder to the batch panel,
        images to the input."""
        if len(paths) == 1 and paths[0].is_dir():
            self.window.batch_action.trigger()
            self.window.batch_panel.paths_dropped.emit(paths)
            return
        if any(path.suffix.lower() == ".gguf" for path in paths):
            self.open_models().import_files(paths)  # it refuses what is not a model, with why
            return
        try:
            images = [load_image_file(path) for path in paths]
        except BadInputError as exc:
            self.window.input.show_refusal(f"{exc} — drop GGUF models or images here")
            return
        self.window.input.add_attachments(images)

    @property
    def discover(self) -> DiscoverJobs:
        """The Discover tab's searches and downloads, kept here so downloads outlive the
        dialog; made when first needed, so the window opens without the Hub's client."""
        if self._discover is None:
            from app.hub.discover_model import DiscoverModel
            from ui.models.discover_page import DiscoverJobs

            model = DiscoverModel(*self._discover_inputs)
            self._discover = DiscoverJobs(model, parent=self.window)
            self._discover.imported.connect(lambda _path: self.show_models(None))  # the picker
        return self._discover

    def _discover_budget(self, budget_bytes: int) -> None:
        if self._discover is None:
            profile, _budget, n_ctx = self._discover_inputs
            self._discover_inputs = (profile, budget_bytes, n_ctx)
        else:
            self._discover.set_budget(budget_bytes)

    def open_models(self) -> ModelManager:
        """Tools → Models: the model manager beside the chat; "Load now" switches models.
        Its Discover tab predicts with the profile, budget and context loads use now."""
        from ui.models.model_manager import ModelManager  # with Discover's: when first opened

        self.discover.use_machine(*self.chat.planning_inputs())
        manager = ModelManager(self.models, parent=self.window, discover=self.discover)
        manager.set_loaded(*self.chat.loaded_model())  # "Load now" is off for that one
        manager.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        manager.load_requested.connect(self.chat.load_model)
        manager.prompt_format_changed.connect(self.chat.use_prompt_format)
        manager.finished.connect(lambda _result: self.show_models(None))  # new imports show
        manager.open()
        return manager

    def open_discover(self) -> ModelManager:
        """Tools → Discover models: the model manager open on its Discover tab."""
        manager = self.open_models()
        manager.show_discover()
        return manager

    def download_suggested(self, repo_id: str, model_path: str) -> ModelManager:
        """The wizard's suggested model: Discover opens on it and its download starts."""
        manager = self.open_discover()
        self.discover.download_listed(repo_id, model_path)
        return manager

    def profile_again(self) -> ProfileWizard:
        """Tools → Profile this machine: the wizard, beside the chat; its result re-plans."""
        from ui.profiling.profile_wizard import ProfileWizard  # its pages: when first opened

        wizard = ProfileWizard(parent=self.window)
        wizard.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        wizard.accepted.connect(lambda: self._use_profile(wizard))
        wizard.open()
        return wizard

    def _use_profile(self, wizard: ProfileWizard) -> None:
        profile = wizard.profile() or stored_profile()
        chosen = wizard.chosen_model()
        if chosen:
            chosen = remember_default_model(chosen)
        if profile is not None:
            self.chat.use_profile(profile, chosen or None, self._projector_of(chosen or ""))
        if wizard.download_choice is not None:
            self.download_suggested(*wizard.download_choice)

    def start(self) -> Desktop:
        """Restore the window and the last conversation, start loading the model (or take
        the load started early), show."""
        conversation = self.state.restore(self.window)
        early = self._early
        self.chat.start(conversation, loading=None if early is None else early.request_id)
        if early is not None:  # what the engine said meanwhile comes as from the loop
            QTimer.singleShot(0, lambda: early.events.pass_to(self.bridge))
        self.show_models(None)
        if self.store.recovered_from is not None:
            self._say(
                f"the chat history was unreadable and was moved to {self.store.recovered_from}"
            )
        self.window.show()
        freeze_long_lived_objects()
        return self

    def _warm_up_once(self, _event: object) -> None:
        """After the first load (not during it: the load and the window's first paint
        would share the CPU with it), compile the code colouring on a thread."""
        self.bridge.model_loaded.disconnect(self._warm_up_once)
        styles = (LIGHT.pygments_style, DARK.pygments_style)
        threading.Thread(target=warm_up, args=(styles,), name="warm-up", daemon=True).start()

    def close(self) -> None:
        """Stop lending, remember the window, stop the engine, close the history (idempotent)."""
        self.sharing.shutdown()  # nothing stays lent after the app
        self.lent_computers.shutdown()
        if self.worker.is_running:
            self.state.save(self.window, self.chat.conversation_id)
            self.chat.shutdown()  # a reply in progress is kept as far as it got
            if self._discover is not None:
                self._discover.shutdown()  # downloads pause; they resume from their .part files
            self.vram.shutdown()
            self.server.shutdown()  # its streams end before the worker that runs them
            self.worker.shutdown()
            self.store.close()
            self.models.close()

    def _load_request(self, model_path: str, n_ctx: int, profile: Profile | None) -> LoadRequest:
        """The first load, planned on the worker."""
        return LoadRequest(model_path, n_ctx, profile, mmproj_path=self._projector_of(model_path))

    def _projector_of(self, model_path: str) -> str | None:
        """The vision projector paired with this model in the model list, if its file exists."""
        projector = self.models.projector_of(model_path) if model_path else None
        return None if projector is None else str(projector)

    def _show_server(self, view: ServerView) -> None:
        """The status bar's API label; while it serves, the VRAM panel predicts its slots."""
        self.window.api_label.setText(status_text(view))
        self.vram.use_api_slots(view.serving_slots)

    def _say(self, message: str) -> None:
        self.window.statusBar().showMessage(message, STATUS_MS)


GC_THRESHOLDS = (50_000, 20, 100)  # Python's are (700, 10, 10): collections far rarer


def freeze_long_lived_objects() -> None:
    """Move what exists now (the window, the model's inventory and vocabulary facts) out of
    the cyclic collector's reach, and collect less often: a full collection walks every
    tracked object with the GIL held, whichever thread starts it, and took 23-52 ms of the
    GUI thread mid-scroll (bench/gui_latency.py). Reference counting frees all but cycles."""
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
    collect_again()  # `shardchat gui` held the collector off until the window was shown


def remember_default_model(model_path: str) -> str:
    """The wizard's choice joins the model list as the default, as an import there would."""
    with ModelLibrary() as models:
        return str(models.set_default(models.add(model_path).path).path)
