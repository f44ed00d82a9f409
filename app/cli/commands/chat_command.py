"""`shardchat chat`: one reply to a prompt, to piped input, or an interactive session.

The command drives the same engine worker the GUI uses: requests go on its
queue, events come back on a queue this thread reads. Ctrl-C while a reply
streams cancels that reply; at the prompt it ends the session. The interactive
session (app.cli.commands.terminal_chat) is saved in the window's chat history.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import queue
import sys
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

from app.cli.arguments.sampling_options import sampling_from
from app.cli.commands.lent_chat import run_lent_chat
from app.cli.commands.plan_command import load_profile_for_planning
from app.cli.commands.terminal_chat import TerminalChat, Vision, read_line, say
from app.engine_host.events import (
    FINAL_EVENTS,
    EngineEvent,
    ModelLoaded,
    PlacementFellBack,
    ReplyFinished,
    RequestFailed,
    TokenStreamed,
)
from app.engine_host.worker import EngineWorker
from app.model_lifecycle.load_planning import PlannedLoad, planned_load, with_vision
from app.paths import app_paths
from app.screen_text.units import speed_text
from app.stop_signals import on_ctrl_c
from app.stores.chat_store import ChatStore
from app.stores.model_library import projector_for
from engine.errors import BadInputError, ShardChatError
from engine.generation.sampling import SamplingSettings
from engine.generation.stats import GenerationStats
from engine.llama.device_buffers import llama_log_lines, parse_buffer_lines
from engine.llama.load_params import LoadParams
from engine.machine.hardware import probe_hardware
from engine.model.default_model import default_model_path
from engine.model.inventory import read_inventory
from engine.planning.execution import check_profile_is_this_machine
from engine.planning.machine_split import MachineSplit, describe_held, held_shares
from engine.planning.placement_choice import AUTO, CPU_ONLY, PlacementChoice
from engine.runtime.loaded_model import inspect_model


def run_chat(args: argparse.Namespace) -> int:
    if args.lent:
        if args.vram is not None or args.placement or args.cpu_only or args.gpu is not None:
            raise BadInputError("--lent places the model itself: leave out --vram and --placement")
        return run_lent_chat(args)
    choice = _placement(args)
    model_path = Path(args.model) if args.model else default_model_path()
    inspect_model(model_path)  # bad input fails here, before any thread starts
    try:
        settings = sampling_from(args, SamplingSettings())
        # a chat alone: no shared pool (load_planning.ContextShape)
        params = LoadParams(str(model_path), n_ctx=args.ctx, n_threads=args.threads, n_ctx_shared=0)
        if args.split:  # the child of `chat --lent`: the supervisor's split
            params = MachineSplit.from_json(args.split).load_params(params)
            native_stderr_to_log()
        load = PlannedLoad(params, None, None)
        if not args.split and (args.vram is not None or choice.is_manual or args.gpu is not None):
            load = _planned(args, model_path, choice)
        prompt = _prompt_from(args)
        if prompt is not None and args.resume is not None:
            raise BadInputError("--resume goes on with a conversation on a terminal, not a PROMPT")
        if prompt is None:  # only a conversation can be given images (/image)
            load = _with_projector(load, model_path, args.vram, choice)
    except ValueError as exc:
        raise BadInputError(str(exc)) from exc
    if args.threads:
        threads = {"n_threads": args.threads, "n_threads_batch": args.threads}
        load = replace(load, params=load.params.with_changes(**threads))
    with open_engine(args.show_thinking, args.think) as engine:
        # what llama.cpp allocated, read back for a split only
        collecting: contextlib.AbstractContextManager[list[str]] = (
            llama_log_lines() if args.split else contextlib.nullcontext([])
        )
        with collecting as lines:
            loaded = engine.call(
                engine.worker.load_model(
                    load.params, load.plan, load.profile, args.prompt_format, load
                )
            )
        if args.split and isinstance(loaded, ModelLoaded):
            _say_where_the_weights_are(MachineSplit.from_json(args.split), model_path, lines)
        if getattr(args, "verbose", False) and isinstance(loaded, ModelLoaded):
            print(f"prompt format: {loaded.prompt_format} ({loaded.prompt_format_reason})",
                  file=sys.stderr)  # fmt: skip
        if args.think is not None and isinstance(loaded, ModelLoaded):
            _note_missing_switch(loaded)
        if args.system:
            engine.call(engine.worker.start_conversation(args.system))
        if prompt is not None:
            _one_reply(engine, prompt, settings, show_stats=args.stats)
        else:
            _interactive(engine, args, settings, loaded)
    return 0


def _say_where_the_weights_are(split: MachineSplit, model_path: Path, lines: list[str]) -> None:
    """llama.cpp's own buffer lines for each lent device, against the split's account."""
    held = held_shares(split, read_inventory(str(model_path)), parse_buffer_lines(lines))
    if held:
        print(f"shardchat: {describe_held(held)}", file=sys.stderr, flush=True)


def native_stderr_to_log() -> None:
    """In `chat --lent`'s child: what native code prints on standard error (llama.cpp's
    RPC client aborting, with its file and line) goes to the log file, and the chat's own
    words still reach the terminal, in order with the replies. The supervisor says what
    happened in one line."""
    terminal = os.dup(2)
    with open(app_paths().log_file, "ab") as log_file:
        os.dup2(log_file.fileno(), 2)
    sys.stderr = open(terminal, "w", buffering=1, encoding="utf-8", errors="replace")  # noqa: SIM115


def _placement(args: argparse.Namespace) -> PlacementChoice:
    """--placement, or --cpu-only (the same as --placement cpu)."""
    choice = PlacementChoice.parse(args.placement) if args.placement else AUTO
    if args.cpu_only:
        if choice.is_manual and choice != CPU_ONLY:
            raise BadInputError(f"--cpu-only contradicts --placement {choice}")
        return CPU_ONLY
    return choice


def _planned(args: argparse.Namespace, model_path: Path, choice: PlacementChoice) -> PlannedLoad:
    """Plan this model on this machine's own stored profile under --vram (default: what
    other programs leave free) and the placement; CPU only needs no profile."""
    try:
        profile = load_profile_for_planning(None)
    except BadInputError:
        if choice != CPU_ONLY or args.vram is not None:
            raise
        profile = None  # CPU only, unprofiled: llama.cpp's defaults without a GPU device
    if profile is not None:
        check_profile_is_this_machine(profile, probe_hardware())
    return planned_load(
        str(model_path), args.ctx, profile, args.vram, None, choice, args.gpu, exact_budget=True
    )


def _with_projector(
    load: PlannedLoad, model_path: Path, budget: int | None, choice: PlacementChoice
) -> PlannedLoad:
    """The load with the model's vision projector planned in, where the library pairs one
    or one lies beside the model, so /image can give the conversation pictures."""
    mmproj = projector_for(model_path)
    if mmproj is None:
        return load
    inventory = read_inventory(str(model_path)) if load.profile is not None else None
    return with_vision(load, inventory, str(mmproj), budget, choice)


def _prompt_from(args: argparse.Namespace) -> str | None:
    """The prompt from the arguments, else from piped stdin; None means interactive."""
    if args.prompt:
        return _non_empty(" ".join(args.prompt))
    stdin = sys.stdin
    if stdin is not None and stdin.isatty():
        return None
    return _non_empty(stdin.read() if stdin is not None else "")


def _non_empty(prompt: str) -> str:
    if not prompt.strip():
        raise BadInputError("the prompt is empty; give PROMPT or pipe text to standard input")
    return prompt


def _note_missing_switch(loaded: ModelLoaded) -> None:
    if not loaded.thinking_switch:
        print(
            f"shardchat: {loaded.model_name or 'this model'}'s chat template has no think "
            "switch; --think/--no-think change nothing",
            file=sys.stderr,
        )


class _Engine:
    """The worker plus a queue of its events, read on this thread.

    A reasoning model's thinking is not the answer: it stays off stdout, and goes
    to stderr (dim on a terminal) only with --show-thinking."""

    def __init__(self, show_thinking: bool = False, thinking: bool | None = None) -> None:
        self.events: queue.Queue[EngineEvent] = queue.Queue()
        self.worker = EngineWorker(self.events.put).start()
        self.show_thinking = show_thinking
        self.thinking = thinking  # --think / --no-think, None: the template's default
        self._thinking_shown = False  # thinking printed, not yet ended by a newline

    def call(
        self, request_id: int, on_token: Callable[[str, str], None] | None = None
    ) -> EngineEvent:
        """Wait for the request's final event, printing streamed text and passing each
        piece (text, thinking) to `on_token`; Ctrl-C cancels the request."""
        with _ctrl_c_cancels(self.worker, request_id):
            while True:
                event = self.events.get()
                if isinstance(event, TokenStreamed):
                    self._show(event)
                    if on_token is not None:
                        on_token(event.text, event.thinking)
                elif isinstance(event, PlacementFellBack):
                    print(f"shardchat: {event.message}", file=sys.stderr)
                elif isinstance(event, FINAL_EVENTS) and event.request_id == request_id:
                    if self._thinking_shown:
                        self._end_thinking()
                    return _raise_if_failed(event)

    def _show(self, event: TokenStreamed) -> None:
        self._show_thinking(event.thinking)
        if event.text and self._thinking_shown:
            self._end_thinking()
        sys.stdout.write(event.text)
        sys.stdout.flush()

    def _show_thinking(self, thinking: str) -> None:
        if not (thinking and self.show_thinking):
            return
        dim = sys.stderr.isatty()
        sys.stderr.write(f"\033[2m{thinking}\033[0m" if dim else thinking)
        sys.stderr.flush()
        self._thinking_shown = True

    def _end_thinking(self) -> None:
        sys.stderr.write("\n")
        sys.stderr.flush()
        self._thinking_shown = False


def _ctrl_c_cancels(
    worker: EngineWorker, request_id: int
) -> contextlib.AbstractContextManager[None]:
    """While a request runs, Ctrl-C cancels it instead of raising KeyboardInterrupt.

    Why not catch the KeyboardInterrupt: it can land anywhere, in the middle of saving a
    reply to the chat history too; a handler only flips the request's cancel flag, and
    the reply ends as a cancelled one, with its text saved."""
    return on_ctrl_c(lambda _signum, _frame: worker.cancel(request_id))


def _raise_if_failed(event: EngineEvent) -> EngineEvent:
    if isinstance(event, RequestFailed):
        raise BadInputError(event.message) if event.bad_input else ShardChatError(event.message)
    return event


@contextlib.contextmanager
def open_engine(show_thinking: bool = False, thinking: bool | None = None) -> Iterator[_Engine]:
    """The engine worker, started, and shut down (its model freed) when the block ends."""
    engine = _Engine(show_thinking, thinking)
    try:
        yield engine
    finally:
        engine.worker.shutdown()


def _one_reply(engine: _Engine, text: str, settings: SamplingSettings, show_stats: bool) -> None:
    reply = engine.call(engine.worker.send_message(text, settings, thinking=engine.thinking))
    sys.stdout.write("\n")
    if show_stats and isinstance(reply, ReplyFinished):
        _print_stats(reply)


def _interactive(
    engine: _Engine, args: argparse.Namespace, settings: SamplingSettings, loaded: EngineEvent
) -> None:
    """The conversation, saved in the chat history the window shows (--resume: a saved one)."""
    vision = Vision(False, "")
    if isinstance(loaded, ModelLoaded):
        vision = Vision(loaded.vision is not None, loaded.model_name, loaded.vision_problem)
    with ChatStore() as store:
        if store.recovered_from is not None:
            say(f"shardchat: the chat history was unreadable; moved to {store.recovered_from}")
        chat = TerminalChat(
            engine, store, settings, args.system, vision, _print_stats, _noting(args)
        )
        if args.resume is not None:
            chat.resume(args.resume)
        chat.run(read_line)


def _noting(args: argparse.Namespace) -> Callable[[int], None] | None:
    """For `chat --lent`'s child: each conversation's id into the supervisor's file."""
    path = args.conversation_file
    if path is None:
        return None

    def note(conversation_id: int) -> None:
        Path(path).write_text(str(conversation_id), encoding="utf-8")

    return note


