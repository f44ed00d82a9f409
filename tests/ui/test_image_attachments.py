"""Images in the message input: real image files, real clipboard, real drop events, offscreen Qt."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from image_mutants import after_ihdr, corpus, encoded, inflating_to, originals, picture, png_chunk
from PySide6.QtCore import QBuffer, QByteArray, QIODevice, QMimeData, QPointF, Qt, QUrl
from PySide6.QtGui import (
    QColor,
    QDragEnterEvent,
    QDragMoveEvent,
    QDropEvent,
    QImage,
    QImageReader,
)
from PySide6.QtWidgets import QApplication, QLabel, QToolButton, QVBoxLayout, QWidget

from engine.errors import BadInputError
from ui.conversation.image_attachments import (
    MAX_FILE_BYTES,
    MAX_SIDE_PX,
    AttachmentStrip,
    ImageAttachment,
    image_from_bytes,
    image_from_qimage,
    load_image_file,
)
from ui.conversation.message_input import MessageInput

RED, BLUE = QColor(255, 0, 0), QColor(0, 0, 255)
LEFT, NO_KEYS = Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier


def solid_image(width: int, height: int, color: QColor) -> QImage:
    image = QImage(width, height, QImage.Format.Format_RGB32)
    image.fill(color)
    return image


def save_image(tmp_path: Path, name: str, image_format: str, color: QColor = RED) -> Path:
    path = tmp_path / name
    assert solid_image(40, 30, color).save(str(path), image_format), f"cannot write {image_format}"
    return path


def gif_bytes(frames: list[int], width: int = 2, height: int = 2) -> bytes:
    """An animated GIF, one solid frame per palette index (Qt has no GIF writer).

    Pixel data is LZW with a clear code before every literal, so every code
    stays 3 bits wide: valid, just not compressed.
    """
    palette = bytes([255, 0, 0, 0, 255, 0, 0, 0, 255, 255, 255, 255])  # red green blue white
    header = b"GIF89a" + struct.pack("<HHBBB", width, height, 0xF1, 0, 0) + palette
    body = b""
    for index in frames:
        control = b"\x21\xf9\x04\x00" + struct.pack("<H", 10) + b"\x00\x00"
        descriptor = b"\x2c" + struct.pack("<HHHHB", 0, 0, width, height, 0)
        body += (
            control + descriptor + b"\x02" + _sub_blocks(_lzw_literals([index] * width * height))
        )
    return header + body + b"\x3b"


def _lzw_literals(indices: list[int]) -> bytes:
    codes = [code for index in indices for code in (4, index)] + [5]  # 4 clear, 5 end
    bits = sum(code << (3 * position) for position, code in enumerate(codes))
    return bits.to_bytes((3 * len(codes) + 7) // 8, "little")


def _sub_blocks(data: bytes) -> bytes:
    chunks = [data[i : i + 255] for i in range(0, len(data), 255)]
    return b"".join(bytes([len(chunk)]) + chunk for chunk in chunks) + b"\x00"


def decoded(attachment: ImageAttachment) -> QImage:
    """The attachment's PNG as the model would get it; fails if it is not PNG."""
    buffer = QBuffer()
    buffer.setData(QByteArray(attachment.png_bytes))
    buffer.open(QIODevice.OpenModeFlag.ReadOnly)
    reader = QImageReader(buffer)
    assert bytes(reader.format().data()) == b"png"
    return reader.read()


def is_red(color: QColor) -> bool:
    return color.red() > 200 and color.green() < 60 and color.blue() < 60


def url_mime(*paths: Path) -> QMimeData:
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(path)) for path in paths])
    return mime


def paste(widget: MessageInput, mime: QMimeData) -> None:
    QApplication.clipboard().setMimeData(mime)
    widget.paste()


def drop(widget: MessageInput, mime: QMimeData) -> None:
    """Drag in, move, drop: the sequence a window system delivers to the text area."""
    widget.show()
    spot = QPointF(5, 5)
    for event in (
        QDragEnterEvent(spot.toPoint(), Qt.DropAction.CopyAction, mime, LEFT, NO_KEYS),
        QDragMoveEvent(spot.toPoint(), Qt.DropAction.CopyAction, mime, LEFT, NO_KEYS),
        QDropEvent(spot, Qt.DropAction.CopyAction, mime, LEFT, NO_KEYS),
    ):
        QApplication.sendEvent(widget.viewport(), event)
        assert event.isAccepted()


