"""The prompt-format setting outside the engine: the CLI flag, `info`, `chat --verbose`, the
model list's per-model setting and the worker that loads with it."""

from __future__ import annotations

import json
import queue
import sqlite3
from pathlib import Path

import pytest
from cli_run import CliRun

from app.engine_host.events import (
    FINAL_EVENTS,
    EngineEvent,
    ModelLoaded,
    PromptFormatChosen,
    ReplyFinished,
    RequestFailed,
)
from app.engine_host.worker import EngineWorker
from app.stores.model_library import ModelLibrary, m001_models, prompt_format_for
from app.stores.sqlite_migrations import apply_migrations
from engine.errors import BadInputError
from engine.generation.sampling import SamplingSettings
from engine.llama.load_params import LoadParams
from engine.model.prompt_format import family_named
from tests.app.test_cli import assert_one_line_error
from tests.synthetic_vocab import marker_vocabulary

GEMMA_MARKERS = ("<start_of_turn>", "<end_of_turn>")


@pytest.fixture(scope="module")
def gemma_vocab_model(make_synthetic) -> Path:
    """A tiny llama whose vocabulary has Gemma's markers and which has no chat template."""
    assert family_named("gemma") is not None
    return make_synthetic("llama", **marker_vocabulary(GEMMA_MARKERS))


def test_info_says_which_format_and_why(gemma_vocab_model: Path, shardchat: CliRun) -> None:
    done = shardchat("info", str(gemma_vocab_model))
    assert done.returncode == 0, done.stderr
    line = next(x for x in done.stdout.splitlines() if x.startswith("prompt format"))
    assert line == (
        "prompt format  gemma (no chat template; the vocabulary has "
        "<start_of_turn>/<end_of_turn>: Gemma's format)"
    )
    as_json = json.loads(shardchat("info", "--json", str(gemma_vocab_model)).stdout)
    assert as_json["prompt_format"]["name"] == "gemma"
    assert as_json["prompt_format"]["kind"] == "builtin"


def test_info_follows_the_flag(gemma_vocab_model: Path, shardchat: CliRun) -> None:
    done = shardchat("info", "--prompt-format", "completion", str(gemma_vocab_model))
    assert "prompt format  completion (plain text completion, as set)" in done.stdout


def test_an_unknown_format_is_refused_by_every_command(
    gemma_vocab_model: Path, shardchat: CliRun
) -> None:
    for command in ("info", "chat", "summarize", "ask-image"):
        done = shardchat(command, "--prompt-format", "gemma9", "x")
        assert done.returncode == 2
        assert "unknown prompt format 'gemma9'; choose auto, template, completion" in done.stderr
        assert "Traceback" not in done.stderr


def test_the_template_format_for_a_model_without_one_is_one_line_bad_input(
    gemma_vocab_model: Path,
    shardchat: CliRun,
) -> None:
    done = shardchat("info", "--prompt-format", "template", str(gemma_vocab_model))
    assert "has no chat template of its own" in assert_one_line_error(done)


def test_chat_verbose_prints_the_format_to_stderr(
    gemma_vocab_model: Path, shardchat: CliRun
) -> None:
    args = ("--model", str(gemma_vocab_model), "--temperature", "0", "--max-tokens", "2")
    done = shardchat("chat", "--verbose", *args, "Hi")
    assert done.returncode == 0, done.stderr
    assert "prompt format: gemma (no chat template; the vocabulary has" in done.stderr
    quiet = shardchat("chat", *args, "Hi")
    assert "prompt format" not in quiet.stderr


def test_the_model_list_keeps_a_format_per_model(gemma_vocab_model: Path) -> None:
    with ModelLibrary() as library:
        entry = library.add(gemma_vocab_model)
        assert entry.prompt_format == "auto"
        assert library.set_prompt_format(gemma_vocab_model, "chatml").prompt_format == "chatml"
        with pytest.raises(BadInputError, match="unknown prompt format 'chat-ml'"):
            library.set_prompt_format(gemma_vocab_model, "chat-ml")
        builtin = next(e for e in library.models() if e.builtin)
        with pytest.raises(BadInputError, match="built-in model always uses its own"):
            library.set_prompt_format(builtin.path, "completion")
    assert prompt_format_for(gemma_vocab_model) == "chatml"  # it survived reopening
    assert prompt_format_for(builtin.path) == "auto"


def test_a_list_written_before_the_setting_existed_is_upgraded(
    gemma_vocab_model: Path, isolated_home: Path
) -> None:
    with ModelLibrary() as library:
        store = library.path
    store.unlink()
    conn = sqlite3.connect(store)
    apply_migrations(conn, (m001_models,))  # what ShardChat wrote before m002
    conn.execute(
        "INSERT INTO models (path, name, architecture, kind, added_at) VALUES (?, 'm', "
        "'llama', 'dense', '2026-01-01T00:00:00+00:00')",
        (str(gemma_vocab_model.resolve()),),
    )
    conn.commit()
    conn.close()
    with ModelLibrary() as library:
        assert library.recovered_from is None  # upgraded in place, not moved aside
        assert library.find(gemma_vocab_model).prompt_format == "auto"  # type: ignore[union-attr]


def _events() -> tuple[EngineWorker, queue.Queue[EngineEvent]]:
    events: queue.Queue[EngineEvent] = queue.Queue()
    return EngineWorker(events.put).start(), events


def _final(events: queue.Queue[EngineEvent], request_id: int) -> EngineEvent:
    while True:
        event = events.get(timeout=120)
        if isinstance(event, FINAL_EVENTS) and event.request_id == request_id:
            return event


def test_the_worker_loads_with_the_stored_setting_and_switches_on_request(
    gemma_vocab_model: Path,
) -> None:
    with ModelLibrary() as library:
        library.add(gemma_vocab_model)
        library.set_prompt_format(gemma_vocab_model, "completion")
    worker, events = _events()
    try:
        params = LoadParams(str(gemma_vocab_model), n_ctx=256, n_threads=2)
        loaded = _final(events, worker.load_model(params))
        assert isinstance(loaded, ModelLoaded)
        assert (loaded.prompt_format, loaded.prompt_format_reason) == (
            "completion", "plain text completion, as set",
        )  # fmt: skip
        chosen = _final(events, worker.set_prompt_format("auto"))
        assert isinstance(chosen, PromptFormatChosen)
        assert (chosen.name, chosen.kind) == ("gemma", "builtin")
        refused = _final(events, worker.set_prompt_format("no-such"))
        assert isinstance(refused, RequestFailed) and refused.bad_input
        settings = SamplingSettings(temperature=0.0, max_tokens=2)
        reply = _final(events, worker.send_message("Hi", settings))
        assert isinstance(reply, ReplyFinished) and reply.stats.generated_tokens >= 1
        explicit = _final(events, worker.load_model(params, prompt_format="chatml"))
        assert isinstance(explicit, ModelLoaded) and explicit.prompt_format == "chatml"
    finally:
        worker.shutdown()


def test_help_lists_the_flag_on_every_model_command(shardchat: CliRun) -> None:
    for command in ("info", "chat", "summarize", "ask-image"):
        assert "--prompt-format NAME" in shardchat(command, "--help").stdout
