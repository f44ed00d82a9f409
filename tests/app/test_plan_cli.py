"""`shardchat plan`: simulation on described machines, this machine's CPU plan, bad input."""

from __future__ import annotations

import importlib
import json
import random
import string
import sys
from collections import Counter
from pathlib import Path

import pytest
from cli_run import CliRun

from app.cli.commands.plan_command import load_profile_for_planning
from app.cli.main import main
from app.model_lifecycle.load_planning import stored_profile
from app.screen_text.units import parse_size
from engine.errors import BadInputError
from engine.machine.described_machines import described_names
from engine.model.default_model import default_model_path
from engine.model.synthetic import write_shape_only_model
from engine.model.synthetic_specs import LLAMA_3_8B_CTX_2K

BENCH = Path(__file__).resolve().parents[2] / "bench"


def test_plan_on_a_described_laptop_prints_every_tier_and_the_llama_parameters(
    shardchat: CliRun,
) -> None:
    done = shardchat(
        "plan", "--vram", "1GiB", "--hardware", "laptop-8gb", "--ctx", "2048", "--details"
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "RTX 4060 Laptop GPU (described)" in out and "n_gpu_layers" in out
    assert "flash_attn on" in out  # our plans choose it: exact, and the smaller buffers
    tier_rows = [line.split()[0] for line in out.splitlines() if line.strip()[:1].isdigit()]
    assert tier_rows == ["1", "4", "16", "64", "256", "1024"]
    assert out.index("How fast:") < out.index("In llama.cpp's terms:")  # the summary leads


LLAMA_WORDS = ("tier", "ubatch", "n_gpu_layers", "gpu_only", "buffer", "GGML_", "runner-up")


def test_the_plan_says_what_runs_where_and_how_fast_in_plain_words(
    dense_model: str, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["plan", "--hardware", "laptop-8gb", "--vram", "4GiB", "--model", dense_model]
    assert main(args) == 0  # in this process: the same command line, without a start-up
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[1].startswith("VRAM budget 4.0 GiB (the budget given)")
    assert lines[2].startswith("Where it runs: GPU: ") and " · CPU: " in lines[2]
    assert any(line.startswith("  Each new token: the CPU") for line in lines)
    speed = next(line for line in lines if line.startswith("How fast: "))
    assert "tokens/s while it writes a reply" in speed and "s to the first token" in speed
    assert lines[-1] == "(llama.cpp's parameters and the cost of each step size: --details)"
    assert not any(word in out for word in LLAMA_WORDS), out


def test_without_vram_the_plan_takes_the_described_machines_whole_gpu(
    capsys: pytest.CaptureFixture[str],
    recorded_profile_file,
) -> None:
    assert main(["plan", "--hardware", "laptop-8gb"]) == 0
    budget = "VRAM budget 8.0 GiB (all of the NVIDIA GeForce RTX 4060 Laptop GPU's; --vram sets"
    assert capsys.readouterr().out.splitlines()[1].startswith(budget)
    assert main(["plan", "--hardware", str(recorded_profile_file)]) == 0
    assert "VRAM budget 0 B (no GPU)" in capsys.readouterr().out


def test_plan_json_has_the_resident_set_and_fits_the_budget(shardchat: CliRun) -> None:
    done = shardchat("plan", "--vram", "300MiB", "--hardware", "rtx5090-desktop", "--json")
    plan = json.loads(done.stdout)
    assert plan["vram"]["budget_bytes"] == 300 << 20
    total = sum(plan["vram"][k] for k in ("weights_bytes", "kv_cache_bytes", "compute_bytes",
                                          "margin_bytes"))  # fmt: skip
    assert total <= 300 << 20
    assert plan["n_threads"] >= 1 and plan["tiers"][0]["tier"] == 1


def test_plan_with_a_recorded_profile_file_of_a_cpu_machine(
    shardchat: CliRun, recorded_profile_file
) -> None:
    done = shardchat("plan", "--vram", "0", "--hardware", str(recorded_profile_file), "--details")
    assert done.returncode == 0, done.stderr
    assert "CPU-only plan" in done.stdout and "cpu_only" in done.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--vram", "lots"), "not a size"),
        (("--vram=-2G",), "not a size"),
        (("--vram", "64G", "--hardware", "laptop-8gb"), "exceeds the GPU's memory"),
        (
            ("--hardware", "laptop-9gb"),
            "laptop-9gb: no described machine of that name and no "
            "such profile file; the described machines are laptop-8gb, desktop-16gb, rtx5090",
        ),
        (("--hardware", "README.md"), "not a readable profile"),
        (("--vram", "1G", "--hardware", "laptop-8gb", "--model", "README.md"), "not a GGUF"),
    ],
)
def test_bad_input_exits_2_with_one_line(
    args: tuple[str, ...], message: str, shardchat: CliRun
) -> None:
    done = shardchat("plan", *args)
    assert done.returncode == 2
    assert message in done.stderr and "Traceback" not in done.stderr


