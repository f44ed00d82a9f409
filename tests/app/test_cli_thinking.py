"""`shardchat chat` and a reasoning model's thinking: off stdout, on stderr when asked."""

from __future__ import annotations

from cli_run import CliRun

from engine.model.chat_template import CHATML_TEMPLATE

# ChatML whose generation prompt opens the thinking, as DeepSeek-R1 distills' does
OPENS_THINKING_TEMPLATE = CHATML_TEMPLATE.replace(
    "{{ '<|im_start|>assistant\n' }}", "{{ '<|im_start|>assistant\n<think>\n' }}"
)


def test_show_thinking_puts_the_thinking_on_stderr_and_never_on_stdout(
    make_synthetic, shardchat: CliRun
) -> None:
    model = str(make_synthetic("llama", "F16", chat_template=OPENS_THINKING_TEMPLATE))
    args = ("chat", "--model", model, "--temperature", "0", "--max-tokens", "12", "Hi")
    hidden = shardchat(*args)
    shown = shardchat(*args, "--show-thinking")
    assert hidden.returncode == 0 and shown.returncode == 0, shown.stderr
    # a reply cut short inside its opened thinking has no answer at all
    assert hidden.stdout.strip() == "" and shown.stdout.strip() == ""
    assert shown.stderr.startswith(hidden.stderr)
    thinking = shown.stderr[len(hidden.stderr) :]
    assert len(thinking.strip()) > 5 and "\033[" not in thinking  # not dimmed into a pipe


def test_think_switch_on_a_template_without_one_is_said_once(shardchat: CliRun) -> None:
    done = shardchat("chat", "--no-think", "--max-tokens", "4", "--temperature", "0", "Hi")
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("no think switch") == 1
    assert done.stdout.strip()
