"""The side panel's tabs read whole: every tab shows its whole name at the window's default
size, in the light theme and the dark, and the full names are where there is room for them.

What a tab shows is measured as QTabBar draws it: the tab's width less the style's
padding (PM_TabBarTabHSpace) is the room for the text, which Qt elides when the text's
advance in the tab bar's own font is wider. The fonts are the ones Qt really has here
(fontconfig's, through the offscreen platform), checked to be a real proportional face:
DejaVu Sans 9 pt, the same as under Xvfb. On the six long titles of before, this reads
['Conv…', 'V…', 'Summarise …', 'API', 'S…', 'Jo…'], what the issue saw on the screen.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import QEvent, QPoint, QRect, QSize, Qt
from PySide6.QtGui import (
    QFontDatabase,
    QFontInfo,
    QFontMetrics,
    QGuiApplication,
    QHelpEvent,
    QPalette,
)
from PySide6.QtWidgets import QApplication, QStyle, QTabBar, QToolTip

from ui.theme import DARK, ThemeManager
from ui.window.main_window import MainWindow

DEFAULT_SIZE = QSize(1280, 760)  # MainWindow's own; the issue saw it under Xvfb at 1440x900
FULL_NAMES = {  # each tab's word, and the name the View menu, a floated panel and the tooltip say
    "Settings": "Conversation settings",
    "VRAM": "VRAM budget",
    "Summarise": "Summarise a folder",
    "API": "Local API server",
    "Share": "Share this computer",
    "Jobs": "Folder summary jobs",
}


@pytest.fixture
def app(qapp: QApplication):
    """The application, put back as it was: a theme restyles it process-wide."""
    style, sheet = qapp.style().name() or "fusion", qapp.styleSheet()
    yield qapp
    qapp.setStyleSheet(sheet)
    qapp.setPalette(QPalette())
    qapp.setStyle(style)
    QGuiApplication.styleHints().unsetColorScheme()


def dress(app: QApplication, scheme: Qt.ColorScheme) -> None:
    """The app in the light or dark theme, as run_gui dresses it when the system asks."""
    ThemeManager(system_scheme=lambda: scheme).apply(app)


def side_tab_bar(window: MainWindow) -> QTabBar:
    """The tab bar QMainWindow made for the tabbed side docks (it makes and hides others)."""
    titles = sorted(dock.windowTitle() for dock in window.side_docks)
    bars = [
        bar
        for bar in window.findChildren(QTabBar)
        if bar.isVisible() and sorted(bar.tabText(i) for i in range(bar.count())) == titles
    ]
    assert len(bars) == 1, f"one visible tab bar holds the side docks {titles}"
    return bars[0]


def shown_text(bar: QTabBar, index: int) -> str:
    """What the tab draws: its text elided to the room the style leaves it."""
    padding = bar.style().pixelMetric(QStyle.PixelMetric.PM_TabBarTabHSpace, None, bar)
    room = bar.tabRect(index).width() - padding
    metrics = QFontMetrics(bar.font())
    text = bar.tabText(index)
    if metrics.horizontalAdvance(text) <= room:
        return text
    return metrics.elidedText(text, Qt.TextElideMode.ElideRight, room)


def assert_every_tab_reads_whole(window: MainWindow) -> None:
    bar = side_tab_bar(window)
    font = QFontInfo(bar.font())
    metrics = QFontMetrics(bar.font())
    assert font.family() in QFontDatabase.families(), f"{font.family()} is a font Qt has here"
    assert font.pixelSize() >= 11  # a desktop's text size, not a tiny fallback
    assert metrics.horizontalAdvance("WWWW") > 2 * metrics.horizontalAdvance("iiii")  # real glyphs
    in_window = QRect(bar.mapTo(window, QPoint(0, 0)), bar.size())
    assert window.rect().contains(in_window), "the tab bar lies inside the window"
    shown = [shown_text(bar, i) for i in range(bar.count())]
    assert shown == [bar.tabText(i) for i in range(bar.count())], f"the tabs read {shown}"
    for index in range(bar.count()):  # none scrolled out of the bar's visible width
        assert bar.rect().contains(bar.tabRect(index)), f"{bar.tabText(index)} is out of view"


def test_every_tab_shows_its_whole_name_at_the_default_size_in_both_themes(
    qtbot, app, desktops, default_model_file: Path, open_desktop
) -> None:
    dress(app, Qt.ColorScheme.Light)
    desktop = open_desktop(default_model_file)
    desktops.append(desktop)
    window = desktop.window
    qtbot.waitExposed(window)
    assert window.size() == DEFAULT_SIZE
    assert window.width() <= 1440 and window.height() <= 900
    assert_every_tab_reads_whole(window)

    dress(app, Qt.ColorScheme.Dark)  # what a system gone dark does, live
    assert app.palette().color(QPalette.ColorRole.Window).name() == DARK.window
    assert_every_tab_reads_whole(window)


def test_the_panel_cannot_be_narrowed_until_its_tabs_elide(qtbot) -> None:
    window = MainWindow()
    qtbot.addWidget(window)
    window.show()
    qtbot.waitExposed(window)
    dock = window.settings_dock
    window.resizeDocks([dock], [500], Qt.Orientation.Horizontal)  # the person widens it,
    qtbot.waitUntil(lambda: dock.width() == 500)
    window.resizeDocks([dock], [200], Qt.Orientation.Horizontal)  # then narrows it all they can
    qtbot.waitUntil(lambda: dock.width() < 500)
    assert_every_tab_reads_whole(window)


def test_the_full_names_are_in_the_view_menu_a_floated_panel_and_the_tooltips(qtbot) -> None:
    window = MainWindow()
    qtbot.addWidget(window)
    window.show()
    qtbot.waitExposed(window)
    words = [dock.windowTitle() for dock in window.side_docks]
    assert sorted(words) == sorted(FULL_NAMES)
    shown_in_view_menu = [a.text().replace("&", "") for a in window.view_menu.actions()]
    for word in words:
        assert FULL_NAMES[word] in shown_in_view_menu
    bar = side_tab_bar(window)
    for index in range(bar.count()):
        middle = bar.tabRect(index).center()
        QApplication.sendEvent(
            bar, QHelpEvent(QEvent.Type.ToolTip, middle, bar.mapToGlobal(middle))
        )
        assert QToolTip.text() == FULL_NAMES[bar.tabText(index)]
    QToolTip.hideText()
    dock = window.batch_dock
    dock.setFloating(True)
    assert dock.windowTitle() == "Summarise a folder"
    assert dock.toggleViewAction().text().replace("&", "") == "Summarise a folder"
    dock.setFloating(False)
    assert dock.windowTitle() == "Summarise"
    assert dock.toggleViewAction().text().replace("&", "") == "Summarise a folder"