def test_plan_without_a_stored_profile_says_how_to_make_one(shardchat: CliRun) -> None:
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


@pytest.mark.serial  # it measures this machine: see the marker
def test_a_bench_measures_the_profile_it_needs_and_chat_runs_under_its_plan(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str], shardchat: CliRun
) -> None:
    """`make bench` on a fresh machine (no profile stored): bench/runtime_overhead.py's
    planned side measures this machine first (smoke here, to be quick) and stores it, and
    `shardchat chat --vram 0` then runs under a plan made from it."""
    monkeypatch.syspath_prepend(str(BENCH))
    runtime_overhead = importlib.import_module("runtime_overhead")
    params = runtime_overhead.planned_params(str(default_model_path()), "smoke")
    assert "no profile is stored for this machine: measuring a smoke one" in capfd.readouterr().err
    assert params.n_gpu_layers == 0  # this machine has no GPU
    assert stored_profile() is not None  # stored, as `shardchat profile` stores it
    done = shardchat("chat", "--vram", "0", "--temperature", "0", "--max-tokens", "8", "--stats",
                     "Say hello")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip()
    steps = [line for line in done.stderr.splitlines() if line.strip().startswith("tier")]
    assert any(line.split()[1:3] == ["1", "cpu_only"] for line in steps)
    assert all("predicted" in line and "measured" in line for line in steps)


def test_chat_with_a_bad_vram_size_exits_2(shardchat: CliRun) -> None:
    done = shardchat("chat", "--vram", "plenty", "hi")
    assert done.returncode == 2 and "not a size" in done.stderr


# --- placement by hand (issue 13) ---


@pytest.fixture(scope="module")
def dense_model(tmp_path_factory) -> str:
    folder = tmp_path_factory.mktemp("shape-only")
    return str(write_shape_only_model(folder / "dense.gguf", LLAMA_3_8B_CTX_2K, "Q4_0"))


def _row(out: str, label: str) -> list[str]:
    line = next(line for line in out.splitlines() if line.startswith(label))
    return line[len(label) :].split()


def test_a_manual_placement_is_shown_beside_the_planners_choice(
    dense_model: str, shardchat: CliRun
) -> None:
    args = ("plan", "--hardware", "laptop-8gb", "--vram", "4GiB", "--model", dense_model)
    done = shardchat(*args, "--placement", "layers:8", "--details")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "manual placement layers:8: n_gpu_layers=8 of 33" in out
    assert "llama.cpp n_gpu_layers 8," in out  # what llama.cpp is given, output layer included
    assert "flash_attn off" in out  # a whole-layer placement runs as llama.cpp's own would
    header = next(line for line in out.splitlines() if "planner" in line and "layers:8" in line)
    assert header.split() == ["planner", "layers:8", "ratio"]
    auto = json.loads(shardchat(*args, "--json").stdout)
    manual = json.loads(shardchat(*args, "--placement", "layers:8", "--json").stdout)
    assert manual["planner"]["predicted_decode_tokens_per_s"] == pytest.approx(
        auto["predicted_decode_tokens_per_s"]
    )
    ours, theirs, ratio = _row(out, "decode tokens/s")
    assert float(ours) == pytest.approx(auto["predicted_decode_tokens_per_s"], abs=0.05)
    assert float(theirs) == pytest.approx(manual["predicted_decode_tokens_per_s"], abs=0.05)
    assert float(ratio.rstrip("x")) == pytest.approx(float(theirs) / float(ours), abs=0.01)
    ttft = _row(out, "TTFT s")
    assert float(ttft[-3]) == pytest.approx(auto["predicted_ttft_s"], abs=0.005)
    assert float(ttft[-2]) == pytest.approx(manual["predicted_ttft_s"], abs=0.005)
    assert len(_row(out, "VRAM account")) == 5  # two sizes with units, and the ratio
    resident = _row(out, "resident sub-layers")
    assert resident[0] == str(len(auto["resident"])) and resident[3] == "16"  # 8 layers
    assert manual["extras"]["placement"] == "layers:8"


