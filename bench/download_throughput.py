"""How fast ShardChat downloads a model file, against curl from the same server, side by side.

ShardChat's downloader (app.hub.file_transfer: Range requests on a .part file,
SHA-256 computed while the bytes arrive, fsync and rename) fetches one file from
the test Hub (tests/local_hub: a real HTTP server on 127.0.0.1 that redirects
`resolve` URLs to a CDN path, as huggingface.co does). curl fetches the same
URL into a file (following the redirect, no hashing). Runs alternate
(curl, ours, curl, ours, ...) so noise on this shared machine lands on both,
first on plain loopback, then with the server paced to 100 MB/s per connection
(a fast home connection); medians are compared as ratios.

    .venv/bin/python bench/download_throughput.py [--size-mib 1024] [--rounds 3]

Targets (issue 17): at least 250 MB/s on loopback including hashing; at least
0.9x curl's speed against the 100 MB/s server.
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from local_hub import HubFile, LocalHub  # noqa: E402

from app.hub.file_transfer import TransferControl, download_file  # noqa: E402
from app.hub.remote_file import RemoteFileRef  # noqa: E402

REPO = "bench/Throughput-GGUF"
FILE = "throughput-Q8_0.gguf"
THROTTLE_BYTES_PER_S = 100e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=int, default=1024, help="file size (loopback runs)")
    parser.add_argument("--throttled-mib", type=int, default=384, help="file size at 100 MB/s")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each side per setting")
    args = parser.parse_args()
    curl = shutil.which("curl")
    with tempfile.TemporaryDirectory(prefix="shardchat-download-bench-") as temp:
        work = Path(temp)
        rows = []
        for label, size_mib, throttle in (
            ("loopback", args.size_mib, None),
            ("server paced to 100 MB/s", args.throttled_mib, THROTTLE_BYTES_PER_S),
        ):
            source = _source_file(work / f"source-{size_mib}.bin", size_mib << 20)
            rows.append(_measure(label, source, throttle, args.rounds, curl, work))
    print(f"\n{'setting':28}{'ours MB/s':>11}{'curl MB/s':>11}{'ours/curl':>11}")
    for label, ours, theirs in rows:
        ratio = f"{ours / theirs:.2f}x" if theirs else "-"
        print(f"{label:28}{ours:>11.0f}{theirs or 0:>11.0f}{ratio:>11}")
    return 0


def _measure(
    label: str, source: Path, throttle: float | None, rounds: int, curl: str | None, work: Path
) -> tuple[str, float, float | None]:
    size = source.stat().st_size
    sha256 = _sha256(source)
    with LocalHub() as hub:
        hub.add_repo(REPO, {FILE: HubFile.from_path(source)})
        hub.faults.throttle_bytes_per_s = throttle
        ref = RemoteFileRef(hub.url, REPO, "main", FILE)
        ours: list[float] = []
        theirs: list[float] = []
        for round_index in range(rounds):
            if curl:
                theirs.append(_timed(lambda: _curl(curl, ref.url, work / "curl.out"), size))
            dest = work / "ours.gguf"
            ours.append(_timed(lambda: _ours(ref, work / "ours.gguf", size, sha256), size))
            dest.unlink()
            print(f"{label}: round {round_index + 1}: ours {ours[-1]:.0f} MB/s"
                  + (f", curl {theirs[-1]:.0f} MB/s" if theirs else ""), flush=True)  # fmt: skip
    return label, statistics.median(ours), statistics.median(theirs) if theirs else None


def _ours(ref: RemoteFileRef, dest: Path, size: int, sha256: str) -> None:
    download_file(ref, {}, dest, size, sha256, lambda _n: None, TransferControl())


def _curl(curl: str, url: str, out: Path) -> None:
    subprocess.run([curl, "-sSfL", "-o", str(out), url], check=True)
    out.unlink()


def _timed(run: Callable[[], None], size: int) -> float:
    started = time.perf_counter()
    run()
    return size / (time.perf_counter() - started) / 1e6


def _source_file(path: Path, size: int) -> Path:
    """Incompressible bytes (a random block repeated), written once per size."""
    if path.exists():
        return path
    block = hashlib.shake_256(b"shardchat").digest(1 << 20)
    with path.open("wb") as handle:
        for _ in range(size >> 20):
            handle.write(block)
    return path


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(8 << 20):
            digest.update(block)
    return digest.hexdigest()


if __name__ == "__main__":
    sys.exit(main())
