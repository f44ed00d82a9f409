"""`shardchat models` actions that ask the Hub: search, show (each quant's predicted speed
here, from its header alone), pull (through app.hub.pull_workflow, as the Discover page
downloads), and token (for gated repositories).

The Hub is `HF_ENDPOINT` (a mirror) or huggingface.co. Nothing here loads a model.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

from tqdm import tqdm

from app.cli.commands.plan_command import load_profile_for_planning
from app.hub.catalogue import Catalogue, RepoDetails
from app.hub.file_transfer import DownloadStopped
from app.hub.gguf_files import RemoteModel
from app.hub.hub_settings import forget_token, hub_token, save_token
from app.hub.model_download import DownloadProgress
from app.hub.pull_workflow import PullWorkflow, check_header, read_headers, resolve
from app.hub.remote_plans import (
    Prediction,
    QuantReading,
    default_budget,
    may_fit,
    predict_quants,
    recommended,
)
from app.screen_text.units import format_bytes, format_count, speed_text
from engine.errors import BadInputError
from engine.machine.profile import Profile

# -- search ----------------------------------------------------------------------------------------


def run_search(args: argparse.Namespace) -> int:
    found = Catalogue().search(
        args.query, kind=args.kind, sort=args.sort, limit=args.limit, max_params=args.max_params
    )
    if args.fits:
        profile = load_profile_for_planning(None)
        budget = default_budget(profile)
        found = [r for r in found if r.n_params and may_fit(r.n_params, profile, budget)]
    if args.json:
        print(json.dumps([{**asdict(r), "kind": r.kind} for r in found], indent=1, default=str))
        return 0
    if not found:
        print(f"shardchat: no GGUF repository matches {args.query!r}", file=sys.stderr)
        return 0
    print(f"{'repository':48} {'kind':7} {'params':>7} {'downloads':>10} {'likes':>6}  licence")
    for r in found:
        params = format_count(r.n_params) if r.n_params else "-"
        gated = " (gated)" if r.gated else ""
        print(
            f"{r.repo_id + gated:48} {r.kind:7} {params:>7} {r.downloads:>10} {r.likes:>6}"
            f"  {r.license or '-'}"
        )
    return 0


# -- show ------------------------------------------------------------------------------------------


def run_show(args: argparse.Namespace) -> int:
    catalogue = Catalogue()
    details = catalogue.details(args.repo, args.revision)
    if not details.models:
        raise BadInputError(f"{args.repo} has no GGUF model files")
    readings = read_headers(catalogue, details, details.models)
    profile, note = _profile_or_note(args.hardware)
    budget = args.vram if args.vram is not None else (default_budget(profile) if profile else 0)
    predictions = predict_quants(readings, profile, budget, args.ctx) if profile else {}
    best = recommended(list(details.models), lambda m: predictions.get(m.path))
    if args.json:
        print(json.dumps(_show_json(details, readings, predictions, best, budget), indent=1))
        return 0
    print(_show_text(details, readings, predictions, best, budget, args.ctx, note))
    return 0


def _show_text(
    details: RepoDetails,
    readings: list[QuantReading],
    predictions: dict[str, Prediction | None],
    best: RemoteModel | None,
    budget: int,
    n_ctx: int,
    note: str,
) -> str:
    lines = [f"{details.repo_id} @ {details.revision[:12]}  licence: {details.license or '-'}"]
    if details.gated:
        lines.append("gated: accept its terms on the Hub and add a token (shardchat models token)")
    if details.summary:
        lines.append(f"  {details.summary}")
    lines.append(note or f"predicted on this machine at {format_bytes(budget)} VRAM, "
                 f"{n_ctx}-token context, 512-token prompt:")  # fmt: skip
    lines.append(
        f"  {'quant':12} {'size':>10} {'decode':>11} {'TTFT':>8} {'in VRAM':>8}  "
        f"{'header read':>22}  file"
    )
    for reading in readings:
        model = reading.model
        mark = "*" if best is not None and model.path == best.path else " "
        lines.append(
            f"{mark} {model.quant or '?':12} {format_bytes(model.size):>10} "
            f"{_prediction_text(predictions.get(model.path))}  "
            f"{_fetched_text(reading):>22}  {model.path}"
            + (f" (+{model.projector.name})" if model.projector else "")
            + (f" [{len(model.parts)} parts]" if model.is_split else "")
            + (f"\n      unusable: {reading.problem}" if reading.problem else "")
        )
    if best is not None:
        lines.append(f"* recommended: {best.path} (the largest quant still readable here)")
    return "\n".join(lines)


def _prediction_text(prediction: Prediction | None) -> str:
    if prediction is None:
        return f"{'-':>11} {'-':>8} {'-':>8}"
    speed = speed_text(prediction.decode_tokens_per_s)
    if not prediction.fits_ram:
        speed = "exceeds RAM"
    return f"{speed:>11} {prediction.ttft_s:>7.1f}s {prediction.resident_share:>8.0%}"


def _fetched_text(reading: QuantReading) -> str:
    if reading.fetched is None:
        return "-"
    if not reading.fetched.fetched_bytes:
        return "cached"
    share = reading.fetched.fetched_bytes / max(1, reading.model.size)
    return f"{format_bytes(reading.fetched.fetched_bytes)} ({share:.3%})"


def _show_json(
    details: RepoDetails,
    readings: list[QuantReading],
    predictions: dict[str, Prediction | None],
    best: RemoteModel | None,
    budget: int,
) -> dict[str, object]:
    quants = []
    for reading in readings:
        model, prediction = reading.model, predictions.get(reading.model.path)
        quants.append({
            "quant": model.quant, "path": model.path, "parts": [p.path for p in model.parts],
            "size": model.size, "projector": model.projector.path if model.projector else None,
            "problem": reading.problem,
            "header_bytes_fetched": reading.fetched.fetched_by_file if reading.fetched else {},
            "decode_tokens_per_s": prediction.decode_tokens_per_s if prediction else None,
            "ttft_s": prediction.ttft_s if prediction else None,
            "resident_share": prediction.resident_share if prediction else None,
            "fits_ram": prediction.fits_ram if prediction else None,
            "recommended": best is not None and best.path == model.path,
        })  # fmt: skip
    return {
        "repo_id": details.repo_id, "revision": details.revision, "license": details.license,
        "gated": details.gated, "summary": details.summary, "vram_budget_bytes": budget,
        "quants": quants,
    }  # fmt: skip


def _profile_or_note(hardware: str | None) -> tuple[Profile | None, str]:
    """The profile to plan with, or None and the line that says why there are no figures."""
    try:
        return load_profile_for_planning(hardware), ""
    except BadInputError as exc:
        if hardware:
            raise
        return None, f"no predictions: {exc}"


# -- pull ------------------------------------------------------------------------------------------


def run_pull(args: argparse.Namespace) -> int:
    catalogue = Catalogue()
    details, model = resolve(catalogue, args.target, args.revision, _planning_profile)
    check_header(catalogue, details, model)
    pulls = PullWorkflow()
    started = pulls.start(details, model)
    resumed_from = started.download.bytes_on_disk()
    if resumed_from:
        print(
            f"shardchat: resuming at {format_bytes(resumed_from)} of "
            f"{format_bytes(started.download.total_bytes)}",
            file=sys.stderr,
        )
    bar = tqdm(
        total=started.download.total_bytes, initial=resumed_from, unit="B", unit_scale=True,
        unit_divisor=1024, desc=Path(model.path).name, disable=args.quiet, file=sys.stderr,
    )  # fmt: skip

    counted = [resumed_from]  # bytes on disk at the start plus every byte received since

    def on_progress(progress: DownloadProgress) -> None:
        counted[0] = progress.done_bytes
        bar.update(progress.done_bytes - bar.n)

    try:
        done = pulls.run(started.download.id, started.control, on_progress, catalogue)
    except (KeyboardInterrupt, DownloadStopped):
        bar.close()
        print("shardchat: download paused; run the same pull again to resume", file=sys.stderr)
        return 130
    bar.close()
    received = counted[0] - resumed_from
    if resumed_from:
        refetched = received - (done.total_bytes - resumed_from)
        print(
            f"shardchat: received {format_bytes(received)} this run; bytes re-fetched: {refetched}",
            file=sys.stderr,
        )
    print(f"shardchat: {done.imported_path} is in the model list", file=sys.stderr)
    print(done.imported_path)
    return 0


def _planning_profile() -> Profile | None:
    """This machine's stored profile to recommend a quant for, or None without one."""
    return _profile_or_note(None)[0]


# -- token -----------------------------------------------------------------------------------------


def run_token(args: argparse.Namespace) -> int:
    if args.forget:
        forget_token()
        print("shardchat: token removed", file=sys.stderr)
        return 0
    if sys.stdin.isatty():
        print("paste the token, then Enter:", file=sys.stderr)
    text = sys.stdin.readline().strip()
    if not text:
        raise BadInputError("no token given on standard input")
    where = save_token(text)
    found = hub_token()
    print(f"shardchat: token kept in {where}; in use: {found.source if found else 'none'}",
          file=sys.stderr)  # fmt: skip
    return 0
