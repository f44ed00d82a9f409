"""Each server's steps and the time between them, side by side in one run (issue 48).

bench/api_throughput.py says how fast each server answers; this says where the
difference is: in llama.cpp's step (the same kernels, the same batches) or in what
each server does between two steps. It runs api_throughput's interleaved level
(both servers up at once, taking blocks of questions in turn) while perf counts,
through uprobes, every entry to and return from the function each server decodes
with: llama_decode in ShardChat's llama-cpp-python library, llama_process (the
batch API its server uses) in llama-server's build. Uprobes see every call, with
its thread; no sampling, and nothing changed in either server.

Per server it prints, over the timed blocks and the warm-up alike:

- steps: the decode calls, and the median and total milliseconds inside them;
- decoding steps: the median of the steps that carry no new prompt (at one
  client, a step that decodes a single token): the step under the whole app
  against the same step in the peer;
- between steps: the median and mean time from one step's return to the next
  step's entry while a reply is under way (gaps over 5 ms are the server waiting
  for a request, not working);
- per generated token (the JSON's completion tokens; the warm-up's steps are
  counted, its few tokens not): the time inside steps and between them;
- micro-batches: the llama_ubatch each step was split into, counted by a probe on
  llama.cpp's process_ubatch that reads each one's tokens and sequence sets. With a
  KV stream per sequence llama.cpp splits a step "equally": a micro-batch takes
  the same number of tokens from each of a run of consecutive sequence ids, so one
  prompt's chunk beside other sequences' single tokens, or a gap in the ids, is a
  micro-batch more, and each one reads the weights again.

Needs perf, nm and the right to add uprobes (root), on x86-64 or arm64. The probes are
removed on leaving.

    .venv/bin/python bench/decode_gaps.py [--level 1] [--rounds 1]

Figures, with what they show: docs/measurements.md, "Between two steps" and
"Micro-batches at 16 clients".
"""

from __future__ import annotations

import argparse
import collections
import json
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import llama_cpp

ROOT = Path(__file__).resolve().parent.parent
GROUP = "shardchat_gaps"
BUSY_GAP_S = 0.005  # longer between two steps: the server waited for a request
# (server as the table names it, its process name, library, decode function)
PROBED = (
    ("shardchat", "shardchat", Path(llama_cpp.__file__).parent / "lib/libllama.so", "llama_decode"),
    (
        "llama-server",
        "llama-server",
        ROOT / ".cache/llama-server/build/bin/libllama.so.0",
        "llama_process",
    ),
)

# llama_context::process_ubatch(const llama_ubatch &, ...): one call per micro-batch
UBATCH_FUNCTION = (
    "_ZN13llama_context14process_ubatchERK12llama_ubatch14llm_graph_type"
    "P22llama_memory_context_iR11ggml_status"
)
# where the ubatch reference arrives (the second argument, after `this`), by machine
UBATCH_ARGUMENT = {"x86_64": "%si", "amd64": "%si", "aarch64": "%x1", "arm64": "%x1"}
# llama_ubatch's fields as llama-batch.h lays them out: u32 b_equal_seqs, n_tokens,
# n_seq_tokens, n_seqs
UBATCH_FIELDS = "ntok=+4({reg}):u32 nseq=+12({reg}):u32"


class GapsError(Exception):
    """perf missing, probes refused, or the throughput run failed: one line, exit 1."""


@dataclass
class Calls:
    """One server's decode calls as (entry, return) times, and its tokenize calls."""

    steps: list[tuple[float, float]] = field(default_factory=list)
    tokenized: list[float] = field(default_factory=list)
    ubatches: list[tuple[float, int, int]] = field(default_factory=list)  # when, tokens, seqs


def symbol_address(library: Path, symbol: str) -> int:
    """Where a function starts in the library: its own address, so the probe is not also
    put on its PLT entry, which perf probe does for a symbol's name."""
    listed = subprocess.run(
        ["nm", "-D", "--defined-only", str(library)], capture_output=True, text=True
    )
    for line in listed.stdout.splitlines():
        fields = line.split()
        if len(fields) == 3 and fields[2] == symbol:
            return int(fields[0], 16)
    raise GapsError(f"{symbol} not found in {library.name}: another llama.cpp?")


