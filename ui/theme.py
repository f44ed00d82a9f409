"""Light and dark looks, chosen by the person or following the system's colour scheme.

A `Theme` is a handful of named colours; `ThemeManager` turns the chosen one into
what Qt draws with (the Fusion style, a full palette, a small stylesheet) and
says when the look changes, so views that draw their own colours (the chat's
code blocks) render again. The choice (follow the system, light, dark) is kept
with the window's other settings. Which scheme the system shows is read through
a seam (`system_scheme`), because Qt's offscreen platform has no system scheme
for tests to change.
"""

from __future__ import annotations

import enum
import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import QObject, QSettings, Qt, QTemporaryDir, Signal
from PySide6.QtGui import QAction, QActionGroup, QColor, QGuiApplication, QPalette
from PySide6.QtWidgets import QApplication, QMenu, QWidget

from app.paths import app_paths
from ui.window_state import FILE_NAME

log = logging.getLogger(__name__)

SETTINGS_KEY = "appearance/theme"
STYLE_NAME = "Fusion"  # the same widgets on every platform, and it honours the palette fully
SchemeReader = Callable[[], Qt.ColorScheme]
CHECK_SVG = (  # a tick for checked boxes: a styled indicator loses the style's own
    "<svg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 16 16'><path d='M3.5 8.5l3 3 6-7'"
    " fill='none' stroke='{colour}' stroke-width='2' stroke-linecap='round'"
    " stroke-linejoin='round'/></svg>"
)


@dataclass(frozen=True)
class Theme:
    """Colours as #rrggbb names, so they go into palettes, stylesheets and HTML alike."""

    name: str
    window: str  # behind everything
    surface: str  # cards, inputs, the conversation
    surface_alt: str  # the person's own messages
    text: str
    muted_text: str  # secondary lines, placeholders
    accent: str  # selection, the default button, focus rings
    accent_text: str  # text drawn on the accent
    border: str
    code_background: str
    code_text: str
    link: str
    danger: str  # errors, as text on `window` or `surface`
    pygments_style: str  # a Pygments style whose tokens read on `code_background`
    is_dark: bool


LIGHT = Theme(
    name="light",
    window="#f4f4f5",
    surface="#ffffff",
    surface_alt="#eef2ff",
    text="#18181b",
    muted_text="#63636e",
    accent="#4f46e5",
    accent_text="#ffffff",
    border="#d9d9de",
    code_background="#f6f8fa",
    code_text="#1f2328",
    link="#4338ca",
    danger="#b00020",
    pygments_style="default",
    is_dark=False,
)

DARK = Theme(
    name="dark",
    window="#18181b",
    surface="#202024",
    surface_alt="#2b2d42",
    text="#e4e4e7",
    muted_text="#a1a1aa",
    accent="#5b5fef",
    accent_text="#ffffff",
    border="#34343a",
    code_background="#0d1117",
    code_text="#e6edf3",
    link="#a5b4fc",
    danger="#f87171",
    pygments_style="github-dark",
    is_dark=True,
)


class ThemeChoice(enum.Enum):
    SYSTEM = "system"
    LIGHT = "light"
    DARK = "dark"


CHOICE_LABELS = {  # what the View → Theme menu says, in its order
    ThemeChoice.SYSTEM: "Follow system",
    ThemeChoice.LIGHT: "Light",
    ThemeChoice.DARK: "Dark",
}


def resolve(choice: ThemeChoice, system_is_dark: bool) -> Theme:
    """The theme a choice means now: the system's own only when following it."""
    if choice is ThemeChoice.SYSTEM:
        return DARK if system_is_dark else LIGHT
    return DARK if choice is ThemeChoice.DARK else LIGHT


def error_style(widget: QWidget) -> str:
    """A stylesheet for an error line that reads on the widget's background, light or dark
    (one red cannot reach 4.5:1 on both white and near-black)."""
    dark = widget.palette().color(QPalette.ColorRole.Window).lightness() < 128
    return f"color: {(DARK if dark else LIGHT).danger};"


def system_color_scheme() -> Qt.ColorScheme:
    return QGuiApplication.styleHints().colorScheme()