def _print_stats(reply: ReplyFinished) -> None:
    stats: GenerationStats = reply.stats
    parts = [
        f"{stats.time_to_first_token_s:.2f} s to first token",
        speed_text(stats.decode_tokens_per_s, "tokens/s"),
        f"{stats.generated_tokens} tokens ({stats.finish_reason.value})",
        f"context {reply.context_used}/{reply.context_window} tokens",
    ]
    if reply.dropped_messages:
        parts.append(f"{reply.dropped_messages} oldest messages left out to fit the context")
    print(f"[{', '.join(parts)}]", file=sys.stderr)
    for line in _step_summary(reply.steps):
        print(line, file=sys.stderr)


def _step_summary(steps: tuple) -> list[str]:
    """Per tier and family: llama_decode calls, predicted and measured mean milliseconds."""
    groups: dict[tuple[int, str], list] = {}
    for step in steps:
        groups.setdefault((step.tier, step.family.value), []).append(step)
    lines = []
    for (tier, family), group in sorted(groups.items()):
        predicted = sum(s.predicted_ms for s in group) / len(group)
        measured = sum(s.measured_ms for s in group) / len(group)
        lines.append(
            f"  tier {tier:>4} {family:9} {len(group):>4} steps: predicted {predicted:7.2f} ms, "
            f"measured {measured:7.2f} ms"
        )
    return lines