def add_probes() -> None:
    """An entry and a return probe on each server's decode function, an entry probe on
    llama_tokenize (a new prompt: the next step carries it) and one on process_ubatch
    that reads each micro-batch's size."""
    subprocess.run(["perf", "probe", "-q", "-d", f"{GROUP}:*"], capture_output=True)
    register = UBATCH_ARGUMENT.get(platform.machine().lower())
    if register is None:
        raise GapsError(f"no probe for process_ubatch's argument on {platform.machine()}")
    if shutil.which("nm") is None:
        raise GapsError("nm not found (binutils)")
    for _name, comm, library, function in PROBED:
        if not library.exists():
            raise GapsError(f"{library} not found: run make bench-api")
        real = library.resolve()  # uprobes sit on a file; symbolic links name one
        tag = comm.replace("-", "_")
        ubatch = f"{tag}_ub=0x{symbol_address(real, UBATCH_FUNCTION):x}"
        ubatch += " " + UBATCH_FIELDS.format(reg=register)
        for spec in (f"{tag}_in={function}", f"{tag}_out={function}%return",
                     f"{tag}_tok=llama_tokenize", ubatch):  # fmt: skip
            done = subprocess.run(
                ["perf", "probe", "-q", "-x", str(real), "-a", f"{GROUP}:{spec}"],
                capture_output=True,
                text=True,
            )
            if done.returncode != 0:
                raise GapsError(f"perf probe {spec} on {real.name}: {done.stderr.strip()}")


def remove_probes() -> None:
    subprocess.run(["perf", "probe", "-q", "-d", f"{GROUP}:*"], capture_output=True)


def record(data: Path, results: Path, level: int, rounds: int) -> None:
    """api_throughput's interleaved level under `perf record` of the probes."""
    bench = [sys.executable, str(ROOT / "bench/api_throughput.py"), "--levels", str(level)]
    bench += ["--servers", "shardchat,llama-server", "--rounds", str(rounds)]
    bench += ["--json", str(results)]
    command = ["perf", "record", "-q", "-a", "-e", f"{GROUP}:*", "-o", str(data), "--", *bench]
    done = subprocess.run(command, cwd=ROOT, check=False)
    if done.returncode != 0:
        raise GapsError(f"the throughput run failed ({done.returncode})")


