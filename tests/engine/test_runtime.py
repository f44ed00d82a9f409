"""Real decoding through llama.cpp: default model, synthetic architectures, cancel, limits."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import pytest

from engine.cancel import CancelToken
from engine.errors import ContextOverflowError, ModelFileError
from engine.generation.sampling import GREEDY
from engine.generation.stats import FinishReason
from engine.llama.load_params import LoadParams
from engine.runtime.chat import ChatSession
from engine.runtime.loaded_model import LoadedModel, load_model

CANCEL_DEADLINE_S = 0.1
SHORT = GREEDY.with_changes(max_tokens=24)


def load(path: Path, n_ctx: int = 512) -> LoadedModel:
    return load_model(LoadParams(str(path), n_ctx=n_ctx, n_threads=2))


def test_default_model_q4_1_answers(default_model: LoadedModel) -> None:
    pieces: list[str] = []
    reply = ChatSession(default_model).reply(
        "What is the capital of France?", SHORT, None, pieces.append
    )
    assert reply.text.strip()
    assert "".join(pieces) == reply.text
    assert reply.stats.generated_tokens > 0
    assert reply.stats.time_to_first_token_s > 0
    assert reply.stats.decode_tokens_per_s > 0
    assert reply.stats.prompt_tokens > 10


def test_q4_0_model_decodes_with_llama_cpp_repacked_weights(make_synthetic, caplog) -> None:
    path = make_synthetic("llama", "Q4_0", n_embd=128, n_ff=256)
    with caplog.at_level(logging.DEBUG, logger="llama.cpp"):
        model = load(path)
    try:
        assert any("CPU_REPACK model buffer size" in r.getMessage() for r in caplog.records)
        reply = ChatSession(model).reply("Hello", GREEDY.with_changes(max_tokens=8))
        assert reply.stats.generated_tokens == 8
    finally:
        model.close()


@pytest.mark.parametrize(
    ("architecture", "quant"),
    [
        ("llama", "F16"),
        ("llama", "Q8_0"),
        ("qwen3", "F16"),
        ("qwen3moe", "F16"),
        ("qwen3moe", "Q4_0"),
        ("gemma3", "F16"),
        ("gemma3", "Q8_0"),
    ],
)
def test_each_synthetic_architecture_decodes(make_synthetic, architecture: str, quant: str) -> None:
    model = load(make_synthetic(architecture, quant))
    try:
        assert model.inventory.architecture == architecture
        reply = ChatSession(model).reply("Hello there", GREEDY.with_changes(max_tokens=6))
        assert reply.stats.generated_tokens == 6
        assert reply.finish_reason is FinishReason.LENGTH
    finally:
        model.close()


def test_greedy_decoding_is_reproducible_across_sessions_and_loads(
    default_model: LoadedModel, default_model_file: Path
) -> None:
    first = ChatSession(default_model).reply("Name three colours.", SHORT).text
    second = ChatSession(default_model).reply("Name three colours.", SHORT).text
    reloaded = load(default_model_file, n_ctx=1024)
    try:
        third = ChatSession(reloaded).reply("Name three colours.", SHORT).text
    finally:
        reloaded.close()
    assert first == second == third
    assert first


def test_second_turn_reuses_the_cached_prefix(default_model: LoadedModel) -> None:
    session = ChatSession(default_model, system_prompt="Answer briefly.")
    session.reply("Hi!", SHORT)
    second = session.reply("What did I just say?", SHORT)
    assert second.stats.reused_prompt_tokens > 10
    assert [m.role for m in session.messages] == [
        "system",
        "user",
        "assistant",
        "user",
        "assistant",
    ]


def cancel_after(delay_s: float, cancel: CancelToken) -> list[float]:
    stamp: list[float] = []

    def fire() -> None:
        time.sleep(delay_s)
        stamp.append(time.perf_counter())
        cancel.cancel()

    threading.Thread(target=fire, daemon=True).start()
    return stamp


def test_cancel_during_decode_stops_within_100_ms(default_model: LoadedModel) -> None:
    cancel = CancelToken()
    stamp: list[float] = []

    def on_text(_piece: str) -> None:
        if not stamp:
            stamp.append(time.perf_counter())
            cancel.cancel()

    session = ChatSession(default_model)
    reply = session.reply(
        "Tell me a long story.", GREEDY.with_changes(max_tokens=400), cancel, on_text
    )
    latency = time.perf_counter() - stamp[0]
    assert reply.finish_reason is FinishReason.CANCELLED
    assert latency < CANCEL_DEADLINE_S
    assert session.messages[-1].role == "assistant"  # the partial reply is kept


def test_cancel_during_a_long_prompt_stops_within_100_ms_and_leaves_a_clean_state(
    default_model: LoadedModel,
) -> None:
    long_prompt = "Summarise this. " + "The quick brown fox jumps over the lazy dog. " * 150
    cancel = CancelToken()
    stamp = cancel_after(0.05, cancel)
    started = time.perf_counter()
    reply = ChatSession(default_model).reply(long_prompt, SHORT, cancel)
    finished = time.perf_counter()
    assert reply.finish_reason is FinishReason.CANCELLED
    assert reply.stats.generated_tokens == 0
    assert stamp, "the prompt finished before the cancel fired; make it longer"
    assert finished - stamp[0] < CANCEL_DEADLINE_S
    assert finished - started < 1.0
    # the aborted prompt left nothing behind: a fresh greedy reply matches a clean model's
    after = ChatSession(default_model).reply("Name three colours.", SHORT).text
    assert after == ChatSession(default_model).reply("Name three colours.", SHORT).text


def test_long_conversation_drops_oldest_turns_and_never_overflows(make_synthetic) -> None:
    model = load(make_synthetic("llama", "F16"), n_ctx=256)
    try:
        session = ChatSession(model, system_prompt="You are terse.")
        settings = GREEDY.with_changes(max_tokens=40)
        dropped = [
            session.reply(f"Message {i}: tell me more.", settings).dropped_messages
            for i in range(8)
        ]
        assert dropped[0] == 0 and max(dropped) > 0
        assert session.messages[0].role == "system"
        assert len(session.messages) == 1 + 2 * 8  # the history itself is kept whole
    finally:
        model.close()


def test_reply_stops_when_the_context_window_is_full(make_synthetic) -> None:
    model = load(make_synthetic("llama", "F16"), n_ctx=256)
    try:
        reply = ChatSession(model).reply("Go on forever.", GREEDY.with_changes(max_tokens=1000))
        assert reply.finish_reason is FinishReason.CONTEXT
        assert reply.stats.prompt_tokens + reply.stats.generated_tokens == model.n_ctx == 256
    finally:
        model.close()


def test_a_message_longer_than_the_window_is_refused_and_the_session_goes_on(
    make_synthetic,
) -> None:
    model = load(make_synthetic("llama", "F16"), n_ctx=256)
    try:
        session = ChatSession(model)
        with pytest.raises(ContextOverflowError):
            session.reply("word " * 400, SHORT)
        assert session.messages == []
        assert session.reply("Hi", GREEDY.with_changes(max_tokens=4)).stats.generated_tokens > 0
    finally:
        model.close()


def test_loading_a_non_model_raises_model_file_error(tmp_path: Path) -> None:
    bogus = tmp_path / "bogus.gguf"
    bogus.write_text("nope")
    with pytest.raises(ModelFileError, match="not a GGUF file"):
        load(bogus)


def test_requested_parameters_reach_llama_cpp(default_model_file: Path) -> None:
    model = load_model(LoadParams(str(default_model_file), n_ctx=300, n_batch=64, n_threads=1))
    try:
        assert model.n_ctx == 512  # llama.cpp allocates whole multiples of 256 tokens
        assert model.llm.n_batch == 64
        assert model.llm.context_params.n_threads == 1
    finally:
        model.close()
