"""`shardchat ask-image`, run as a user runs it, with a synthetic vision model and projector."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_run import CliRun
from PIL import Image
from test_cli import assert_one_line_error  # the CLI test helpers, same folder

from tests.synthetic_vision import ProjectorSpec, write_synthetic_projector, write_synthetic_vlm


@pytest.fixture(scope="module")
def vlm(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return write_synthetic_vlm(tmp_path_factory.mktemp("vlm"))


def picture(folder: Path, name: str, size: tuple[int, int] = (64, 48), kind: str = "PNG") -> Path:
    path = folder / name
    Image.new("RGB", size, "orange").save(path, kind)
    return path


def test_answers_about_two_images_and_reports_the_vlmopt_choices(
    vlm: tuple[Path, Path], tmp_path: Path, shardchat: CliRun
) -> None:
    model, mmproj = vlm
    first, second = picture(tmp_path, "a.png"), picture(tmp_path, "b.jpg", (300, 20), "JPEG")
    done = shardchat("ask-image", "--model", str(model), "--max-tokens", "6",
                     str(first), str(second), "What differs?")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip()  # the answer (random weights: words, not sense)
    report = done.stderr
    assert "vlmopt: vision encoder on the CPU" in report  # this machine has no GPU
    assert "image: a.png 64x48 px" in report and "image: b.jpg 300x20 px" in report
    assert "vision context opened" in report and report.count("encoded ") == 2
    del mmproj  # found beside the model: its name says mmproj


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda d: d / "missing.png", "no such image file"),
        (lambda d: _write(d / "empty.png", b""), "empty (zero bytes)"),
        (lambda d: _write(d / "text.png", b"not an image"), "not an image this app can read"),
        (lambda d: picture(d, "scan.tiff", kind="TIFF"), "TIFF images are not supported"),
        (lambda d: _cut(picture(d, "half.webp", kind="WEBP")), "damaged or truncated"),
        (lambda d: _cut(picture(d, "short.tiff", kind="TIFF"), 16), "not an image"),
    ],
    # a WebP cut in half was an internal error (exit 1); Pillow's warnings about a short
    # TIFF's EXIF data turned the refusal into three lines
    ids=["missing", "zero-bytes", "not-an-image", "tiff", "webp-cut-in-half", "tiff-cut-short"],
)
def test_bad_images_are_one_line_errors(
    vlm: tuple[Path, Path], tmp_path: Path, make, message: str, shardchat: CliRun
) -> None:
    done = shardchat("ask-image", "--model", str(vlm[0]), str(make(tmp_path)), "What is it?")
    assert message in assert_one_line_error(done)


def test_a_model_without_a_projector_says_how_to_add_one(tmp_path: Path, shardchat: CliRun) -> None:
    done = shardchat("ask-image", str(picture(tmp_path, "a.png")), "What is it?")
    line = assert_one_line_error(done)
    assert "has no vision projector: pass --mmproj" in line


def test_a_projector_for_another_model_is_refused(
    vlm: tuple[Path, Path], tmp_path: Path, shardchat: CliRun
) -> None:
    wrong = write_synthetic_projector(tmp_path / "wrong.gguf", ProjectorSpec(96))
    done = shardchat("ask-image", "--model", str(vlm[0]), "--mmproj", str(wrong),
                     str(picture(tmp_path, "a.png")), "What is it?")  # fmt: skip
    assert "made for another model" in assert_one_line_error(done)


def test_an_image_without_a_question_is_refused(
    vlm: tuple[Path, Path], tmp_path: Path, shardchat: CliRun
) -> None:
    done = shardchat("ask-image", "--model", str(vlm[0]), str(picture(tmp_path, "a.png")))
    assert "at least one IMAGE and then the QUESTION" in assert_one_line_error(done)


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _cut(path: Path, keep: int | None = None) -> Path:
    """The file cut short, to `keep` bytes or to half its length."""
    data = path.read_bytes()
    return _write(path, data[: len(data) // 2 if keep is None else keep])
