"""`shardchat chat --lent`: a chat whose model is split onto lent computers, supervised.

llama.cpp's RPC client aborts the process that uses a lent computer when that
computer dies mid-call. So the chat runs as a child `shardchat chat` (the same
arguments, with the split) on this terminal, and this process only watches it. When
the child dies of a signal, every lent computer it used is probed: the ones gone are
named; a one-off reply ends there (exit 1); an interactive chat is saved as it goes,
so it goes on in a new child without them, on the same conversation.

The split is the planner's (engine.planning.split_costing): over this machine (what
`--here` holds) and the lent computers that answer now, in the order they were added,
the contiguous split predicted fastest from this machine's profile and each lent
computer's link and speed as `devices add` measured them, or this machine alone when
that is predicted faster and the model fits. Without a profile of this machine, or for a
lent computer added before its speed was measured, it is the plain memory fill
(engine.planning.machine_split): this machine's share first, the rest in order.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from app.lent.computers import ReachedComputer, reached_computers
from app.lent.split import choose_split, default_here_budget
from app.machine_profile import this_machine_profile
from app.stop_signals import on_ctrl_c, on_signal
from engine.errors import BadInputError, ShardChatError
from engine.model.default_model import default_model_path
from engine.model.inventory import ModelInventory, read_inventory
from engine.planning.machine_split import MachineSplit
from engine.remote.rpc_probe import RemoteError, probe
from engine.runtime.loaded_model import inspect_model

EXIT_TERMINATED = 128 + signal.SIGTERM
_SUPERVISOR_ONLY = {"--lent": 0, "--here": 1, "--resume": 1}  # option: values it takes


def run_lent_chat(args: argparse.Namespace) -> int:
    model_path = Path(args.model) if args.model else default_model_path()
    inspect_model(model_path)  # bad input fails here, before anything is probed
    inventory = read_inventory(model_path)
    here = args.here if args.here is not None else default_here_budget()
    interactive = not args.prompt and sys.stdin.isatty()
    left_out: set[str] = set()
    resume: int | None = args.resume
    with tempfile.TemporaryDirectory(prefix="shardchat-lent-") as folder:
        noted = Path(folder) / "conversation"
        while True:
            with reached_computers(_say) as reached:
                using = [computer for computer in reached if computer.address not in left_out]
                split = _split(inventory, args.ctx, here, using, resume if left_out else None)
                code = _run_child(_child_argv(args.argv, split.to_json(), noted, resume))
                if code >= 0:
                    return code
                gone = [computer for computer in using if not _answers(computer)]
            if not gone:
                raise ShardChatError(f"the chat's engine process died ({_signal_name(code)})")
            names = ", ".join(computer.address for computer in gone)
            if not interactive:
                raise ShardChatError(
                    f"the lent computer {names} stopped answering mid-reply; the reply ended there"
                )
            _say(
                f"the lent computer {names} stopped answering mid-reply: the conversation is "
                "kept, and goes on without it"
            )
            left_out |= {computer.address for computer in gone}
            resume = _noted_conversation(noted, resume)


def _split(
    inventory: ModelInventory,
    n_ctx: int,
    here: int,
    using: list[ReachedComputer],
    kept: int | None,
) -> MachineSplit:
    """The split over what answers now, said on stderr; `kept`: the conversation to name
    when, after a lent computer died, the rest cannot hold the model."""
    try:
        chosen = choose_split(inventory, n_ctx, here, using, this_machine_profile())
    except BadInputError as exc:
        if kept is None:
            raise
        raise BadInputError(
            f"{exc}; the conversation is saved: go on with it with shardchat chat --resume {kept}"
        ) from None
    _say(chosen.said)
    return chosen.split


def _child_argv(argv: list[str], split: str, noted: Path, resume: int | None) -> list[str]:
    """The chat's own arguments, less the supervisor's, with the split and where to note
    the conversation; `resume`: the conversation to go on with."""
    kept: list[str] = []
    skip = 0
    for arg in argv:
        if skip:
            skip -= 1
            continue
        name = arg.split("=", 1)[0]
        if name in _SUPERVISOR_ONLY:
            skip = _SUPERVISOR_ONLY[name] if "=" not in arg else 0
            continue
        kept.append(arg)
    extra = ["--split", split, "--conversation-file", str(noted)]
    if resume is not None:
        extra += ["--resume", str(resume)]
    at = kept.index("chat") + 1  # the chat's own options follow it (global ones precede it)
    return [sys.executable, "-m", "app.cli.main", *kept[:at], *extra, *kept[at:]]


def _run_child(command: list[str]) -> int:
    """The child's exit code (negative: the signal it died of). Ctrl-C is the child's own:
    it stops its reply, so this process lets it through. SIGTERM stops the child too, and
    this process then exits as a terminated one would (143), since nothing failed."""
    terminated = False
    with on_ctrl_c(signal.SIG_IGN):
        child = subprocess.Popen(command)

        def stop(_number: int, _frame: object) -> None:
            nonlocal terminated
            terminated = True
            child.terminate()

        with on_signal(signal.SIGTERM, stop):
            code = child.wait()
    return EXIT_TERMINATED if terminated else code


def _answers(computer: ReachedComputer) -> bool:
    host, _colon, port = computer.endpoint.rpartition(":")
    try:
        probe(host, int(port), connect_timeout_s=2.0, reply_timeout_s=2.0)
    except RemoteError:
        return False
    return True


def _noted_conversation(noted: Path, before: int | None) -> int | None:
    try:
        return int(noted.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return before  # no message was sent yet: nothing to go on with


def _signal_name(code: int) -> str:
    try:
        return f"signal {signal.Signals(-code).name}"
    except ValueError:
        return f"signal {-code}"


def _say(line: str) -> None:
    print(f"shardchat: {line}", file=sys.stderr, flush=True)
