"""Start the desktop app: the window, the engine worker, the history, one event loop.

The Qt event loop is driven by qasync, so later panels can use asyncio
(timers, file work) on the GUI thread without blocking it.
"""

from __future__ import annotations

import asyncio
import sys

import qasync
from PySide6.QtWidgets import QApplication

from app.auto_budget import AutoBudget, first_gpu
from app.chat_store import ChatStore
from app.profile_store import ProfileStore
from app.worker import EngineWorker
from engine.hardware import probe_hardware
from engine.inventory import read_inventory
from engine.model_params import LoadParams
from engine.plan import Plan, PlanRequest
from engine.plan_execution import load_params_for
from engine.planner import make_plan
from engine.profile import Profile
from engine.sampling import SamplingSettings
from ui.chat_controller import ChatController
from ui.engine_bridge import EngineBridge
from ui.main_window import MainWindow


def planned_load(model_path: str, n_ctx: int) -> tuple[LoadParams, Plan | None, Profile | None]:
    """Under a plan when this machine is profiled (budget: what other programs leave)."""
    hardware = probe_hardware()
    with ProfileStore() as profiles:
        profile = profiles.latest(hardware.fingerprint(), hardware.llama_build)
    if profile is None:
        return LoadParams(model_path, n_ctx=n_ctx), None, None
    inventory = read_inventory(model_path)
    budget = 0
    if profile.gpu is not None:
        budget = AutoBudget(lambda _budget: None).budget_for(first_gpu())
        budget = min(budget, profile.gpu.vram_total_bytes)
    plan = make_plan(inventory, profile, PlanRequest(budget, n_ctx=n_ctx))
    return load_params_for(plan, inventory, model_path), plan, profile


def run_gui(model_path: str, n_ctx: int = 4096) -> int:
    """Open the window on `model_path` and run until it is closed; returns the exit code."""
    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setApplicationName("ShardChat")
    loop = qasync.QEventLoop(app)
    asyncio.set_event_loop(loop)
    bridge = EngineBridge()
    worker = EngineWorker(bridge).start()
    window = MainWindow()
    params, plan, profile = planned_load(model_path, n_ctx)
    with ChatStore() as store:
        controller = ChatController(
            window, worker, bridge, store, params, SamplingSettings(), plan, profile
        )
        if store.recovered_from is not None:
            window.statusBar().showMessage(
                f"the chat history was unreadable and was moved to {store.recovered_from}", 15000
            )
        controller.start()
        window.show()
        closed = asyncio.Event()
        app.aboutToQuit.connect(closed.set)
        try:
            with loop:
                loop.run_until_complete(closed.wait())
        finally:
            worker.shutdown()
    return 0
