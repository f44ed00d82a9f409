"""`shardchat summarize FOLDER`: every document of a folder summarised, batched, resumable.

The job runs on its own thread while this one shows a progress bar and waits;
Ctrl-C cancels between decode steps, keeps every summary already written and
says how to resume (the same command again).
"""

from __future__ import annotations

import argparse
import sys
import threading
from pathlib import Path

from tqdm import tqdm

from app.commands.arg_types import add_prompt_format_option, positive_int
from app.commands.sampling_options import add_sampling_options, sampling_from
from app.load_planning import planned_load, stored_profile
from app.model_library import prompt_format_for
from app.summaries.document_scan import checked_folder
from app.summaries.summary_job import (
    DEFAULT_CONTEXT_PER_SEQUENCE,
    JobOutcome,
    JobProgress,
    SummaryJob,
    SummarySettings,
)
from app.summaries.summary_prompts import DEFAULT_MAX_WORDS
from engine.cancel import CancelToken
from engine.generation.sampling import SUMMARY_SAMPLING
from engine.model.default_model import default_model_path
from engine.runtime.loaded_model import inspect_model, load_model

EXIT_CANCELLED = 130


def add_summarize_command(commands: argparse._SubParsersAction) -> None:
    cmd = commands.add_parser(
        "summarize",
        aliases=["summarise"],
        help="summarise every document in a folder (batched, resumable)",
        description=(
            "Summarise every document in FOLDER (text, Markdown, code, HTML, PDF, DOCX) into "
            "Markdown files in an output folder mirroring it, with report.md and report.json. "
            "Run the same command again to resume a stopped job."
        ),
    )
    cmd.add_argument("folder", metavar="FOLDER")
    cmd.add_argument("--out", metavar="DIR", help="output folder (default: FOLDER-summaries)")
    cmd.add_argument("--model", "-m", metavar="PATH", help="GGUF model (default: the default)")
    cmd.add_argument("--parallel", type=positive_int, help="documents decoded together")
    cmd.add_argument("--prompt", help="the instruction ({max_words} is filled in)")
    cmd.add_argument("--max-words", type=positive_int, default=DEFAULT_MAX_WORDS)
    cmd.add_argument(
        "--recursive", action=argparse.BooleanOptionalAction, default=True,
        help="include sub-folders (default: yes)",
    )  # fmt: skip
    cmd.add_argument("--include", action="append", default=[], metavar="GLOB")
    cmd.add_argument("--exclude", action="append", default=[], metavar="GLOB")
    cmd.add_argument(
        "--ctx", type=positive_int, default=DEFAULT_CONTEXT_PER_SEQUENCE,
        help="context per document sequence, in tokens",
    )  # fmt: skip
    cmd.add_argument("--json", action="store_true", help="print report.json when done")
    add_sampling_options(cmd, SUMMARY_SAMPLING, max_tokens=False)
    add_prompt_format_option(cmd)
    cmd.set_defaults(command="summarize", run=run_summarize)


def run_summarize(args: argparse.Namespace) -> int:
    settings = SummarySettings(
        prompt=args.prompt, max_words=args.max_words, recursive=args.recursive,
        include=tuple(args.include), exclude=tuple(args.exclude), parallel=args.parallel,
        n_ctx_per_sequence=args.ctx, sampling=sampling_from(args, SUMMARY_SAMPLING),
    )  # fmt: skip
    model_path = inspect_model(args.model or default_model_path()).path
    checked_folder(Path(args.folder).expanduser())  # refuse a bad folder before loading
    cancel = CancelToken()
    bar = tqdm(total=0, unit="file", disable=not sys.stderr.isatty(), file=sys.stderr)
    load = planned_load(str(model_path), args.ctx, stored_profile())  # no profile: no plan
    model = load_model(load.params, prompt_format_for(model_path, args.prompt_format))
    try:
        job = SummaryJob(
            model, Path(args.folder), _out(args), settings, None,
            lambda progress: _show(bar, progress), cancel, plan=load.plan, profile=load.profile,
        )  # fmt: skip
        outcome = _run_until_done(job, cancel)
    finally:
        bar.close()
        model.close()
    _print_outcome(outcome, as_json=args.json)
    return EXIT_CANCELLED if outcome.cancelled else 0


def _out(args: argparse.Namespace) -> Path | None:
    return Path(args.out) if args.out else None


def _run_until_done(job: SummaryJob, cancel: CancelToken) -> JobOutcome:
    """The job on a thread, so Ctrl-C reaches this one and becomes a clean cancel."""
    result: dict[str, object] = {}
    thread = threading.Thread(target=lambda: result.update(outcome=_run(job, result)))
    thread.start()
    try:
        while thread.is_alive():
            thread.join(0.2)
    except KeyboardInterrupt:
        print("\nstopping after the current step…", file=sys.stderr)
        cancel.cancel()
        thread.join()
    if "error" in result:
        raise result["error"]  # type: ignore[misc]
    return result["outcome"]  # type: ignore[return-value]


def _run(job: SummaryJob, result: dict[str, object]) -> JobOutcome | None:
    try:
        return job.run()
    except BaseException as exc:  # reported on the main thread, where exit codes are decided
        result["error"] = exc
        return None


def _show(bar: tqdm, progress: JobProgress) -> None:
    bar.total = progress.files_total
    bar.n = progress.files_done
    bar.set_postfix_str(f"{progress.tokens_per_s:.0f} tok/s · {progress.current[-40:]}")
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
    if outcome.parallel_reason:
        print(f"parallelism: {outcome.parallel_reason}")
    if outcome.cancelled:
        print("stopped: run the same command again to resume", file=sys.stderr)
