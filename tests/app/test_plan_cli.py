"""`shardchat plan`: simulation on described machines, this machine's CPU plan, bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from app.units import parse_size

SHARDCHAT = str(Path(sys.executable).parent / "shardchat")
RECORDED = Path(__file__).resolve().parents[1] / "data" / "profile-epyc-2core-fast.json"


def shardchat(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [SHARDCHAT, *args], capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL
    )


def test_plan_on_a_described_laptop_prints_every_tier_and_the_llama_parameters() -> None:
    done = shardchat("plan", "--vram", "1GiB", "--hardware", "laptop-8gb", "--ctx", "2048")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "RTX 4060 Laptop GPU (described)" in out and "n_gpu_layers" in out
    tier_rows = [line.split()[0] for line in out.splitlines() if line.strip()[:1].isdigit()]
    assert tier_rows == ["1", "4", "16", "64", "256", "1024"]
    assert "tokens/s decode" in out


def test_plan_json_has_the_resident_set_and_fits_the_budget() -> None:
    done = shardchat("plan", "--vram", "300MiB", "--hardware", "rtx5090-desktop", "--json")
    plan = json.loads(done.stdout)
    assert plan["vram"]["budget_bytes"] == 300 << 20
    total = sum(plan["vram"][k] for k in ("weights_bytes", "kv_cache_bytes", "compute_bytes",
                                          "margin_bytes"))  # fmt: skip
    assert total <= 300 << 20
    assert plan["n_threads"] >= 1 and plan["tiers"][0]["tier"] == 1


def test_plan_with_a_recorded_profile_file_of_a_cpu_machine() -> None:
    done = shardchat("plan", "--vram", "0", "--hardware", str(RECORDED))
    assert done.returncode == 0, done.stderr
    assert "CPU-only plan" in done.stdout and "cpu_only" in done.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--vram", "lots"), "not a size"),
        (("--vram=-2G",), "not a size"),
        (("--vram", "64G", "--hardware", "laptop-8gb"), "exceeds the GPU's memory"),
        (("--vram", "1G", "--hardware", "no-such-machine"), "not a readable profile"),
        (("--vram", "1G", "--hardware", "laptop-8gb", "--model", "README.md"), "not a GGUF"),
    ],
)
def test_bad_input_exits_2_with_one_line(args: tuple[str, ...], message: str) -> None:
    done = shardchat("plan", *args)
    assert done.returncode == 2
    assert message in done.stderr and "Traceback" not in done.stderr


def test_plan_without_a_stored_profile_says_how_to_make_one() -> None:
    done = shardchat("plan", "--vram", "0")
    assert done.returncode == 2
    assert "shardchat profile --fast" in done.stderr


@pytest.mark.parametrize(
    ("text", "size"),
    [("0", 0), ("6GiB", 6 << 30), ("6G", 6 << 30), ("6 GB", 6 << 30), ("512M", 512 << 20),
     ("1.5g", 3 << 29), ("100", 100)],
)  # fmt: skip
def test_sizes(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "-1G", "6 apples", "G", "1.2.3G"])
def test_bad_sizes(text: str) -> None:
    with pytest.raises(ValueError, match="not a size"):
        parse_size(text)


def test_chat_under_a_plan_reports_predicted_and_measured_steps() -> None:
    assert shardchat("profile", "--smoke").returncode == 0
    done = shardchat("chat", "--vram", "0", "--temperature", "0", "--max-tokens", "8", "--stats",
                     "Say hello")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip()
    steps = [line for line in done.stderr.splitlines() if line.strip().startswith("tier")]
    assert any(line.split()[1:3] == ["1", "cpu_only"] for line in steps)
    assert all("predicted" in line and "measured" in line for line in steps)


def test_chat_with_a_bad_vram_size_exits_2() -> None:
    done = shardchat("chat", "--vram", "plenty", "hi")
    assert done.returncode == 2 and "not a size" in done.stderr
