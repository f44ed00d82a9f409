"""The `shardchat` command line: `main` in this process (the `shardchat` fixture), and the
console script as a separate process where only a process shows it (its exit, what reaches
the terminal from the first line on)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from cli_run import CliRun

SHARDCHAT = str(Path(sys.executable).parent / "shardchat")


def shardchat_process(
    *args: str, stdin: str | None = "", timeout: float = 120
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [SHARDCHAT, *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=os.environ.copy(),
    )


def assert_one_line_error(done: subprocess.CompletedProcess, code: int = 2) -> str:
    assert done.returncode == code, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert lines[0].startswith("shardchat: error:")
    return lines[0]


def test_version() -> None:
    done = shardchat_process("--version")
    assert done.returncode == 0
    assert done.stdout.strip().startswith("shardchat 0.")


def test_chat_with_a_prompt_prints_a_reply_and_keeps_llama_logs_in_the_log_file(
    isolated_home: Path,
) -> None:
    done = shardchat_process("chat", "--temperature", "0", "--max-tokens", "24", "Say hello")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip()
    assert "llama_model_loader" not in done.stderr + done.stdout
    log_text = (isolated_home / "logs" / "shardchat.log").read_text()
    assert "llama_model_loader: loaded meta data" in log_text


def test_chat_reads_a_piped_prompt_and_prints_stats_on_request(shardchat: CliRun) -> None:
    done = shardchat("chat", "--temperature", "0", "--max-tokens", "8", "--stats", stdin="Hi!")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip()
    assert "tokens/s" in done.stderr and "to first token" in done.stderr
    used, window = map(int, re.search(r"context (\d+)/(\d+) tokens", done.stderr).groups())
    assert 8 < used < window == 4096


def test_sampling_flags_reach_the_reply_and_bad_ones_are_refused_in_one_line(
    shardchat: CliRun,
) -> None:
    args = ("chat", "--temperature", "0", "--max-tokens", "40", "List the days of the week.")
    plain = shardchat(*args, "--repeat-penalty", "1")
    penalised = shardchat(*args, "--repeat-penalty", "1.6", "--dry-multiplier", "1.5")
    assert plain.returncode == penalised.returncode == 0, plain.stderr + penalised.stderr
    assert plain.stdout.strip() and penalised.stdout.strip() != plain.stdout.strip()
    stopped = shardchat(*args, "--repeat-penalty", "1", "--stop", "Wednesday")
    assert "Tuesday" in stopped.stdout and "Wednesday" not in stopped.stdout
    for bad in (("--top-p", "0"), ("--repeat-penalty", "0"), ("--dry-base", "0.5")):
        refused = shardchat("chat", *bad, "Hi")
        assert refused.returncode == 2 and bad[0][2:].replace("-", "_") in refused.stderr
        assert "Traceback" not in refused.stderr and len(refused.stderr.strip().splitlines()) == 1


def test_greedy_cli_replies_are_reproducible(shardchat: CliRun) -> None:
    args = ("chat", "--temperature", "0", "--max-tokens", "16", "Name a fruit.")
    assert shardchat(*args).stdout == shardchat(*args).stdout


def test_verbose_shows_llama_cpp_log_on_stderr(shardchat: CliRun) -> None:
    done = shardchat("--verbose", "chat", "--max-tokens", "2", "Hi")
    assert done.returncode == 0
    assert "llama_model_loader" in done.stderr


def test_info_prints_the_sublayer_table_of_the_default_model(shardchat: CliRun) -> None:
    done = shardchat("info", "default")
    assert done.returncode == 0, done.stderr
    assert "architecture   llama (dense)" in done.stdout
    assert "name           Smollm2 135M 8k Lc100K Mix1 Ep2" in done.stdout
    assert "shown as       SmolLM2 135M Instruct · Q4_1" in done.stdout
    assert "attention" in done.stdout and "dense_ffn" in done.stdout
    block_rows = [line for line in done.stdout.splitlines() if line.strip().startswith("29 ")]
    assert len(block_rows) == 1
    assert "output_head" in done.stdout and "(tied)" in done.stdout


def test_info_on_a_moe_model_shows_router_and_experts(make_synthetic, shardchat: CliRun) -> None:
    done = shardchat("info", str(make_synthetic("qwen3moe", "F16")))
    assert done.returncode == 0, done.stderr
    assert "qwen3moe (MoE)" in done.stdout
    assert "moe_router" in done.stdout and "routed_experts" in done.stdout
    assert "4 routed (2 used per token)" in done.stdout


def test_info_json_is_the_inventory(make_synthetic, shardchat: CliRun) -> None:
    done = shardchat("info", "--json", str(make_synthetic("gemma3", "F16")))
    data = json.loads(done.stdout)
    assert data["architecture"] == "gemma3"
    assert data["readable_name"].startswith("Synthetic Gemma3 ") and data["readable_name"].endswith(
        " · F16"
    )
    assert data["blocks"][0]["sublayers"][0]["kind"] == "attention"
    assert data["kv_bytes_per_token"] > 0


def bad_files(tmp_path: Path, default_model_file: Path) -> dict[str, Path]:
    empty = tmp_path / "empty.gguf"
    empty.write_bytes(b"")
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(default_model_file.read_bytes()[:100_000])
    return {
        "readme": Path(__file__).resolve().parents[2] / "README.md",
        "missing": tmp_path / "missing.gguf",
        "directory": tmp_path,
        "empty": empty,
        "truncated": cut,
    }


@pytest.mark.parametrize("case", ["readme", "missing", "directory", "empty", "truncated"])
@pytest.mark.parametrize("command", ["info", "chat"])
def test_bad_model_files_exit_2_with_one_line(
    case: str, command: str, tmp_path: Path, default_model_file: Path, shardchat: CliRun
) -> None:
    path = bad_files(tmp_path, default_model_file)[case]
    args = ("info", str(path)) if command == "info" else ("chat", "--model", str(path), "hi")
    line = assert_one_line_error(shardchat(*args))
    assert str(path) in line


@pytest.mark.parametrize(
    "args",
    [
        ("chat", "--max-tokens", "0", "hi"),
        ("chat", "--temperature", "-1", "hi"),
        ("chat", "--top-p", "abc", "hi"),
        ("info",),
        ("frobnicate",),
    ],
)
def test_bad_arguments_exit_2_without_traceback(args: tuple[str, ...], shardchat: CliRun) -> None:
    done = shardchat(*args)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr


def test_an_empty_piped_prompt_is_bad_input(shardchat: CliRun) -> None:
    line = assert_one_line_error(shardchat("chat", stdin="   \n"))
    assert "prompt is empty" in line


def test_a_prompt_longer_than_the_context_is_bad_input(shardchat: CliRun) -> None:
    line = assert_one_line_error(shardchat("chat", "--ctx", "256", stdin="word " * 2000))
    assert "too long for the context window" in line


def test_a_context_below_llama_cpp_minimum_is_bad_input(shardchat: CliRun) -> None:
    line = assert_one_line_error(shardchat("chat", "--ctx", "8", "hi"))
    assert "n_ctx" in line


# --- placement by hand (issue 13) ---


def test_chat_cpu_only_needs_no_profile_and_loads_without_any_gpu(
    isolated_home: Path, shardchat: CliRun
) -> None:
    done = shardchat("chat", "--cpu-only", "--temperature", "0", "--max-tokens", "4", "Hi")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip()
    log_text = (isolated_home / "logs" / "shardchat.log").read_text()
    loaded = next(
        line for line in log_text.splitlines() if "engine.runtime.loaded_model: loaded" in line
    )
    assert "main_gpu=-1" in loaded and "op_offload=False" in loaded and "n_gpu_layers=0" in loaded


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--placement", "lots"), "is not one of auto, cpu"),
        (("--placement", "cpu-moe:"), "needs a count"),
        (("--cpu-only", "--placement", "layers:4"), "--cpu-only contradicts"),
        (("--placement", "layers:4"), "shardchat profile --fast"),  # no profile stored
    ],
)
def test_chat_placements_that_cannot_run_are_bad_input(
    args: tuple[str, ...], message: str, shardchat: CliRun
) -> None:
    line = assert_one_line_error(shardchat("chat", *args, "hi"))
    assert message in line
