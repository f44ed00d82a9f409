"""`shardchat chat --lent`: a chat whose model is split onto two lent computers (two real RPC
servers of this build on loopback, each given a small budget), supervised so that a lent
computer dying mid-reply ends that reply with one line, not the chat."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import psutil
import pytest

from app.stores.profile_store import ProfileStore
from engine.machine.hardware import llama_build_id
from tests.app.pty_terminal import Terminal
from tests.lent_computers import STORY, here_budget, kill_server, port

ROOT = Path(__file__).resolve().parents[2]


def chat(*args: str) -> list[str]:
    return [sys.executable, "-m", "app.cli.main", "chat", "--temperature", "0", *args]


def test_a_chat_across_two_lent_computers_answers_as_this_machine_alone(
    shardchat, two_lent, default_model_file
) -> None:
    here = here_budget(default_model_file)
    across = subprocess.run(
        chat("--lent", "--here", here, "--max-tokens", "32", STORY),
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert across.returncode == 0, across.stderr
    port_a, port_b = (port(address) for address in two_lent)
    assert f"split: blocks 0-9 here, 10-19 on 127.0.0.1:{port_a}, 20-29 on 127.0.0.1:{port_b}" in (
        across.stderr
    )
    # llama.cpp's buffer lines for each lent computer, read back against the split's account
    assert "shardchat: weights on the lent computers as planned: 127.0.0.1:" in across.stderr
    alone = shardchat("chat", "--temperature", "0", "--max-tokens", "32", STORY)
    assert alone.returncode == 0 and across.stdout.strip() == alone.stdout.strip() != ""


@pytest.fixture
def profiled_here(recorded_profile_here) -> None:
    """The recorded profile stored as this machine's own, under this llama.cpp build."""
    with ProfileStore() as store:
        store.save(replace(recorded_profile_here, llama_build=llama_build_id()))


def test_with_a_profile_here_the_split_is_the_planners_and_says_its_prediction(
    shardchat, two_lent, default_model_file, profiled_here
) -> None:
    across = subprocess.run(
        chat("--lent", "--here", here_budget(default_model_file), "--max-tokens", "8", STORY),
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert across.returncode == 0, across.stderr
    said = next(line for line in across.stderr.splitlines() if "split:" in line)
    # predicted from this machine's profile and each lent computer's measured speed and link
    assert re.search(
        r"split: [\d.]+ tok/s split \((blocks 0-\d+|no blocks) here, .* on 127\.0\.0\.1:", said
    )
    assert "does not fit this computer alone" in said and "ms a token" in said
    alone = shardchat("chat", "--temperature", "0", "--max-tokens", "8", STORY)
    assert alone.returncode == 0 and across.stdout.strip() == alone.stdout.strip() != ""


def test_plan_shows_the_split_chat_would_run_without_contacting_anyone(
    shardchat, two_lent, default_model_file, profiled_here
) -> None:
    here = here_budget(default_model_file)
    for address in two_lent:
        kill_server(address)  # planned from the stored figures: nothing is asked of them
    shown = shardchat("plan", "--lent", "--here", here)
    assert shown.returncode == 0, shown.stderr
    said = shown.stdout.splitlines()[-1]
    assert said.startswith("With lent computers: split: ") and " tok/s split (" in said
    assert "does not fit this computer alone" in said and "tcp://127.0.0.1:" in said
    planned = json.loads(shardchat("plan", "--lent", "--here", here, "--json").stdout)["lent"]
    assert planned["chosen"] and planned["alone_tokens_per_s"] is None
    assert planned["predicted_decode_tokens_per_s"] > 0 and planned["link_s"] > 0
    assert sum(share["blocks"] for share in planned["split"]["shares"]) > 0
    # a budget here that holds the model: this computer alone, or a faster split, said so
    roomy = shardchat("plan", "--lent", "--here", "4GiB").stdout.splitlines()[-1]
    assert " tok/s alone" in roomy


def test_plan_with_lent_computers_refuses_another_machines_profile(shardchat) -> None:
    run = shardchat("plan", "--lent", "--hardware", "desktop-16gb")
    assert run.returncode == 2 and "measured against it" in run.stderr
    assert shardchat("plan", "--here", "1GiB").returncode == 2


def replying_across(default_model_file) -> subprocess.Popen[bytes]:
    """A long one-off `chat --lent` reply across the two lent computers, once it has begun."""
    here = here_budget(default_model_file)
    chatting = subprocess.Popen(
        chat("--lent", "--here", here, "--max-tokens", "800", STORY),
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    assert chatting.stdout is not None
    assert chatting.stdout.read(1)  # the reply has begun
    return chatting


def test_a_lent_computer_dying_mid_reply_ends_the_reply_with_one_line(
    two_lent, default_model_file
) -> None:
    child = replying_across(default_model_file)
    kill_server(two_lent[1])
    _out, err = child.communicate(timeout=120)
    said = err.decode().strip().splitlines()
    assert child.returncode == 1
    assert said[-1] == (
        f"shardchat: error: the lent computer {two_lent[1]} stopped answering mid-reply; "
        "the reply ended there"
    )
    assert "ggml-rpc.cpp" not in err.decode() and "Traceback" not in err.decode()


def test_sigterm_stops_the_supervised_chat_and_its_child(two_lent, default_model_file) -> None:
    supervisor = replying_across(default_model_file)  # the reply comes from its child
    (child,) = psutil.Process(supervisor.pid).children()
    supervisor.terminate()
    _out, err = supervisor.communicate(timeout=60)
    assert supervisor.returncode == 143 and "error" not in err.decode()
    assert not child.is_running() or child.status() == psutil.STATUS_ZOMBIE


def test_an_interactive_chat_goes_on_without_the_computer_that_died(
    two_lent, default_model_file
) -> None:
    here = here_budget(default_model_file)
    args = ("chat", "--temperature", "0", "--max-tokens", "800", "--lent", "--here", here)
    with Terminal(*args) as term:
        term.expect("> ")
        term.type(STORY + "\n")
        term.expect("Once")  # the reply has begun
        kill_server(two_lent[0])
        term.expect(f"the lent computer {two_lent[0]} stopped answering mid-reply")
        term.expect(f"split: blocks 0-9 here, 10-29 on 127.0.0.1:{port(two_lent[1])}")
        term.expect("(continuing")  # the same conversation, in a new engine process
        term.expect("> ")
        term.type("Say the word yes.\n")
        term.expect("tokens/s")  # the next message is answered
        term.expect("> ")
        term.type("/exit\n")
        assert term.exit_code() == 0


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("--lent", "--vram", "1GiB", "hi"), "--lent places the model itself"),
        (
            ("--lent", "--here", "1MiB", "hi"),
            "needs 0.18 GiB with a 4096-token context; this machine and the lent computers",
        ),
        (("--resume", "3", "hi"), "--resume goes on with a conversation on a terminal"),
    ],
)
def test_what_a_lent_chat_cannot_do_is_one_line_and_exit_2(
    shardchat, args: tuple[str, ...], said: str
) -> None:
    run = shardchat("chat", *args)
    assert run.returncode == 2 and said in run.stderr and len(run.stderr.splitlines()) == 1
