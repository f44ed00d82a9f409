"""`shardchat summarize FOLDER`: every document of a folder summarised, batched, resumable.

The model is loaded, used and freed on a thread of its own while this one
waits: Ctrl-C (or SIGTERM) cancels at the next decode step, keeps every summary
already written, says how to resume (the same command again) and exits 130; a
second Ctrl-C exits at once (app.stop_signals says why that is safe). Documents
summarised before with the same content, model and settings are kept, not
redone, unless --force.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tqdm import tqdm

from app.cli.arguments.sampling_options import sampling_from
from app.model_lifecycle.load_planning import ContextShape, planned_load, stored_profile
from app.screen_text.units import speed_text
from app.stop_signals import EXIT_INTERRUPTED, StopSignals, run_on_thread
from app.stores.model_library import prompt_format_for
from app.summaries.document_scan import checked_folder
from app.summaries.summary_job import (
    JobOutcome,
    JobProgress,
    SummaryJob,
    SummarySettings,
)
from engine.cancel import CancelToken
from engine.generation.sampling import SUMMARY_SAMPLING
from engine.model.default_model import default_model_path
from engine.runtime.loaded_model import inspect_model, load_model

EXIT_CANCELLED = EXIT_INTERRUPTED
STOPPING = "stopping after the current step… (Ctrl-C again stops at once)"
STOPPED_AT_ONCE = (
    "stopped at once: the summaries finished so far are kept; run the same command again to resume"
)


def run_summarize(args: argparse.Namespace) -> int:
    settings = SummarySettings(
        prompt=args.prompt, max_words=args.max_words, recursive=args.recursive,
        include=tuple(args.include), exclude=tuple(args.exclude), parallel=args.parallel,
        n_ctx_per_sequence=args.ctx, sampling=sampling_from(args, SUMMARY_SAMPLING),
        force=args.force,
    )  # fmt: skip
    model_path = inspect_model(args.model or default_model_path()).path
    checked_folder(Path(args.folder).expanduser())  # refuse a bad folder before loading
    bar = tqdm(total=0, unit="file", disable=not sys.stderr.isatty(), file=sys.stderr)
    try:
        with StopSignals(STOPPING, STOPPED_AT_ONCE) as stop:
            outcome = run_on_thread(
                lambda: _summarise(args, model_path, settings, bar, stop.cancel),
                name="shardchat-summarize",
            )
    finally:
        bar.close()
    _print_outcome(outcome, as_json=args.json)
    return EXIT_CANCELLED if outcome.cancelled else 0


def _summarise(
    args: argparse.Namespace,
    model_path: str,
    settings: SummarySettings,
    bar: tqdm,
    cancel: CancelToken,
) -> JobOutcome:
    """On the job's thread: the model is loaded, used and freed here, by the only thread that
    decodes with it. A stop asked for during the load still registers the job (cancelled)."""
    # no profile: no plan; the job's documents share the pool from the start
    load = planned_load(str(model_path), args.ctx, stored_profile(), shape=ContextShape.with_pool())
    model = load_model(load.params, prompt_format_for(model_path, args.prompt_format))
    try:
        return SummaryJob(
            model, Path(args.folder), _out(args), settings, None,
            lambda progress: _show(bar, progress), cancel, plan=load.plan, profile=load.profile,
        ).run()  # fmt: skip
    finally:
        model.close()


def _out(args: argparse.Namespace) -> Path | None:
    return Path(args.out) if args.out else None


def _show(bar: tqdm, progress: JobProgress) -> None:
    bar.total = progress.files_total
    bar.n = progress.files_done
    bar.set_postfix_str(f"{speed_text(progress.tokens_per_s)} · {progress.current[-40:]}")
    bar.refresh()


def _print_outcome(outcome: JobOutcome, as_json: bool) -> None:
    if as_json:
        print((outcome.output_folder / "report.json").read_text(encoding="utf-8"))
        return
    width = max([len(r.path) for r in outcome.records] + [4])
    print(f"{'file':{width}}  {'status':8}{'tokens in':>10}{'out':>6}{'s':>7}  note")
    for r in outcome.records:
        note = r.error or r.note or ""
        print(
            f"{r.path:{width}}  {r.status:8}{r.tokens_in:>10}{r.tokens_out:>6}"
            f"{r.seconds:>7.1f}  {note}"
        )
    counts = ", ".join(
        f"{outcome.count(status)} {status}"
        for status in ("done", "failed", "skipped", "pending")
        if outcome.count(status)
    )
    how = "resumed" if outcome.resumed else "new job"
    print(f"{counts or 'no documents'} ({how}, {outcome.seconds:.1f} s) → {outcome.output_folder}")
    if outcome.kept:
        print(
            f"{outcome.kept} already summarised with the same content, model and settings: "
            "kept (--force summarises them again)"
        )
    if outcome.parallel_reason:
        print(f"parallelism: {outcome.parallel_reason}")
    if outcome.cancelled:
        print("stopped: run the same command again to resume", file=sys.stderr)
