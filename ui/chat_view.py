"""The conversation, rendered as Markdown (headings, lists, tables, code) as it streams in.

It renders what it is given and owns nothing: the controller passes the
messages, and while a reply streams it passes the growing text, which is
re-rendered at most every RENDER_INTERVAL_MS so long replies stay smooth.
Every finished code block has a copy link under it; other links open in the
system browser. A message's images show as thumbnails above its text; clicking
one asks (image_opened) for the image to be shown whole. A reasoning model's
thinking shows live while it streams, then folds into one line above the answer
that opens it again when clicked.
"""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import Qt, QTimer, QUrl, Signal
from PySide6.QtGui import QDesktopServices, QGuiApplication, QImage, QTextDocument
from PySide6.QtWidgets import QTextBrowser

from engine.model.image_input import ImageFile
from ui.code_blocks import COPY_SCHEME, with_copy_links

RENDER_INTERVAL_MS = 50
THUMBNAIL_PX = 120
THUMBNAILS_KEPT = 256
THUMB_SCHEME, OPEN_SCHEME = "thumb", "image"  # a thumbnail's source / its link
THINK_SCHEME = "think"  # think:N folds or unfolds message N's thinking
_SPEAKERS = {"user": "You", "assistant": "Assistant", "system": "System"}
_KEEP_ASPECT = Qt.AspectRatioMode.KeepAspectRatio
_SMOOTH = Qt.TransformationMode.SmoothTransformation


class ChatView(QTextBrowser):
    code_copied = Signal(str)  # the code put on the clipboard
    image_opened = Signal(object)  # the ImageFile whose thumbnail was clicked

    def __init__(self) -> None:
        super().__init__()
        self.setAccessibleName("Conversation")
        self.setOpenLinks(False)  # copy links are ours; web links go to the browser
        self.anchorClicked.connect(self._on_link)
        self._messages: list[tuple[str, str]] = []
        self._images: list[ImageFile] = []  # every shown image, by its index in thumb:N
        self._thumbnails: dict[str, QImage] = {}  # by ImageFile.key, kept across renders
        self._streaming: str | None = None
        self._thinking: list[str] = []  # each shown message's thinking ("" for none)
        self._streaming_thinking = ""
        self._unfolded: set[int] = set()  # messages whose thinking is shown whole
        self._codes: list[str] = []
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(RENDER_INTERVAL_MS)
        self._timer.timeout.connect(self._render)

    def show_messages(self, messages: Sequence[tuple]) -> None:
        """(role, text), (role, text, images) or (role, text, images, thinking) of the
        conversation; replaces what is shown."""
        self._images, self._messages, self._thinking = [], [], []
        for role, text, *rest in messages:
            images = tuple(rest[0]) if rest else ()
            links = [self._thumbnail_link(image) for image in images]
            self._messages.append((role, " ".join(links) + "\n\n" + text if links else text))
            self._thinking.append(rest[1] if len(rest) > 1 else "")
        self._streaming, self._streaming_thinking = None, ""
        self._render()

    def shown_images(self) -> list[ImageFile]:
        return list(self._images)

    def open_image(self, index: int) -> None:
        self.image_opened.emit(self._images[index])

    def loadResource(self, kind: int, name: QUrl | str) -> object:  # noqa: N802 - Qt's name
        """Thumbnails are made here, when the document first draws them."""
        url = name if isinstance(name, QUrl) else QUrl(name)
        if kind == QTextDocument.ResourceType.ImageResource and url.scheme() == THUMB_SCHEME:
            index = int(url.path()) if url.path().isdigit() else -1
            if 0 <= index < len(self._images):
                return self._thumbnail(index)
        return super().loadResource(kind, name)

    def _thumbnail_link(self, image: ImageFile) -> str:
        self._images.append(image)
        index = len(self._images) - 1
        label = image.name.replace("]", "").replace("[", "") or "image"
        return f"[![{label}]({THUMB_SCHEME}:{index})]({OPEN_SCHEME}:{index})"

    def _thumbnail(self, index: int) -> QImage:
        """Decoded once per image, not per render: a photo takes a GUI-blocking while."""
        image = self._images[index]
        if image.key not in self._thumbnails:
            full = QImage.fromData(image.data)
            if full.isNull():
                full = QImage(THUMBNAIL_PX, THUMBNAIL_PX, QImage.Format.Format_RGB32)
                full.fill(0x808080)
            if len(self._thumbnails) >= THUMBNAILS_KEPT:
                self._thumbnails.pop(next(iter(self._thumbnails)))
            self._thumbnails[image.key] = full.scaled(
                THUMBNAIL_PX, THUMBNAIL_PX, aspectMode=_KEEP_ASPECT, mode=_SMOOTH
            )
        return self._thumbnails[image.key]

    def show_streaming(self, text: str, thinking: str = "") -> None:
        """The reply as it grows, and its thinking; rendered after the shown messages."""
        self._streaming, self._streaming_thinking = text, thinking
        if not self._timer.isActive():
            self._timer.start()

    def markdown(self) -> str:
        pairs = enumerate(zip(self._messages, self._thinking, strict=True))
        shown = [
            (role, self._thinking_block(index, thought, live=False) + text)
            for index, ((role, text), thought) in pairs
        ]
        if self._streaming is not None:
            live = not self._streaming  # still thinking: no answer yet
            block = self._thinking_block(len(shown), self._streaming_thinking, live)
            shown.append(("assistant", block + self._streaming + " ▌"))
        return "\n\n---\n\n".join(
            f"**{_SPEAKERS.get(role, role)}**\n\n{text}" for role, text in shown
        )

    def toggle_thinking(self, index: int) -> None:
        """Fold or unfold message `index`'s thinking (what its link does)."""
        self._unfolded.symmetric_difference_update({index})
        self._render()

    def _thinking_block(self, index: int, thinking: str, live: bool) -> str:
        """Folded: one line saying how long the thinking is; unfolded or live: all of it."""
        if not thinking:
            return ""
        quoted = "\n".join(f"> {line}" for line in thinking.splitlines())
        if live:
            return f"*Thinking…*\n\n{quoted}\n\n"
        unfolded = index in self._unfolded
        action = "hide" if unfolded else "show"
        link = f"[Thought for {len(thinking.split())} words — click to {action}]"
        return f"{link}({THINK_SCHEME}:{index})\n\n" + (f"{quoted}\n\n" if unfolded else "")

    def code_blocks(self) -> list[str]:
        """The code of every finished block shown, in order (what the copy links copy)."""
        return list(self._codes)

    def copy_code(self, index: int) -> None:
        QGuiApplication.clipboard().setText(self._codes[index])
        self.code_copied.emit(self._codes[index])

    def _on_link(self, url: QUrl) -> None:
        if url.scheme() == COPY_SCHEME:
            index = int(url.path()) if url.path().isdigit() else -1
            if 0 <= index < len(self._codes):
                self.copy_code(index)
        elif url.scheme() == THINK_SCHEME and url.path().isdigit():
            self.toggle_thinking(int(url.path()))
        elif url.scheme() == OPEN_SCHEME:
            index = int(url.path()) if url.path().isdigit() else -1
            if 0 <= index < len(self._images):
                self.open_image(index)
        elif url.scheme() in ("http", "https", "mailto"):
            QDesktopServices.openUrl(url)

    def _render(self) -> None:
        bar = self.verticalScrollBar()
        at_bottom = bar.value() >= bar.maximum() - 4
        text, self._codes = with_copy_links(self.markdown())
        self.setMarkdown(text)
        if at_bottom:
            bar.setValue(bar.maximum())