def remove_buttons(strip: AttachmentStrip) -> list[QToolButton]:
    """The strip's live remove buttons (replaced ones are hidden until Qt deletes them)."""
    return [b for b in strip.findChildren(QToolButton) if b.parentWidget().isVisibleTo(strip)]


@pytest.fixture
def message_input(qtbot) -> MessageInput:
    widget = MessageInput()
    qtbot.addWidget(widget)
    return widget


# --- reading images ---


@pytest.mark.parametrize(
    ("name", "image_format"),
    [("photo.png", "PNG"), ("photo.jpg", "JPEG"), ("photo.bmp", "BMP"), ("photo.webp", "WEBP")],
)
def test_each_format_is_read_and_reencoded_as_png(
    qtbot, tmp_path: Path, name: str, image_format: str
) -> None:
    path = save_image(tmp_path, name, image_format)
    attachment = load_image_file(path)
    assert (attachment.name, attachment.width, attachment.height) == (name, 40, 30)
    assert attachment.source_path == path
    image = decoded(attachment)
    assert (image.width(), image.height()) == (40, 30)
    assert is_red(image.pixelColor(20, 15))


def test_gif_gives_its_first_frame(qtbot, tmp_path: Path) -> None:
    path = tmp_path / "blink.gif"
    path.write_bytes(gif_bytes([0, 2]))  # red, then blue
    reader = QImageReader(str(path))
    assert reader.imageCount() == 2
    reader.read()
    assert reader.read().pixelColor(0, 0) == BLUE  # the file really animates to blue
    attachment = load_image_file(path)
    assert (attachment.width, attachment.height) == (2, 2)
    assert decoded(attachment).pixelColor(1, 1) == RED


def test_the_content_decides_the_format_not_the_name(qtbot, tmp_path: Path) -> None:
    png = save_image(tmp_path, "really-a-png.jpg", "PNG")
    assert load_image_file(png).width == 40


def test_a_corrupt_png_is_refused_with_its_name(qtbot, tmp_path: Path) -> None:
    garbage = tmp_path / "photo.png"
    garbage.write_bytes(b"\x00\x13 this is not a picture " * 20)
    with pytest.raises(BadInputError, match=r"^photo\.png: not a readable image \(.+\)$"):
        load_image_file(garbage)


def test_a_truncated_png_is_refused(qtbot, tmp_path: Path) -> None:
    whole = save_image(tmp_path, "whole.png", "PNG").read_bytes()
    cut = tmp_path / "cut.png"
    cut.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(BadInputError, match=r"^cut\.png: not a readable image \(.+\)$"):
        load_image_file(cut)


