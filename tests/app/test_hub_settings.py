"""The Hub token's sources in order, the token file's mode, the models folder setting."""

from __future__ import annotations

import stat
from pathlib import Path

import huggingface_hub.constants
import pytest

from app.hub.hub_settings import (
    forget_token,
    hub_endpoint,
    hub_token,
    models_dir,
    save_token,
    set_models_dir,
)
from app.paths import app_paths


@pytest.fixture
def cli_token_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "hf-cli" / "token"
    monkeypatch.setattr(huggingface_hub.constants, "HF_TOKEN_PATH", str(path))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    return path


def test_no_token_anywhere_is_none(cli_token_file: Path) -> None:
    assert hub_token() is None


def test_a_saved_token_is_a_0600_file_in_the_config_folder_without_a_keyring(
    cli_token_file: Path,
) -> None:
    where = save_token("  hf_saved \n")
    path = Path(where)
    assert path.parent == app_paths().config_dir
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_text() == "hf_saved"
    found = hub_token()
    assert found is not None and (found.value, found.source) == ("hf_saved", "file")
    forget_token()
    assert not path.exists() and hub_token() is None


def test_the_hf_cli_login_comes_before_a_saved_token_and_hf_token_before_both(
    cli_token_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    save_token("hf_saved")
    cli_token_file.parent.mkdir(parents=True)
    cli_token_file.write_text("hf_from_cli\n")
    found = hub_token()
    assert found is not None and (found.value, found.source) == ("hf_from_cli", "hf CLI login")
    monkeypatch.setenv("HF_TOKEN", "hf_from_env")
    found = hub_token()
    assert found is not None and (found.value, found.source) == ("hf_from_env", "HF_TOKEN")


def test_an_empty_token_is_refused(cli_token_file: Path) -> None:
    with pytest.raises(ValueError, match="empty"):
        save_token("   ")


def test_endpoint_follows_hf_endpoint_at_each_call(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_ENDPOINT", raising=False)
    assert hub_endpoint() == "https://huggingface.co"
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9/")
    assert hub_endpoint() == "http://127.0.0.1:9"


def test_models_folder_defaults_under_the_data_folder_and_can_be_moved(tmp_path: Path) -> None:
    assert models_dir() == app_paths().data_dir / "models"
    chosen = set_models_dir(tmp_path / "big-disk" / "models")
    assert chosen.is_dir()
    assert models_dir() == chosen


def test_an_unreadable_settings_file_falls_back_to_the_default() -> None:
    settings = app_paths().config_dir / "hub.json"
    settings.parent.mkdir(parents=True)
    settings.write_text("{not json")
    assert models_dir() == app_paths().data_dir / "models"
