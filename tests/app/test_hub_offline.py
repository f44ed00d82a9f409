"""No connection to the Hub: one line at once and exit 2, never 25 s of retries.

A corpus of ways to be offline, each a real socket on this machine: a closed
loopback port (refused), a name that cannot resolve, and a server that never
accepts (its queue is full, so the connection times out). Each is tried against
every `shardchat models` command that talks to the Hub, and against a download
the window resumes. A Hub that is reached but answers an error keeps its
retries: only "no connection" is told at once.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest
from local_hub import LocalHub
from local_hub.repos import TestRepos

from app.cli.main import main
from app.hub.catalogue import Catalogue
from app.hub.connection import CONNECT_TIMEOUT_S, forget_reached
from app.hub.file_transfer import TransferControl
from app.hub.gguf_files import choose_model
from app.hub.hub_errors import HubOfflineError
from app.hub.hub_settings import models_dir
from app.hub.model_download import run_download, start_or_resume
from app.stores.hub_store import FAILED, HubStore

TOLD_WITHIN_S = 3.0
COMMANDS = (
    ("models", "search", "tiny"),
    ("models", "show", "shardtest/Tiny-Llama-GGUF"),
    ("models", "pull", "shardtest/Tiny-Llama-GGUF:Q4_0"),
)


@pytest.fixture
def closed_port() -> str:
    """A loopback port that was just listening and is closed now: connections are refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A server whose accept queue is full: a new connection gets no answer at all, as with
    an address that routes nowhere."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(0)
        url = f"http://127.0.0.1:{server.getsockname()[1]}"
        fillers: list[socket.socket] = []
        for _ in range(8):  # Linux queues backlog + 1 connections; fill until one waits
            filler = socket.socket()
            filler.settimeout(0.2)
            try:
                filler.connect(server.getsockname())
            except TimeoutError:
                filler.close()
                break
            fillers.append(filler)
        else:
            pytest.fail("the accept queue never filled")
        yield url
        for filler in fillers:
            filler.close()


@pytest.fixture(autouse=True)
def fresh_probe() -> Iterator[None]:
    forget_reached()
    yield
    forget_reached()


def _run_offline(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, endpoint: str, argv
) -> tuple[int, str, float]:
    monkeypatch.setenv("HF_ENDPOINT", endpoint)
    started = time.monotonic()
    code = main(list(argv))
    elapsed = time.monotonic() - started
    return code, capsys.readouterr().err, elapsed


@pytest.mark.parametrize("argv", COMMANDS, ids=lambda argv: argv[1])
@pytest.mark.parametrize("offline", ["refused", "no such host"])
def test_every_hub_command_offline_is_one_line_at_once_with_exit_2(
    argv: tuple[str, ...],
    offline: str,
    closed_port: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    endpoint = closed_port if offline == "refused" else "http://no-such-hub.invalid"
    code, err, elapsed = _run_offline(capsys, monkeypatch, endpoint, argv)
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith("shardchat: error: no connection to the Hub")
    assert endpoint in err and "Errno" not in err and "Retrying" not in err
    assert elapsed < TOLD_WITHIN_S


def test_a_hub_that_never_answers_is_offline_after_the_connect_timeout(
    silent_server: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, err, elapsed = _run_offline(capsys, monkeypatch, silent_server, COMMANDS[0])
    assert code == 2 and err.count("\n") == 1
    assert f"no connection to the Hub ({silent_server}: no answer in 2 s)" in err
    assert CONNECT_TIMEOUT_S <= elapsed < TOLD_WITHIN_S


def test_a_reached_hub_that_answers_an_error_keeps_its_retries(
    local_hub: LocalHub, hub_repos: TestRepos, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Connected but refused once (503): huggingface_hub's backoff retries and the search
    succeeds; the probe did not take the error for "offline"."""
    monkeypatch.setattr("huggingface_hub.utils._http.time.sleep", lambda _s: None)
    local_hub.faults.fail_next("/api/models", 503)
    found = Catalogue(endpoint=local_hub.url).search("tiny")
    assert hub_repos.tiny_llama in [r.repo_id for r in found]
    assert local_hub.faults.pending == 0


def test_a_download_resumed_offline_fails_at_once_and_stays_resumable(
    local_hub: LocalHub, closed_port: str
) -> None:
    catalogue = Catalogue(endpoint=local_hub.url)
    details = catalogue.details("shardtest/Tiny-Llama-GGUF")
    model = choose_model(details.models, "Q4_0")
    assert model is not None
    with HubStore() as store:
        download = start_or_resume(store, details, model, models_dir())
        started = time.monotonic()
        with pytest.raises(HubOfflineError, match="no connection to the Hub"):
            run_download(store, download.id, closed_port, {}, lambda _p: None, TransferControl())
        assert time.monotonic() - started < TOLD_WITHIN_S
        row = store.download(download.id)
    assert row.status == FAILED and row.error is not None and closed_port in row.error