def test_a_text_file_is_not_an_image(qtbot, tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("shopping list\nmilk\n")
    with pytest.raises(BadInputError) as caught:
        load_image_file(notes)
    assert str(caught.value) == "notes.txt: not an image (PNG, JPEG, WebP, BMP or GIF)"


def test_other_image_formats_are_named_and_refused(qtbot, tmp_path: Path) -> None:
    drawing = tmp_path / "drawing.svg"
    drawing.write_text('<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"></svg>')
    with pytest.raises(BadInputError, match=r"^drawing\.svg: SVG images are not supported"):
        load_image_file(drawing)


def test_a_missing_path_is_refused(qtbot, tmp_path: Path) -> None:
    with pytest.raises(BadInputError, match=r"^gone\.png: not a file$"):
        load_image_file(tmp_path / "gone.png")
    with pytest.raises(BadInputError, match=r"not a file"):
        load_image_file(tmp_path)


def test_files_over_the_size_cap_are_refused_unread(qtbot, tmp_path: Path) -> None:
    huge = tmp_path / "huge.png"
    with huge.open("wb") as handle:
        handle.truncate(MAX_FILE_BYTES + 1)  # sparse: large on paper, nothing written
    with pytest.raises(BadInputError, match=r"^huge\.png: too large \(50 MB; the limit is 50 MB\)"):
        load_image_file(huge)


def test_images_wider_than_the_cap_are_refused(qtbot, tmp_path: Path) -> None:
    wide = tmp_path / "panorama.png"
    assert solid_image(MAX_SIDE_PX + 1, 1, RED).save(str(wide), "PNG")
    with pytest.raises(BadInputError, match=r"^panorama\.png: too large \(16385×1 px"):
        load_image_file(wide)
    assert load_image_file(save_image(tmp_path, "fine.png", "PNG")).width == 40


def test_decoded_image_data_becomes_an_attachment(qtbot) -> None:
    attachment = image_from_qimage(solid_image(7, 5, RED), "pasted image 1.png")
    assert (attachment.width, attachment.height, attachment.source_path) == (7, 5, None)
    assert is_red(decoded(attachment).pixelColor(3, 2))
    with pytest.raises(BadInputError, match=r"^empty\.png: not a readable image"):
        image_from_qimage(QImage(), "empty.png")
    with pytest.raises(BadInputError, match=r"^clip\.png: not a readable image"):
        image_from_bytes(b"\x89PNG\r\n\x1a\n broken", "clip.png")


# --- the message input ---


def test_the_input_has_an_accessible_name(message_input: MessageInput) -> None:
    assert message_input.accessibleName() == "Message"


def test_pasting_image_data_attaches_it_and_leaves_the_text(qtbot, message_input) -> None:
    message_input.setPlainText("look at this")
    mime = QMimeData()
    mime.setImageData(solid_image(12, 8, RED))
    with qtbot.waitSignal(message_input.attachments_changed) as changed:
        paste(message_input, mime)
    assert message_input.toPlainText() == "look at this"
    [attachment] = message_input.attachments()
    assert changed.args == [[attachment]]
    assert (attachment.name, attachment.width, attachment.height) == ("pasted image 1.png", 12, 8)


def test_pasting_encoded_png_data_attaches_it(qtbot, message_input, tmp_path: Path) -> None:
    mime = QMimeData()
    mime.setData("image/png", QByteArray(save_image(tmp_path, "a.png", "PNG").read_bytes()))
    paste(message_input, mime)
    assert [(a.name, a.width) for a in message_input.attachments()] == [("pasted image 1.png", 40)]


def test_pasting_image_files_attaches_each(qtbot, message_input, tmp_path: Path) -> None:
    png = save_image(tmp_path, "cat.png", "PNG")
    jpeg = save_image(tmp_path, "dog.jpg", "JPEG")
    paste(message_input, url_mime(png, jpeg))
    assert [a.name for a in message_input.attachments()] == ["cat.png", "dog.jpg"]
    assert message_input.toPlainText() == ""


def test_dropping_an_image_file_attaches_it(qtbot, message_input, tmp_path: Path) -> None:
    webp = save_image(tmp_path, "drop.webp", "WEBP")
    with qtbot.waitSignal(message_input.attachments_changed):
        drop(message_input, url_mime(webp))
    assert [a.source_path for a in message_input.attachments()] == [webp]


@pytest.mark.parametrize("deliver", [paste, drop])
def test_a_bad_file_is_refused_and_changes_nothing(
    qtbot, message_input, tmp_path: Path, deliver
) -> None:
    first = save_image(tmp_path, "first.png", "PNG")
    paste(message_input, url_mime(first))
    message_input.setPlainText("draft")
    before = message_input.attachments()
    good = save_image(tmp_path, "good.png", "PNG")
    notes = tmp_path / "notes.txt"
    notes.write_text("not a picture")
    with (
        qtbot.assertNotEmitted(message_input.attachments_changed),
        qtbot.waitSignal(message_input.attachment_refused) as refused,
    ):
        deliver(message_input, url_mime(good, notes))
    assert refused.args == ["notes.txt: not an image (PNG, JPEG, WebP, BMP or GIF)"]
    assert message_input.toPlainText() == "draft"
    assert message_input.attachments() == before


def test_corrupt_image_drop_reports_the_reason(qtbot, message_input, tmp_path: Path) -> None:
    corrupt = tmp_path / "photo.png"
    corrupt.write_bytes(b"garbage" * 50)
    with qtbot.waitSignal(message_input.attachment_refused) as refused:
        drop(message_input, url_mime(corrupt))
    assert refused.args[0].startswith("photo.png: not a readable image (")
    assert message_input.attachments() == [] and message_input.toPlainText() == ""


def test_corrupt_pasted_image_data_is_refused(qtbot, message_input) -> None:
    mime = QMimeData()
    mime.setData("image/png", QByteArray(b"\x89PNG\r\n\x1a\n not really"))
    with qtbot.waitSignal(message_input.attachment_refused) as refused:
        paste(message_input, mime)
    assert refused.args[0].startswith("pasted image 1.png: not a readable image")
    assert message_input.attachments() == []


def test_text_paste_still_inserts_text(qtbot, message_input) -> None:
    message_input.setPlainText("say ")
    message_input.moveCursor(message_input.textCursor().MoveOperation.End)
    QApplication.clipboard().setText("hello")
    with qtbot.assertNotEmitted(message_input.attachments_changed):
        message_input.paste()
    assert message_input.toPlainText() == "say hello"
    assert message_input.attachments() == []


def test_web_links_are_pasted_as_text(qtbot, message_input) -> None:
    mime = QMimeData()
    mime.setUrls([QUrl("https://example.com/cat.png")])
    mime.setText("https://example.com/cat.png")
    paste(message_input, mime)
    assert message_input.toPlainText() == "https://example.com/cat.png"
    assert message_input.attachments() == []


def test_enter_with_only_an_image_submits_it(qtbot, message_input, tmp_path: Path) -> None:
    paste(message_input, url_mime(save_image(tmp_path, "only.png", "PNG")))
    taken: list[tuple[str, list[str]]] = []
    message_input.submitted.connect(
        lambda text: taken.append((text, [a.name for a in message_input.take_attachments()]))
    )
    with qtbot.waitSignal(message_input.attachments_changed) as changed:
        qtbot.keyClick(message_input, Qt.Key.Key_Return)
    assert taken == [("", ["only.png"])]
    assert changed.args == [[]] and message_input.attachments() == []


def test_a_refused_message_keeps_its_images(qtbot, message_input, tmp_path: Path) -> None:
    """A slot that does not take the attachments (busy, no vision) leaves them for later."""
    paste(message_input, url_mime(save_image(tmp_path, "keep.png", "PNG")))
    message_input.setPlainText("describe it")
    with (
        qtbot.waitSignal(message_input.submitted) as submitted,
        qtbot.assertNotEmitted(message_input.attachments_changed),
    ):
        message_input.submit()
    assert submitted.args == ["describe it"] and message_input.toPlainText() == ""
    assert [a.name for a in message_input.attachments()] == ["keep.png"]


def test_enter_with_nothing_sends_nothing(qtbot, message_input) -> None:
    message_input.setPlainText("   ")
    with qtbot.assertNotEmitted(message_input.submitted):
        qtbot.keyClick(message_input, Qt.Key.Key_Return)


def test_remove_and_clear_attachments(qtbot, message_input, tmp_path: Path) -> None:
    paths = [save_image(tmp_path, f"{n}.png", "PNG") for n in ("a", "b", "c")]
    paste(message_input, url_mime(*paths))
    with qtbot.waitSignal(message_input.attachments_changed) as changed:
        message_input.remove_attachment(1)
    assert [a.name for a in changed.args[0]] == ["a.png", "c.png"]
    with qtbot.assertNotEmitted(message_input.attachments_changed):
        message_input.remove_attachment(7)
    message_input.clear_attachments()
    assert message_input.attachments() == []


# --- the thumbnail strip ---


def test_strip_shows_thumbnails_and_hides_when_empty(qtbot, tmp_path: Path) -> None:
    strip = AttachmentStrip()
    qtbot.addWidget(strip)
    assert strip.isHidden()
    big = tmp_path / "big.png"
    assert solid_image(300, 150, RED).save(str(big), "PNG")
    strip.show_attachments([load_image_file(big)])
    assert not strip.isHidden()
    [button] = remove_buttons(strip)
    assert button.accessibleName() == "Remove big.png"
    [picture] = [
        label for label in strip.findChildren(QLabel) if label.accessibleName() == "big.png"
    ]
    assert (picture.pixmap().width(), picture.pixmap().height()) == (64, 32)  # kept its 2:1 shape
    strip.show_attachments([])
    assert strip.isHidden() and remove_buttons(strip) == []


def test_remove_buttons_remove_through_the_input(qtbot, message_input, tmp_path: Path) -> None:
    strip = AttachmentStrip()
    qtbot.addWidget(strip)
    message_input.attachments_changed.connect(strip.show_attachments)
    strip.remove_requested.connect(message_input.remove_attachment)
    paths = [save_image(tmp_path, f"{n}.png", "PNG") for n in ("a", "b", "c")]
    paste(message_input, url_mime(*paths))
    names = [b.accessibleName() for b in remove_buttons(strip)]
    assert names == ["Remove a.png", "Remove b.png", "Remove c.png"]
    with qtbot.waitSignal(strip.remove_requested) as requested:
        qtbot.mouseClick(remove_buttons(strip)[1], Qt.MouseButton.LeftButton)
    assert requested.args == [1]
    assert [a.name for a in message_input.attachments()] == ["a.png", "c.png"]
    assert [b.accessibleName() for b in remove_buttons(strip)] == ["Remove a.png", "Remove c.png"]
    for _ in range(2):
        qtbot.mouseClick(remove_buttons(strip)[0], Qt.MouseButton.LeftButton)
    assert message_input.attachments() == [] and strip.isHidden()


class DropTarget(QWidget):
    """A parent that takes drops, as the main window does for dragged models."""

    def __init__(self) -> None:
        super().__init__()
        self.setAcceptDrops(True)
        self.dropped: list[str] = []

    def dragEnterEvent(self, event) -> None:  # noqa: N802 - Qt's name
        event.acceptProposedAction()

    def dragMoveEvent(self, event) -> None:  # noqa: N802 - Qt's name
        event.acceptProposedAction()

    def dropEvent(self, event) -> None:  # noqa: N802 - Qt's name
        self.dropped += [url.toLocalFile() for url in event.mimeData().urls()]
        event.acceptProposedAction()


def test_a_dragged_model_passes_through_to_the_window(qtbot, tmp_path: Path) -> None:
    window = DropTarget()
    qtbot.addWidget(window)
    message_input = MessageInput()
    QVBoxLayout(window).addWidget(message_input)
    model = tmp_path / "tiny.gguf"
    model.write_bytes(b"GGUF")
    mime = url_mime(model)
    mime.setText(str(model))  # file managers add the path as text too
    with qtbot.assertNotEmitted(message_input.attachment_refused):
        window.show()
        drop(message_input, mime)
    assert window.dropped == [str(model)]
    assert message_input.toPlainText() == "" and message_input.attachments() == []


# --- the refusal beside the input ---

LONG_NAME = "IMG_20240611_183502_holiday_photo_from_the_beach.webp"
PROFILE_BOMB = inflating_to(4 * 2**20)  # a PNG colour profile inflating past Pillow's 1 MB


@pytest.fixture
def laid_out(qtbot) -> tuple[QWidget, MessageInput]:
    """An input at the bottom of a column, as the chat window lays it out."""
    window = QWidget()
    qtbot.addWidget(window)
    message_input = MessageInput()
    column = QVBoxLayout(window)
    column.addStretch(1)
    column.addWidget(message_input)
    window.resize(600, 400)
    window.show()
    qtbot.waitExposed(window)
    return window, message_input


def refusal_fits(message_input: MessageInput) -> bool:
    """The whole refusal in sight: inside the input, below the text area, tall enough for
    every wrapped line of it."""
    label, text_area = message_input.refusal, message_input.viewport().geometry()
    box = label.geometry()
    return (
        label.isVisible()
        and message_input.rect().contains(box)
        and box.top() > text_area.bottom()
        and box.height() >= label.heightForWidth(box.width())
        and box.right() <= text_area.right()
    )


def test_a_refused_drop_shows_its_reason_in_the_input(qtbot, laid_out, tmp_path: Path) -> None:
    window, message_input = laid_out
    window.resize(360, 400)
    qtbot.waitUntil(lambda: message_input.width() < 360)
    message_input.setPlainText("what is this?")
    text_height = message_input.viewport().height()
    broken = tmp_path / LONG_NAME
    broken.write_bytes(save_image(tmp_path, "whole.webp", "WEBP").read_bytes()[:40])
    with qtbot.waitSignal(message_input.attachment_refused) as refused:
        drop(message_input, url_mime(broken))
    reason = refused.args[0]
    assert reason.startswith(f"{LONG_NAME}: not a readable image (")
    assert message_input.refusal.text() == reason
    qtbot.waitUntil(lambda: refusal_fits(message_input))
    assert message_input.refusal.height() > message_input.refusal.fontMetrics().height()  # wraps
    qtbot.waitUntil(lambda: message_input.viewport().height() == text_height)  # the input grew
    assert message_input.toPlainText() == "what is this?" and message_input.attachments() == []


def test_the_refusal_follows_the_input_s_width(qtbot, laid_out) -> None:
    window, message_input = laid_out
    message_input.show_refusal(f"{LONG_NAME}: the image data is damaged or truncated (a reason)")
    qtbot.waitUntil(lambda: refusal_fits(message_input))
    one_line = message_input.refusal.height()
    window.resize(300, 400)
    qtbot.waitUntil(lambda: refusal_fits(message_input) and message_input.width() < 320)
    assert message_input.refusal.height() > one_line
    message_input.setPlainText("\n".join(f"line {n}" for n in range(30)))  # a scroll bar comes
    qtbot.waitUntil(lambda: message_input.verticalScrollBar().isVisible())
    qtbot.waitUntil(lambda: refusal_fits(message_input))


def test_the_next_attachment_clears_the_refusal(qtbot, laid_out, tmp_path: Path) -> None:
    message_input = laid_out[1]
    notes = tmp_path / "notes.txt"
    notes.write_text("not a picture")
    drop(message_input, url_mime(notes))
    assert message_input.refusal.isVisible()
    drop(message_input, url_mime(save_image(tmp_path, "fine.png", "PNG")))
    assert message_input.refusal.isHidden() and message_input.viewportMargins().bottom() == 0
    assert [a.name for a in message_input.attachments()] == ["fine.png"]


def test_sending_clears_the_refusal(qtbot, laid_out) -> None:
    message_input = laid_out[1]
    message_input.show_refusal("photo.png: not a readable image (Unable to read image data)")
    message_input.setPlainText("never mind, just text")
    with qtbot.waitSignal(message_input.submitted):
        qtbot.keyClick(message_input, Qt.Key.Key_Return)
    assert message_input.refusal.isHidden() and message_input.viewportMargins().bottom() == 0


@pytest.mark.parametrize(
    "make",
    [
        lambda: encoded(picture(size=(400, 300)), "JPEG")[:-400],  # the last rows missing
        lambda: after_ihdr(originals()["rgb.png"], png_chunk(b"iCCP", b"icc\0\0" + PROFILE_BOMB)),
    ],
    ids=["truncated-jpeg", "iccp-bomb-png"],
)
def test_what_qt_reads_but_the_engine_refuses_is_refused(
    qtbot, laid_out, tmp_path: Path, make
) -> None:
    """Qt pads a cut JPEG with grey and skips a bomb chunk; the CLI and the API refuse
    both, and so does the window now, beside the input."""
    data = make()
    assert not QImage.fromData(data).isNull()  # Qt alone would have attached it
    dropped = tmp_path / "photo.bin"
    dropped.write_bytes(data)
    message_input = laid_out[1]
    drop(message_input, url_mime(dropped))
    assert message_input.attachments() == []
    assert message_input.refusal.text().startswith("photo.bin: the image data is damaged")


def test_every_damaged_image_is_attached_or_refused_by_name(qtbot) -> None:
    """The engine's mutation corpus through the window's own reader (Qt): no exception
    but the refusal, and every refusal names the file."""
    escaped: list[str] = []
    for cases in corpus().values():
        for name, data in cases:
            try:
                attachment = image_from_bytes(data, name)
            except BadInputError as refusal:
                if not str(refusal).startswith(f"{name}: ") or "\n" in str(refusal):
                    escaped.append(f"{name}: refused as {refusal}")
                continue
            except Exception as exc:  # what this test hunts
                escaped.append(f"{name}: escaped as {type(exc).__name__}: {exc}")
                continue
            if decoded(attachment).isNull():
                escaped.append(f"{name}: attached, but its PNG does not decode")
    assert not escaped, "\n".join(escaped)
