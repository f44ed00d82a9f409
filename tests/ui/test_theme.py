"""Light and dark themes: the choice, the system's scheme through the seam, and what Qt draws.

Qt's offscreen platform has no system colour scheme, so the manager reads it through
its `system_scheme` seam; the change itself arrives as Qt's own colorSchemeChanged
signal, emitted here on the application's real style hints. Settings live in the
test's SHARDCHAT_HOME (tests/conftest.py), never the person's own.
"""

from __future__ import annotations

import pytest
from pygments.styles import get_style_by_name
from PySide6.QtCore import QSettings, Qt, QtMsgType
from PySide6.QtGui import QColor, QGuiApplication, QPalette
from PySide6.QtWidgets import (
    QApplication,
    QCheckBox,
    QDockWidget,
    QLabel,
    QLineEdit,
    QListWidget,
    QMainWindow,
    QPushButton,
    QSlider,
    QSplitter,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from app.paths import app_paths
from ui.theme import (
    CHOICE_LABELS,
    DARK,
    LIGHT,
    SETTINGS_KEY,
    Theme,
    ThemeChoice,
    ThemeManager,
    error_style,
    resolve,
    theme_menu,
)
from ui.window_state import FILE_NAME

WINDOW, TEXT = QPalette.ColorRole.Window, QPalette.ColorRole.Text


class SystemScheme:
    """What the system shows, set by the test; the manager reads it through its seam."""

    def __init__(self, scheme: Qt.ColorScheme) -> None:
        self.scheme = scheme

    def __call__(self) -> Qt.ColorScheme:
        return self.scheme

    def change_to(self, scheme: Qt.ColorScheme) -> None:
        """As the system would: the scheme changes, then Qt says so."""
        self.scheme = scheme
        QGuiApplication.styleHints().colorSchemeChanged.emit(scheme)


@pytest.fixture
def app(qapp: QApplication):
    """The application, put back as it was: the manager restyles it process-wide."""
    style, sheet = qapp.style().name() or "fusion", qapp.styleSheet()
    yield qapp
    qapp.setStyleSheet(sheet)
    qapp.setPalette(QPalette())
    qapp.setStyle(style)
    QGuiApplication.styleHints().unsetColorScheme()


def shown(app: QApplication) -> tuple[str, str]:
    palette = app.palette()
    return palette.color(WINDOW).name(), palette.color(TEXT).name()


def contrast(foreground: str, background: str) -> float:
    """WCAG's contrast ratio of two colours (1 to 21)."""

    def luminance(name: str) -> float:
        colour = QColor(name)
        channels = [colour.redF(), colour.greenF(), colour.blueF()]
        linear = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
        return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]

    high, low = sorted((luminance(foreground), luminance(background)), reverse=True)
    return (high + 0.05) / (low + 0.05)


def test_resolve_follows_the_system_only_when_asked() -> None:
    assert resolve(ThemeChoice.SYSTEM, system_is_dark=True) is DARK
    assert resolve(ThemeChoice.SYSTEM, system_is_dark=False) is LIGHT
    for system_is_dark in (True, False):
        assert resolve(ThemeChoice.LIGHT, system_is_dark) is LIGHT
        assert resolve(ThemeChoice.DARK, system_is_dark) is DARK


@pytest.mark.parametrize("theme", [LIGHT, DARK], ids=lambda theme: theme.name)
def test_each_theme_reads_well_and_names_an_installed_pygments_style(theme: Theme) -> None:
    """Body text at WCAG AAA (7:1), secondary text, links, errors and text on the accent
    at AA (4.5:1), on every background they are drawn on."""
    for background in (theme.window, theme.surface, theme.surface_alt):
        assert contrast(theme.text, background) >= 7
    for foreground in (theme.muted_text, theme.link, theme.danger):
        assert contrast(foreground, theme.window) >= 4.5
        assert contrast(foreground, theme.surface) >= 4.5
    assert contrast(theme.accent_text, theme.accent) >= 4.5
    assert contrast(theme.code_text, theme.code_background) >= 7
    assert get_style_by_name(theme.pygments_style).background_color
    assert (contrast(theme.window, "#000000") < contrast(theme.window, "#ffffff")) is theme.is_dark


