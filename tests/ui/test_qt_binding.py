"""The Qt binding we ship does not lose references: PySide6 6.12.0 dropped one to None per
processEvents() and QEventLoop.exec(), which crashed the app ("deallocating None") after a
few thousand event loop turns on Python 3.11, e.g. while a model loaded on the worker."""

from __future__ import annotations

import sys

from PySide6.QtCore import QCoreApplication, QEventLoop, QTimer


def test_running_the_event_loop_keeps_the_reference_count_of_none(qapp) -> None:
    before = sys.getrefcount(None)
    for _ in range(300):
        QCoreApplication.processEvents()
    for _ in range(50):
        loop = QEventLoop()
        QTimer.singleShot(0, loop.quit)
        loop.exec()
    assert abs(sys.getrefcount(None) - before) < 100  # 6.12.0 loses 350
