"""The side panel's tabs: one short word each, and the full name wherever there is room.

Six docks share the right-hand panel as tabs of one bar, and Qt writes a dock's window
title on its tab. Titles long enough to say everything ("Summarise a folder",
"Conversation") left no tab its whole name at the window's default size ("Conv…",
"V…", "S…"), so each tab says one word, the panel is never narrower than the tab bar
needs, and the full name goes where it fits: the View menu, the title bar of a panel
pulled out into its own window, and the tab's tooltip.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from PySide6.QtCore import QEvent, QObject
from PySide6.QtGui import QHelpEvent
from PySide6.QtWidgets import QDockWidget, QTabBar, QToolTip, QWidget


@dataclass(frozen=True)
class SideTab:
    tab: str  # on the tab: one word
    full: str  # in the View menu (with its & key), floated, and as the tab's tooltip

    @property
    def full_title(self) -> str:
        return self.full.replace("&", "")


SETTINGS = SideTab("Settings", "Conversation &settings")
VRAM = SideTab("VRAM", "&VRAM budget")
SUMMARISE = SideTab("Summarise", "Summarise a &folder")
API = SideTab("API", "Local &API server")
SHARE = SideTab("Share", "S&hare this computer")
JOBS = SideTab("Jobs", "Folder summary &jobs")
ALL = (SETTINGS, VRAM, SUMMARISE, API, SHARE, JOBS)


def side_dock(tab: SideTab, parent: QWidget) -> QDockWidget:
    """A dock titled with its tab's word while docked and its full name while floating."""
    dock = QDockWidget(tab.tab, parent)
    dock.toggleViewAction().setText(tab.full)
    dock.topLevelChanged.connect(lambda floating: _retitle(dock, tab, floating))
    return dock


def _retitle(dock: QDockWidget, tab: SideTab, floating: bool) -> None:
    dock.setWindowTitle(tab.full_title if floating else tab.tab)
    dock.toggleViewAction().setText(tab.full)  # Qt writes the new title there too


def tab_bar_width(words: Iterable[str]) -> int:
    """How wide a tab bar holding these words must be to show each whole, in the style and
    font the application draws tabs with now."""
    bar = QTabBar()
    for word in words:
        bar.addTab(word)
    return bar.sizeHint().width()


class FullNameTips(QObject):
    """Shows a tab's full name as its tooltip (Qt's own tooltip repeats the tab's word).

    Watches every tab bar the window makes: Qt makes them as docks are tabbed together,
    again after a floated panel comes back, so the window hands each new one over."""

    def __init__(self, tabs: Iterable[SideTab], parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._full = {tab.tab: tab.full_title for tab in tabs}

    def watch(self, bar: QTabBar) -> None:
        bar.removeEventFilter(self)
        bar.installEventFilter(self)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt's name
        if event.type() != QEvent.Type.ToolTip or not isinstance(watched, QTabBar):
            return False
        assert isinstance(event, QHelpEvent)
        full = self._full.get(watched.tabText(watched.tabAt(event.pos())))
        if full is None:
            return False
        QToolTip.showText(event.globalPos(), full, watched)
        return True