def test_following_the_system_dresses_the_app_in_its_scheme_and_follows_changes(
    app: QApplication, qtbot
) -> None:
    system = SystemScheme(Qt.ColorScheme.Dark)
    manager = ThemeManager(system_scheme=system)
    assert manager.choice() is ThemeChoice.SYSTEM and manager.current() is DARK

    manager.apply(app)
    assert shown(app) == (DARK.window, DARK.text)
    assert "QPushButton" in app.styleSheet() and DARK.accent in app.styleSheet()
    disabled = app.palette().color(QPalette.ColorGroup.Disabled, TEXT).name()
    assert disabled not in (DARK.text, DARK.window)

    with qtbot.waitSignal(manager.theme_changed, timeout=1000) as changed:
        system.change_to(Qt.ColorScheme.Light)
    assert changed.args == [LIGHT] and manager.current() is LIGHT
    assert shown(app) == (LIGHT.window, LIGHT.text)

    with qtbot.assertNotEmitted(manager.theme_changed):
        system.change_to(Qt.ColorScheme.Light)  # told again, nothing changed
        system.change_to(Qt.ColorScheme.Unknown)  # a system that cannot say reads as light
    with qtbot.waitSignal(manager.theme_changed, timeout=1000) as changed:
        system.change_to(Qt.ColorScheme.Dark)
    assert changed.args == [DARK] and shown(app) == (DARK.window, DARK.text)


def test_an_explicit_choice_ignores_the_system(app: QApplication, qtbot) -> None:
    system = SystemScheme(Qt.ColorScheme.Dark)
    manager = ThemeManager(system_scheme=system)
    manager.apply(app)
    with qtbot.waitSignals([manager.choice_changed, manager.theme_changed], timeout=1000):
        manager.set_choice(ThemeChoice.LIGHT)
    assert shown(app) == (LIGHT.window, LIGHT.text)

    with qtbot.assertNotEmitted(manager.theme_changed):
        system.change_to(Qt.ColorScheme.Light)
        system.change_to(Qt.ColorScheme.Dark)
    assert manager.current() is LIGHT and shown(app) == (LIGHT.window, LIGHT.text)

    with qtbot.waitSignal(manager.theme_changed, timeout=1000) as changed:
        manager.set_choice(ThemeChoice.SYSTEM)  # back to following: the system is dark now
    assert changed.args == [DARK] and shown(app) == (DARK.window, DARK.text)
    with qtbot.assertNotEmitted(manager.theme_changed):
        manager.set_choice(ThemeChoice.DARK)  # same look, another choice


def test_the_choice_is_kept_with_the_window_settings(app: QApplication) -> None:
    light_system = SystemScheme(Qt.ColorScheme.Light)
    ThemeManager(system_scheme=light_system).set_choice(ThemeChoice.DARK)

    again = ThemeManager(system_scheme=light_system)
    assert again.choice() is ThemeChoice.DARK and again.current() is DARK
    stored = QSettings(str(app_paths().data_dir / FILE_NAME), QSettings.Format.IniFormat)
    assert stored.value(SETTINGS_KEY) == "dark"


def test_an_unknown_stored_theme_follows_the_system_with_a_warning(
    app: QApplication, caplog
) -> None:
    settings = QSettings(str(app_paths().ensure().data_dir / FILE_NAME), QSettings.Format.IniFormat)
    settings.setValue(SETTINGS_KEY, "purple")
    settings.sync()
    manager = ThemeManager(settings, system_scheme=SystemScheme(Qt.ColorScheme.Dark))
    assert manager.choice() is ThemeChoice.SYSTEM and manager.current() is DARK
    assert "unknown theme 'purple'" in caplog.text