def read_calls(data: Path) -> dict[str, Calls]:
    """Each server's calls from perf's record, by process name."""
    script = subprocess.run(
        ["perf", "script", "-i", str(data), "-F", "comm,time,event,trace"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    names = {comm: name for name, comm, _library, _function in PROBED}
    calls: dict[str, Calls] = collections.defaultdict(Calls)
    entered: dict[str, float] = {}
    for line in script.splitlines():
        fields = line.split()
        if len(fields) < 3 or fields[0] not in names:
            continue
        comm, when, event = fields[0], float(fields[1].rstrip(":")), fields[2]
        mine = calls[names[comm]]
        if event.endswith("_tok:"):
            mine.tokenized.append(when)
        elif event.endswith("_ub:"):
            sizes = dict(f.split("=", 1) for f in fields[3:] if "=" in f)
            mine.ubatches.append((when, int(sizes["ntok"]), int(sizes["nseq"])))
        elif event.endswith("_in:"):
            entered[comm] = when
        elif "_out" in event and comm in entered:
            mine.steps.append((entered.pop(comm), when))
    return calls


@dataclass
class Figures:
    """What the table prints for one server, in milliseconds."""

    steps: int
    step_median: float
    step_total: float
    decoding_median: float
    gap_median: float
    gap_mean: float
    gap_total: float
    ubatches: int
    prompted_steps: int  # steps carrying a prompt's chunk (a micro-batch of more tokens
    prompted_ubatches: int  # than sequences), and their micro-batches
    tokens: int  # in the micro-batches: prompts' and decoded ones


def figures(calls: Calls) -> Figures:
    """Steps split by whether a new prompt was tokenized since the last one returned."""
    tokenized = sorted(calls.tokenized)
    ubatches = sorted(calls.ubatches)
    durations, plain, gaps = [], [], []
    previous_return: float | None = None
    t = u = 0
    prompted_steps = prompted_ubatches = 0
    for entry, ret in calls.steps:
        prompted = False
        while t < len(tokenized) and tokenized[t] < entry:
            prompted, t = True, t + 1
        first = u
        while u < len(ubatches) and ubatches[u][0] <= ret:
            u += 1
        durations.append(ret - entry)
        if not prompted:
            plain.append(ret - entry)
        if any(n > seqs for _when, n, seqs in ubatches[first:u]):  # a prompt's chunk in it
            prompted_steps += 1
            prompted_ubatches += u - first
        if previous_return is not None and entry - previous_return < BUSY_GAP_S:
            gaps.append(entry - previous_return)
        previous_return = ret
    if not plain or not gaps:
        raise GapsError("too few steps recorded: were the probes on the libraries in use?")
    return Figures(
        len(durations),
        1e3 * statistics.median(durations),
        1e3 * sum(durations),
        1e3 * statistics.median(plain),
        1e3 * statistics.median(gaps),
        1e3 * statistics.mean(gaps),
        1e3 * sum(gaps),
        len(ubatches),
        prompted_steps,
        prompted_ubatches,
        sum(n for _when, n, _seqs in ubatches),
    )


def report(calls: dict[str, Calls], tokens: dict[str, int], level: int) -> None:
    print(f"\ndecode_gaps: {level} client(s); milliseconds")
    print(
        f"{'server':14}{'steps':>7}{'median':>8}{'decoding':>10}{'gap med':>9}{'gap mean':>10}"
        f"{'in/token':>10}{'between/token':>15}"
    )
    rows = {name: figures(calls[name]) for name, *_ in PROBED if name in calls}
    for name, row in rows.items():
        n = max(tokens.get(name, 0), 1)
        print(
            f"{name:14}{row.steps:>7}{row.step_median:>8.2f}{row.decoding_median:>10.2f}"
            f"{row.gap_median:>9.3f}{row.gap_mean:>10.3f}{row.step_total / n:>10.2f}"
            f"{row.gap_total / n:>15.3f}"
        )
    if len(rows) == 2:
        ours, peer = rows["shardchat"], rows["llama-server"]
        step = ours.decoding_median / peer.decoding_median
        total = ours.step_total / peer.step_total
        print(f"shardchat/llama-server: decoding step x{step:.3f}, time in steps x{total:.3f}")
    print(
        "steps: every decode call; decoding: the median of the steps carrying no new prompt; "
        "gap: from a step's return to the next step's entry, while a reply is under way"
    )
    heads = f"{'micro-batches':14}{'all':>7}{'a step':>8}{'tokens each':>13}"
    print(f"\n{heads}{'in steps with prompts':>23}")
    for name, row in rows.items():
        prompted = f"{row.prompted_ubatches} in {row.prompted_steps}"
        print(
            f"{name:14}{row.ubatches:>7}{row.ubatches / row.steps:>8.2f}"
            f"{row.tokens / max(row.ubatches, 1):>13.1f}{prompted:>23}"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--level", type=int, default=1, help="concurrent clients")
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    if args.level < 1 or args.rounds < 1:
        parser.error("--level and --rounds are positive")
    try:
        if shutil.which("perf") is None:
            raise GapsError("perf not found")
        add_probes()
        with tempfile.TemporaryDirectory(prefix="shardchat-gaps-") as temp:
            data, results = Path(temp) / "probes.data", Path(temp) / "results.json"
            record(data, results, args.level, args.rounds)
            calls = read_calls(data)
            measured = json.loads(results.read_text(encoding="utf-8"))["results"]
    except GapsError as error:
        print(f"decode_gaps: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("decode_gaps: interrupted; probes removed", file=sys.stderr)
        return 130
    finally:
        remove_probes()
    tokens: dict[str, int] = collections.Counter()
    for row in measured:
        tokens[row["server"]] += row["tokens"]
    report(calls, tokens, args.level)
    return 0


if __name__ == "__main__":
    sys.exit(main())
