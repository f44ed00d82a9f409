"""Render assets/shardchat.svg into the icons the installers need (a build step, not bundled).

    python installer/make_icons.py OUT_DIR

writes OUT_DIR/hicolor/NxN/apps/shardchat.png (Linux desktops), OUT_DIR/shardchat.ico
(Windows: the executable and the installer) and OUT_DIR/shardchat.icns (macOS). Qt renders
the SVG offscreen, Pillow writes the .ico and .icns, so every system builds the same icons.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SVG = ROOT / "assets" / "shardchat.svg"
HICOLOR_SIZES = (16, 24, 32, 48, 64, 128, 256, 512)
ICO_SIZES = (16, 24, 32, 48, 64, 128, 256)


def render_pngs(out: Path) -> dict[int, Path]:
    """One PNG per size, rendered from the SVG with Qt (offscreen: no display needed)."""
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import Qt
    from PySide6.QtGui import QGuiApplication, QImage, QPainter
    from PySide6.QtSvg import QSvgRenderer

    _app = QGuiApplication.instance() or QGuiApplication(["make_icons"])
    renderer = QSvgRenderer(str(SVG))
    if not renderer.isValid():
        raise SystemExit(f"cannot read {SVG}")
    made = {}
    for size in HICOLOR_SIZES:
        image = QImage(size, size, QImage.Format.Format_ARGB32)
        image.fill(Qt.GlobalColor.transparent)
        painter = QPainter(image)
        renderer.render(painter)
        painter.end()
        path = out / "hicolor" / f"{size}x{size}" / "apps" / "shardchat.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        if not image.save(str(path), "PNG"):
            raise SystemExit(f"cannot write {path}")
        made[size] = path
    return made


def write_ico_and_icns(pngs: dict[int, Path], out: Path) -> None:
    from PIL import Image

    largest = Image.open(pngs[max(pngs)])
    largest.save(out / "shardchat.ico", sizes=[(s, s) for s in ICO_SIZES])
    largest.save(out / "shardchat.icns")


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: make_icons.py OUT_DIR", file=sys.stderr)
        return 2
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    write_ico_and_icns(render_pngs(out), out)
    print(f"icons: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