def test_the_menu_shows_the_choice_and_changes_it(app: QApplication, qtbot) -> None:
    window = QMainWindow()
    qtbot.addWidget(window)
    manager = ThemeManager(system_scheme=SystemScheme(Qt.ColorScheme.Light))
    manager.apply(app)
    menu = theme_menu(manager, window)
    actions = {action.text(): action for action in menu.actions()}
    assert list(actions) == list(CHOICE_LABELS.values()) == ["Follow system", "Light", "Dark"]

    def checked() -> list[str]:
        return [text for text, action in actions.items() if action.isChecked()]

    assert checked() == ["Follow system"]
    with qtbot.waitSignal(manager.theme_changed, timeout=1000):
        actions["Dark"].trigger()
    assert checked() == ["Dark"] and manager.choice() is ThemeChoice.DARK
    assert shown(app) == (DARK.window, DARK.text)

    manager.set_choice(ThemeChoice.LIGHT)  # changed elsewhere: the menu follows
    assert checked() == ["Light"]
    actions["Follow system"].trigger()
    assert checked() == ["Follow system"] and manager.choice() is ThemeChoice.SYSTEM


def sample_window() -> QMainWindow:
    """One of every widget the stylesheet dresses, as the main window holds them."""
    window = QMainWindow()
    side = QWidget()
    column = QVBoxLayout(side)
    conversations = QListWidget()
    conversations.addItems(["First chat", "Second chat"])
    conversations.setCurrentRow(0)
    default = QPushButton("Send")
    default.setDefault(True)
    ticked = QCheckBox("Auto")
    ticked.setChecked(True)
    chat = QTextBrowser()
    chat.setMarkdown("**You**\n\nhello\n\n```python\nprint('hi')\n```\n" + "\n\nmore" * 60)
    for widget in (conversations, QLineEdit(placeholderText="Search"), default, ticked):
        column.addWidget(widget)
    column.addWidget(QSlider(Qt.Orientation.Horizontal))
    splitter = QSplitter()
    splitter.addWidget(side)
    splitter.addWidget(chat)
    window.setCentralWidget(splitter)
    dock = QDockWidget("VRAM", window)
    dock.setWidget(QLabel("budget"))
    window.addDockWidget(Qt.DockWidgetArea.RightDockWidgetArea, dock)
    window.statusBar().showMessage("ready")
    window.resize(640, 360)
    return window


def qt_complaints(qtlog) -> list[str]:
    """What Qt warned about (a stylesheet it could not parse, a tick image it could not
    open), less the offscreen platform's notes on what it cannot do."""
    return [
        record.message
        for record in qtlog.records
        if record.type != QtMsgType.QtDebugMsg
        and "This plugin does not support" not in record.message
    ]


@pytest.mark.parametrize("choice", [ThemeChoice.LIGHT, ThemeChoice.DARK])
def test_the_stylesheet_parses_and_the_widgets_wear_the_theme(
    app: QApplication, qtbot, qtlog, choice: ThemeChoice
) -> None:
    manager = ThemeManager(system_scheme=SystemScheme(Qt.ColorScheme.Unknown))
    manager.set_choice(choice)
    manager.apply(app)
    theme = manager.current()
    window = sample_window()
    qtbot.addWidget(window)
    window.show()
    qtbot.waitExposed(window)
    picture = window.grab().toImage()
    assert qt_complaints(qtlog) == []
    corner = picture.pixelColor(window.width() // 2, window.height() - 4)  # the status bar
    assert corner.name() == theme.window
    assert picture.size().width() > 0

    app.setStyleSheet("QPushButton { color: ; border: {")  # the check above can fail
    window.grab()
    assert any("Could not parse" in message for message in qt_complaints(qtlog))


def test_an_error_line_reads_on_either_background(app: QApplication) -> None:
    for choice, theme in ((ThemeChoice.DARK, DARK), (ThemeChoice.LIGHT, LIGHT)):
        manager = ThemeManager(system_scheme=SystemScheme(Qt.ColorScheme.Unknown))
        manager.set_choice(choice)
        manager.apply(app)
        assert error_style(QLabel("the model file is unreadable")) == f"color: {theme.danger};"