class ThemeManager(QObject):
    """Holds the choice, knows the effective theme, and keeps the application dressed in it."""

    theme_changed = Signal(object)  # the effective Theme, after the application took it
    choice_changed = Signal(object)  # the ThemeChoice (the menu follows it)

    def __init__(
        self,
        settings: QSettings | None = None,
        system_scheme: SchemeReader = system_color_scheme,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        if settings is None:
            path = app_paths().ensure().data_dir / FILE_NAME
            settings = QSettings(str(path), QSettings.Format.IniFormat)
        self._settings = settings
        self._system_scheme = system_scheme
        self._choice = _stored_choice(settings)
        self._app: QApplication | None = None
        self._theme = resolve(self._choice, self._system_is_dark())
        QGuiApplication.styleHints().colorSchemeChanged.connect(self.system_scheme_changed)

    def current(self) -> Theme:
        return self._theme

    def choice(self) -> ThemeChoice:
        return self._choice

    def set_choice(self, choice: ThemeChoice) -> None:
        """Remember the person's choice and show it at once."""
        if choice is self._choice:
            return
        self._choice = choice
        self._settings.setValue(SETTINGS_KEY, choice.value)
        self._settings.sync()
        self.choice_changed.emit(choice)
        self._request_scheme()
        self._update()

    def system_scheme_changed(self) -> None:
        """The system went light or dark (Qt's colorSchemeChanged, or a test through the seam)."""
        if self._choice is ThemeChoice.SYSTEM:
            self._update()

    def apply(self, app: QApplication) -> None:
        """Dress `app` in the current theme now and again whenever it changes."""
        self._app = app
        self._request_scheme()
        if not self._update():
            self._dress(app, self._theme)

    def _update(self) -> bool:
        """Take the theme the choice and the system mean now; says whether it changed."""
        theme = resolve(self._choice, self._system_is_dark())
        if theme == self._theme:
            return False
        self._theme = theme
        if self._app is not None:
            self._dress(self._app, theme)
        self.theme_changed.emit(theme)
        return True

    def _dress(self, app: QApplication, theme: Theme) -> None:
        app.setStyle(STYLE_NAME)
        app.setPalette(palette_for(theme))
        app.setStyleSheet(stylesheet_for(theme, _check_image(theme)))

    def _request_scheme(self) -> None:
        """Tell Qt the chosen scheme (Qt 6.8+) so what the palette cannot reach follows it
        too: window title bars and native dialogs. Following the system lifts the request,
        so the seam reads the system's own scheme again (Qt re-signals the change)."""
        if self._app is None:
            return  # not this manager's application to dress
        hints = QGuiApplication.styleHints()
        if self._choice is ThemeChoice.SYSTEM:
            hints.unsetColorScheme()
        else:
            dark = self._choice is ThemeChoice.DARK
            hints.setColorScheme(Qt.ColorScheme.Dark if dark else Qt.ColorScheme.Light)

    def _system_is_dark(self) -> bool:
        return self._system_scheme() == Qt.ColorScheme.Dark


def _check_image(theme: Theme) -> Path | None:
    """The tick as a file (stylesheets take images only from files), in a folder that lasts
    as long as the process: the stylesheet naming it may outlive any one manager."""
    folder = _image_folder()
    if not folder.isValid():
        return None  # no temporary folder: checked boxes show as filled squares
    path = Path(folder.path()) / f"check-{theme.name}.svg"
    if not path.exists():
        path.write_text(CHECK_SVG.format(colour=theme.accent_text), encoding="utf-8")
    return path


@functools.cache
def _image_folder() -> QTemporaryDir:
    return QTemporaryDir()


def _stored_choice(settings: QSettings) -> ThemeChoice:
    stored = str(settings.value(SETTINGS_KEY, ThemeChoice.SYSTEM.value))
    try:
        return ThemeChoice(stored)
    except ValueError:
        log.warning("unknown theme %r in %s: following the system", stored, settings.fileName())
        return ThemeChoice.SYSTEM


def theme_menu(manager: ThemeManager, parent: QWidget | None = None) -> QMenu:
    """View → Theme: follow the system, light or dark, one checked, bound both ways."""
    return ThemeMenu(manager, parent)


class ThemeMenu(QMenu):
    """A menu object (not a lambda) follows the manager, so Qt drops the connection when
    the menu goes."""

    def __init__(self, manager: ThemeManager, parent: QWidget | None = None) -> None:
        super().__init__("&Theme", parent)
        self._group = QActionGroup(self)
        self._group.setExclusive(True)
        self._actions: dict[ThemeChoice, QAction] = {}
        for choice, label in CHOICE_LABELS.items():
            action = QAction(label, self, checkable=True)
            action.setData(choice.value)
            self._group.addAction(action)
            self.addAction(action)
            self._actions[choice] = action
        self.show_choice(manager.choice())
        self._group.triggered.connect(lambda action: manager.set_choice(ThemeChoice(action.data())))
        manager.choice_changed.connect(self.show_choice)

    def show_choice(self, choice: ThemeChoice) -> None:
        self._actions[choice].setChecked(True)

    def action_for(self, choice: ThemeChoice) -> QAction:
        return self._actions[choice]


def palette_for(theme: Theme) -> QPalette:
    """Every colour role Qt draws with, so no widget falls back to the style's defaults."""
    role, group = QPalette.ColorRole, QPalette.ColorGroup
    disabled = _mix(theme.text, theme.window, 0.45)
    colours = {
        role.Window: theme.window,
        role.WindowText: theme.text,
        role.Base: theme.surface,
        role.AlternateBase: _mix(theme.surface, theme.window, 0.5),
        role.ToolTipBase: theme.surface,
        role.ToolTipText: theme.text,
        role.PlaceholderText: theme.muted_text,
        role.Text: theme.text,
        role.Button: _mix(theme.surface, theme.window, 0.5),
        role.ButtonText: theme.text,
        role.BrightText: theme.danger,
        role.Light: _mix(theme.surface, "#ffffff", 0.15),
        role.Midlight: _mix(theme.surface, theme.border, 0.5),
        role.Mid: theme.border,
        role.Dark: _mix(theme.border, "#000000", 0.3),
        role.Shadow: "#000000",
        role.Highlight: theme.accent,
        role.HighlightedText: theme.accent_text,
        role.Link: theme.link,
        role.LinkVisited: theme.link,
        role.Accent: theme.accent,
    }
    palette = QPalette()
    for colour_role, colour in colours.items():
        palette.setColor(colour_role, QColor(colour))
    for colour_role in (role.WindowText, role.Text, role.ButtonText, role.PlaceholderText):
        palette.setColor(group.Disabled, colour_role, QColor(disabled))
    palette.setColor(group.Disabled, role.Highlight, QColor(theme.border))
    palette.setColor(group.Disabled, role.HighlightedText, QColor(disabled))
    return palette


def stylesheet_for(theme: Theme, check_image: Path | None = None) -> str:
    """Rounded inputs and buttons, flat lists with an accent selection, slim scrollbars and
    splitters, quiet dock titles and status bar; colours the palette cannot express.
    Sliders and check boxes are drawn here too: Fusion outlines them in a darker shade of
    the window, which vanishes on a dark one."""
    t = theme
    control = _mix(t.border, t.text, 0.3)  # outlines that must show on the window
    tick = f"image: url({check_image.as_posix()});" if check_image else ""
    hover = _mix(t.surface, t.text, 0.06)
    pressed = _mix(t.surface, t.text, 0.12)
    handle = _mix(t.border, t.text, 0.15)
    handle_hover = _mix(t.border, t.text, 0.35)
    selected = _mix(t.accent, t.surface, 0.55 if t.is_dark else 0.8)
    return f"""
QLineEdit, QTextEdit, QPlainTextEdit {{
    background: {t.surface}; color: {t.text};
    border: 1px solid {t.border}; border-radius: 8px; padding: 6px 8px;
    selection-background-color: {t.accent}; selection-color: {t.accent_text};
}}
QLineEdit:focus, QTextEdit:focus, QPlainTextEdit:focus {{ border: 1px solid {t.accent}; }}
QTextBrowser {{ border: none; border-radius: 0; padding: 8px 12px; }}
QPushButton {{
    background: {t.surface}; color: {t.text};
    border: 1px solid {t.border}; border-radius: 8px; padding: 6px 14px; min-height: 18px;
}}
QPushButton:hover {{ background: {hover}; }}
QPushButton:pressed {{ background: {pressed}; }}
QPushButton:default {{ background: {t.accent}; color: {t.accent_text}; border-color: {t.accent}; }}
QPushButton:disabled {{ color: {t.muted_text}; background: {t.window}; }}
QListView {{
    background: {t.window}; border: none; outline: none; padding: 4px;
}}
QListView::item {{ padding: 7px 10px; border-radius: 6px; margin: 1px 0; color: {t.text}; }}
QListView::item:hover {{ background: {hover}; }}
QListView::item:selected {{ background: {selected}; color: {t.text}; }}
QSplitter::handle:horizontal {{
    width: 5px; background: {_line(t, "x2: 1, y2: 0")};
}}
QSplitter::handle:vertical {{ height: 5px; background: {_line(t, "x2: 0, y2: 1")}; }}
QMainWindow::separator {{ background: {t.window}; width: 4px; height: 4px; }}
QScrollBar:vertical {{ background: transparent; width: 10px; margin: 0; }}
QScrollBar:horizontal {{ background: transparent; height: 10px; margin: 0; }}
QScrollBar::handle {{ background: {handle}; border-radius: 3px; margin: 2px; }}
QScrollBar::handle:hover {{ background: {handle_hover}; }}
QScrollBar::handle:vertical {{ min-height: 28px; }}
QScrollBar::handle:horizontal {{ min-width: 28px; }}
QScrollBar::add-line, QScrollBar::sub-line {{ width: 0; height: 0; border: none; }}
QScrollBar::add-page, QScrollBar::sub-page {{ background: none; }}
QDockWidget {{ color: {t.muted_text}; }}
QDockWidget::title {{
    background: {t.window}; padding: 6px 8px; border-bottom: 1px solid {t.border};
}}
QStatusBar {{ background: {t.window}; color: {t.muted_text}; border-top: 1px solid {t.border}; }}
QStatusBar::item {{ border: none; }}
QCheckBox::indicator {{
    width: 14px; height: 14px; border: 1px solid {control}; border-radius: 4px;
    background: {t.surface};
}}
QCheckBox::indicator:checked {{ background: {t.accent}; border-color: {t.accent}; {tick} }}
QCheckBox::indicator:disabled {{ border-color: {t.border}; background: {t.window}; }}
QCheckBox::indicator:checked:disabled {{ background: {t.border}; }}
QSlider::groove:horizontal {{ height: 4px; background: {t.border}; border-radius: 2px; }}
QSlider::sub-page:horizontal {{ background: {t.accent}; border-radius: 2px; }}
QSlider::sub-page:horizontal:disabled {{ background: {control}; }}
QSlider::handle:horizontal {{
    background: {t.surface}; border: 1px solid {control};
    width: 14px; height: 14px; margin: -6px 0; border-radius: 8px;
}}
QSlider::handle:horizontal:hover {{ border-color: {t.accent}; }}
QToolTip {{
    background: {t.surface}; color: {t.text}; border: 1px solid {t.border}; padding: 4px;
}}
"""


def _line(theme: Theme, direction: str) -> str:
    """A one-pixel line down the middle of a five-pixel handle: thin to see, easy to grab."""
    w, b = theme.window, theme.border
    stops = (
        f"stop: 0 {w}, stop: 0.4 {w}, stop: 0.41 {b}, stop: 0.59 {b}, stop: 0.6 {w}, stop: 1 {w}"
    )
    return f"qlineargradient(x1: 0, y1: 0, {direction}, {stops})"


def _mix(colour: str, other: str, weight: float) -> str:
    """`colour` moved `weight` of the way towards `other` (0 keeps it, 1 gives `other`)."""
    a, b = QColor(colour), QColor(other)
    channels = (
        round(x + (y - x) * weight)
        for x, y in ((a.red(), b.red()), (a.green(), b.green()), (a.blue(), b.blue()))
    )
    return "#{:02x}{:02x}{:02x}".format(*channels)