def test_cpu_only_plans_nothing_in_vram(dense_model: str, shardchat: CliRun) -> None:
    done = shardchat("plan", "--hardware", "laptop-8gb", "--vram", "4GiB", "--model",
                     dense_model, "--placement", "cpu", "--json")  # fmt: skip
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    assert plan["resident"] == [] and plan["extras"]["main_gpu"] == -1
    assert {t["chosen"]["family"] for t in plan["tiers"]} == {"cpu_only"}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--placement", "layers"), "needs a count"),
        (("--placement", "layers:x"), "needs a count"),
        (("--placement", "gpu"), "is not one of auto, cpu"),
        (("--placement", "layers:30"), "placement layers:30 needs"),
        (("--placement", "cpu-moe:2"), "not a mixture-of-experts"),
        (("--gpu", "1"), "only GPU 0 is valid"),
        (("--gpu", "-1"), "only GPU 0 is valid"),
    ],
)
def test_bad_placements_and_gpus_exit_2_with_one_line(
    dense_model: str, args: tuple[str, ...], message: str, shardchat: CliRun
) -> None:
    done = shardchat("plan", "--hardware", "laptop-8gb", "--vram", "4GiB", "--model",
                     dense_model, *args)  # fmt: skip
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("shardchat: error:"), done.stderr
    assert message in lines[0]


def test_gpu_0_is_the_default_gpu(dense_model: str, shardchat: CliRun) -> None:
    args = ("plan", "--hardware", "laptop-8gb", "--vram", "4GiB", "--model", dense_model, "--json")
    assert json.loads(shardchat(*args).stdout) == json.loads(shardchat(*args, "--gpu", "0").stdout)


def mistyped_machine_names(seed: int = 28) -> list[str]:
    """Each described machine's name with one letter dropped, doubled, swapped or changed,
    in other cases, with spaces, as paths; seeded, so a failure can be replayed."""
    rng = random.Random(seed)
    names: list[str] = []
    for name in described_names():
        for i in range(len(name) - 1):
            names += [name[:i] + name[i + 1 :], name[:i] + name[i] * 2 + name[i + 1 :]]
            names.append(name[:i] + name[i + 1] + name[i] + name[i + 2 :])
            names.append(name[:i] + rng.choice(string.ascii_lowercase) + name[i + 1 :])
        names += [name.upper(), f" {name}", f"{name} ", f"{name}.json", f"./{name}"]
    return [n for n in dict.fromkeys(names) if n not in described_names()] + ["", ".", "/"]


def test_mistyped_machine_names_are_refused_with_the_known_names() -> None:
    outcomes: Counter[str] = Counter()
    for name in mistyped_machine_names():
        with pytest.raises(BadInputError) as refused:
            load_profile_for_planning(name)
        listed = "laptop-8gb, desktop-16gb, rtx5090-desktop" in str(refused.value)
        outcomes["names listed" if listed else str(refused.value)] += 1
    print(f"{sum(outcomes.values())} mistyped names refused: {dict(outcomes)}", file=sys.stderr)
    assert outcomes["names listed"] >= 150
    others = ("not a readable profile", "no profile is stored")  # ".", "/"; "" is this machine
    assert all(k == "names listed" or any(o in k for o in others) for k in outcomes), outcomes
