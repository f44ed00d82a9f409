"""A summarisation job: every document of a folder summarised, batched, resumable.

The job scans the folder, registers its files in the job store, and feeds the
batched engine lazily: each document is read when a sequence slot wants work,
split by tokens if it is longer than a sequence's context, and each part
summarised; a document of several parts then gets a summary of its parts'
summaries (map-reduce), in a further round. A summary is written atomically
and its file marked done in the same breath, so a killed job loses only the
documents in flight, and running the same job again resumes it. A later job
on the same folders keeps the summaries of documents whose content, model and
settings are unchanged (each done file's fingerprint is in the job store).
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import asdict, dataclass, field, replace
from datetime import date
from pathlib import Path

from app.stores.atomic_files import remove_leftovers
from app.stores.job_store import DONE, FAILED, PENDING, SKIPPED, FileRecord, JobStore
from app.summaries.document_readers import Document, UnreadableDocument, read_document
from app.summaries.document_scan import FolderScan, check_output_folder, checked_folder, scan_folder
from app.summaries.summary_defaults import DEFAULT_CONTEXT_PER_SEQUENCE
from app.summaries.summary_output import summary_path, write_reports, write_summary
from app.summaries.summary_prompts import DEFAULT_MAX_WORDS, combine, summarise, summarise_part
from app.summaries.text_chunks import split_by_tokens
from engine.batch.generator import BatchGenerator, BatchRequest, BatchResult
from engine.cancel import CancelToken
from engine.generation.sampling import SUMMARY_SAMPLING, SamplingSettings
from engine.generation.stats import FinishReason
from engine.generation.thinking import split_whole
from engine.machine.profile import Profile
from engine.model.chat_message import ChatMessage
from engine.model.model_naming import readable_model_name
from engine.planning.parallelism import choose_parallelism
from engine.planning.plan import Plan
from engine.runtime.loaded_model import LoadedModel
from engine.runtime.step_log import StepLog

log = logging.getLogger(__name__)

DEFAULT_PARALLEL = 8
_SAFETY_TOKENS = 16
_LOOPED = "the model began repeating itself; the summary ends where it did"
_KEPT = "unchanged since an earlier run (same content, model and settings): summary kept"


@dataclass(frozen=True)
class SummarySettings:
    prompt: str | None = None
    max_words: int = DEFAULT_MAX_WORDS
    recursive: bool = True
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    parallel: int | None = None  # sequences decoding together; None: the planner's choice
    n_ctx_per_sequence: int = DEFAULT_CONTEXT_PER_SEQUENCE
    sampling: SamplingSettings = SUMMARY_SAMPLING  # its max_tokens is not used (max_words is)
    force: bool = False  # summarise again documents whose earlier summary would be kept

    def identity(self) -> dict:
        """What makes two runs the same job (parallelism only changes the speed; --force only
        what is redone)."""
        identity = {k: v for k, v in asdict(self).items() if k not in ("parallel", "force")}
        identity["sampling"] = self.sampling.to_dict()
        return identity

    @property
    def max_tokens(self) -> int:
        return self.max_words * 2 + 32  # words are 1.3-1.6 tokens; room to finish a sentence


@dataclass(frozen=True)
class JobProgress:
    files_done: int
    files_total: int
    current: str
    generated_tokens: int
    tokens_per_s: float
    eta_s: float | None
    finished: FileRecord | None = None  # the file whose outcome this report brings, if any
    parallel: int = 0  # documents decoding together


@dataclass(frozen=True)
class JobOutcome:
    output_folder: Path
    records: list[FileRecord]
    cancelled: bool
    resumed: bool
    seconds: float
    parallel: int = 0  # sequences that decoded together (0: nothing was left to do)
    parallel_reason: str = ""
    kept: int = 0  # done by an earlier job and unchanged since: their summaries kept

    def count(self, status: str) -> int:
        return sum(1 for r in self.records if r.status == status)


@dataclass
class _Doc:
    """A document in flight: its parts' summaries as they come back, and its tallies."""

    relative: str
    document: Document
    texts: list[str]  # the parts, each small enough for one sequence
    summaries: dict[int, str] = field(default_factory=dict)
    merging: int = 0  # how many leading summaries the merge in flight replaces
    tokens_in: int = 0
    tokens_out: int = 0
    seconds: float = 0.0
    looped: bool = False  # a part's summary began to repeat itself and was cut there

    @property
    def parts(self) -> int:
        return len(self.texts)


class SummaryJob:
    def __init__(
        self,
        model: LoadedModel,
        input_folder: Path,
        output_folder: Path | None = None,
        settings: SummarySettings | None = None,
        store: JobStore | None = None,
        progress: Callable[[JobProgress], None] | None = None,
        cancel: CancelToken | None = None,
        plan: Plan | None = None,
        profile: Profile | None = None,
    ) -> None:
        """With the model's plan and the profile it was made from, the planner picks how
        many documents decode together and each step is tagged with its tier; without
        them (an unprofiled machine) DEFAULT_PARALLEL is used.
        """
        self.model = model
        self._plan, self._profile = plan, profile
        self._parallel_choice = (0, "")
        self.settings = settings or SummarySettings()
        self.input_folder = checked_folder(Path(input_folder).expanduser().resolve())
        self.output_folder = check_output_folder(self.input_folder, output_folder)
        self._given_store = store
        self._store: JobStore
        self._progress = progress or (lambda _p: None)
        self._cancel = cancel or CancelToken()
        self._in_flight: dict[str, _Doc] = {}
        self._combine_queue: list[_Doc] = []
        self._records: dict[str, FileRecord] = {}
        self._generated = 0
        self._started = 0.0
        self._current = ""
        self._initially_done = 0
        self._root = self.input_folder
        self._fingerprints: dict[str, str] = {}
        self._inputs: frozenset[str] = frozenset()  # every file found, for summary_path
        self._kept = 0

    def run(self) -> JobOutcome:
        """Summarise what is not done yet, stepping the model's scheduler here (nothing else
        runs on the model); returns when done or cancelled (then resumable)."""
        steps = self.steps()
        watching = None  # each step beside the plan (in the worker, the resident model's log)
        if self._plan is not None and self._profile is not None:
            watching = StepLog(self.model, self._plan, self._profile).attach()
        try:
            while True:
                try:
                    next(steps)
                except StopIteration as finished:
                    outcome: JobOutcome = finished.value
                    return outcome
                self.model.scheduler.step()
        finally:
            if watching is not None:
                watching.detach()

    def steps(self) -> Generator[None, None, JobOutcome]:
        """The job as the engine worker's loop drives it: each time it yields, its documents
        are admitted to the model's scheduler and wait for the next step, which carries
        the conversation's and API clients' tokens too; it returns the outcome.

        The job store is opened here unless one was given: SQLite connections belong
        to the thread that opens them, the thread that drives the job.
        """
        if self._given_store is not None:
            self._store = self._given_store
            return (yield from self._run())
        with JobStore() as self._store:
            return (yield from self._run())

    def _run(self) -> Generator[None, None, JobOutcome]:
        self._started = time.monotonic()
        scan = scan_folder(
            self.input_folder, self.settings.recursive, self.settings.include,
            self.settings.exclude, self.output_folder,
        )  # fmt: skip
        self.output_folder.mkdir(parents=True, exist_ok=True)
        removed = remove_leftovers(self.output_folder)
        if removed:
            log.info("removed %d partial files a stopped job left", removed)
        job = self._store.start_or_resume(
            self.input_folder, self.output_folder, self.settings.identity()
        )
        self._root = scan.folder
        self._register(job.id, scan)
        pending = [r.path for r in self._records.values() if r.status == PENDING]
        self._initially_done = len(self._records) - len(pending)
        for kept in [r for r in self._records.values() if r.note == _KEPT]:
            self._report(kept)  # a window's table shows them done from the start
        if pending and not self._cancel.cancelled:  # a stop asked for during the load
            yield from self._summarise(pending, job.id)
        cancelled = self._cancel.cancelled
        self._store.finish(job.id, "cancelled" if cancelled else "finished")
        records = self._store.files(job.id)
        write_reports(self.output_folder, self.input_folder, records)
        return JobOutcome(
            self.output_folder, records, cancelled, job.resumed,
            time.monotonic() - self._started, *self._parallel_choice, kept=self._kept,
        )  # fmt: skip

    def _summarise(self, pending: list[str], job_id: int) -> Generator[None, None, None]:
        """Rounds of batched generation: documents' parts, then the combining of parts."""
        queue = iter(pending)
        self._parallel_choice = self._parallelism(len(pending))
        log.info("summarising with %s", self._parallel_choice[1])
        with BatchGenerator(
            self.model,
            self._parallel_choice[0],
            self.settings.n_ctx_per_sequence,
            self.settings.sampling,
            plan=self._plan,
        ) as engine:
            while not self._cancel.cancelled:
                batch_run = engine.start(
                    self._requests(queue, job_id), self._on_result(job_id), self._cancel
                )
                while batch_run.admit():
                    yield
                    batch_run.collect()
                if not self._combine_queue or batch_run.stats.n_results == 0:
                    break

    # --- registering files ---

    def _register(self, job_id: int, scan: FolderScan) -> None:
        documents = [self._relative(path) for path in scan.documents]
        skipped = {self._relative(s.path): s.reason for s in scan.skipped}
        self._store.add_files(job_id, documents + list(skipped))
        self._inputs = frozenset(documents) | frozenset(skipped)
        self._fingerprints = {relative: self._fingerprint(relative) for relative in documents}
        earlier = {} if self.settings.force else self._earlier_summaries()
        for record in self._store.files(job_id):
            if record.path in skipped and record.status == PENDING:
                record = FileRecord(record.path, SKIPPED, error=skipped[record.path])
                self._store.record(job_id, record)
            elif record.status == DONE and (
                self.settings.force or not self._summary(record.path).exists()
            ):
                record = FileRecord(record.path, PENDING)  # forced, or its summary was deleted
                self._store.record(job_id, record)
            elif record.status == PENDING and record.path in earlier:
                record = replace(earlier[record.path], note=_KEPT)
                self._store.record(job_id, record, self._fingerprints[record.path])
                self._kept += 1
            self._records[record.path] = record

    def _earlier_summaries(self) -> dict[str, FileRecord]:
        """Documents an earlier job summarised from the same content, with the same model and
        settings, whose summary is still there."""
        found = self._store.summarised(self.input_folder, self.output_folder)
        return {
            path: record
            for path, (fingerprint, record) in found.items()
            if self._fingerprints.get(path) == fingerprint and self._summary(path).exists()
        }

    def _fingerprint(self, relative: str) -> str:
        """The document's bytes, the model (its file's name and size) and the job's settings."""
        model = Path(self.model.params.model_path)
        digest = hashlib.sha256()
        identity = {"model": model.name, "model_bytes": _size(model), **self.settings.identity()}
        digest.update(json.dumps(identity, sort_keys=True, default=str).encode())
        try:
            with (self._root / relative).open("rb") as file:
                for chunk in iter(lambda: file.read(1 << 20), b""):
                    digest.update(chunk)
        except OSError:
            return ""  # unreadable now: reading it reports why; never matched as unchanged
        return digest.hexdigest()

    def _summary(self, relative: str) -> Path:
        return summary_path(self.output_folder, relative, self._inputs)

    def _relative(self, path: Path) -> str:
        return path.relative_to(self._root).as_posix()

    def _parallelism(self, n_documents: int) -> tuple[int, str]:
        """The user's override, else the planner's choice, else the default; never more
        sequences than documents."""
        n_documents = max(n_documents, 1)
        if self.settings.parallel:
            n = min(self.settings.parallel, n_documents)
            return n, f"{n} sequences (--parallel {self.settings.parallel}, {n_documents} to do)"
        if self._plan is not None and self._profile is not None:
            choice = choose_parallelism(
                self._plan, self._profile, self.model.inventory, n_documents,
                self.settings.n_ctx_per_sequence,
            )  # fmt: skip
            return choice.n_parallel, f"planner's choice: {choice.reason}"
        n = min(DEFAULT_PARALLEL, n_documents)
        return n, f"{n} sequences (the default: this machine is not profiled)"

    # --- feeding the engine ---

    def _requests(self, queue: Iterator[str], job_id: int) -> Iterator[BatchRequest]:
        """Combine requests first (their parts are done), then the next document's parts."""
        while True:
            while self._combine_queue:
                yield self._combine_request(self._combine_queue.pop(0))
            relative = next(queue, None)
            if relative is None or self._cancel.cancelled:
                return
            doc = self._open(relative, job_id)
            if doc is not None:
                yield from self._part_requests(doc)

    def _open(self, relative: str, job_id: int) -> _Doc | None:
        self._current = relative
        try:
            document = read_document(self._root / relative)
        except UnreadableDocument as exc:
            self._finish(job_id, FileRecord(relative, SKIPPED, error=str(exc)))
            return None
        doc = _Doc(relative, document, self._split(document.text))
        self._in_flight[relative] = doc
        return doc

    def _part_requests(self, doc: _Doc) -> Iterator[BatchRequest]:
        s = self.settings
        for index, text in enumerate(doc.texts, 1):
            if doc.parts == 1:
                messages = summarise(text, doc.relative, s.prompt, s.max_words)
            else:
                messages = summarise_part(
                    text, doc.relative, index, doc.parts, s.prompt, s.max_words
                )
            yield BatchRequest(f"{doc.relative}\0{index}", messages, s.max_tokens)

    def _combine_request(self, doc: _Doc) -> BatchRequest:
        """All parts' summaries in one request if they fit; else merge the first ones that do.

        A merge replaces those summaries by one and the document comes back for
        another round, so every part is always heard (a reduce tree, never a cut).
        """
        s = self.settings
        summaries = [doc.summaries[i] for i in sorted(doc.summaries)]
        messages = combine(summaries, doc.relative, s.prompt, s.max_words)
        if self._count(messages) <= self._prompt_budget() or len(summaries) < 3:
            return BatchRequest(f"{doc.relative}\0combine", messages, s.max_tokens)
        group = 2
        while (
            group + 1 < len(summaries)
            and self._count(combine(summaries[: group + 1], doc.relative, s.prompt, s.max_words))
            <= self._prompt_budget()
        ):
            group += 1
        doc.merging = group
        merged = combine(summaries[:group], doc.relative, s.prompt, s.max_words)
        return BatchRequest(f"{doc.relative}\0merge", merged, s.max_tokens)

    def _split(self, text: str) -> list[str]:
        overhead = self._count(
            summarise("", "x" * 40, self.settings.prompt, self.settings.max_words)
        )
        budget = self._prompt_budget() - overhead
        return split_by_tokens(text, max(budget, 64), self._count_text)

    def _prompt_budget(self) -> int:
        s = self.settings
        return s.n_ctx_per_sequence - s.max_tokens - _SAFETY_TOKENS

    def _count(self, messages: tuple[ChatMessage, ...]) -> int:
        return self.model.count_tokens(list(messages))

    def _count_text(self, text: str) -> int:
        return len(self.model.tokenize_text(text))

    # --- results ---

    def _on_result(self, job_id: int) -> Callable[[BatchResult], None]:
        def on_result(result: BatchResult) -> None:
            relative, _sep, part = result.key.partition("\0")
            doc = self._in_flight.get(relative)
            if doc is None:
                return
            doc.tokens_in += result.prompt_tokens
            doc.tokens_out += result.generated_tokens
            doc.seconds += result.seconds
            self._generated += result.generated_tokens
            if result.finish_reason is FinishReason.CANCELLED:
                self._in_flight.pop(relative, None)  # stays pending: the next run redoes it
            elif result.finish_reason is FinishReason.ERROR:
                self._fail(job_id, doc, result.error or "the model could not summarise it")
            elif part == "merge":
                keys = sorted(doc.summaries)
                rest = {key: doc.summaries[key] for key in keys[doc.merging :]}
                doc.summaries = {0: _whole_sentences(result), **rest}
                self._combine_queue.append(doc)
            elif part == "combine" or doc.parts == 1:
                self._done(job_id, doc, _whole_sentences(result))
            else:
                doc.summaries[int(part)] = _whole_sentences(result)
                if len(doc.summaries) == doc.parts:
                    self._combine_queue.append(doc)
            self._report()

        return on_result

    def _done(self, job_id: int, doc: _Doc, summary: str) -> None:
        document = doc.document
        footer = " · ".join(
            part
            for part in (
                f"{document.pages} pages" if document.pages else "",
                f"{document.characters} characters",
                f"{doc.parts} parts" if doc.parts > 1 else "",
                readable_model_name(self.model.params.model_path, self.model.inventory.name),
                date.today().isoformat(),
            )
            if part
        )
        write_summary(self.output_folder, doc.relative, summary, footer, self._inputs)
        record = self._record(doc, DONE, note=_LOOPED if doc.looped else None)
        self._finish(job_id, record, self._fingerprints.get(doc.relative))

    def _fail(self, job_id: int, doc: _Doc, reason: str) -> None:
        self._finish(job_id, self._record(doc, FAILED, reason))

    def _record(
        self, doc: _Doc, status: str, error: str | None = None, note: str | None = None
    ) -> FileRecord:
        return FileRecord(
            doc.relative, status, doc.document.pages, doc.document.characters,
            doc.tokens_in, doc.tokens_out, doc.seconds, error, note,
        )  # fmt: skip

    def _finish(self, job_id: int, record: FileRecord, fingerprint: str | None = None) -> None:
        self._in_flight.pop(record.path, None)
        self._store.record(job_id, record, fingerprint or None)
        self._records[record.path] = record
        write_reports(self.output_folder, self.input_folder, list(self._records.values()))
        self._report(record)

    def _report(self, finished: FileRecord | None = None) -> None:
        total = len(self._records)
        done = sum(1 for r in self._records.values() if r.status != PENDING)
        elapsed = max(time.monotonic() - self._started, 1e-6)
        finished_now = done - self._initially_done
        remaining = total - done
        eta = elapsed / finished_now * remaining if finished_now > 0 else None
        speed = self._generated / elapsed
        self._progress(
            JobProgress(
                done,
                total,
                self._current,
                self._generated,
                speed,
                eta,
                finished,
                self._parallel_choice[0],
            )  # fmt: skip
        )


def _size(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except OSError:
        return None


def _whole_sentences(result: BatchResult) -> str:
    """A summary cut off at the token limit ends at its last full sentence, if it has one; a
    reasoning model's thinking is not part of it."""
    text = split_whole(result.text).answer.strip()
    if not result.finish_reason.cut_short:
        return text
    end = max(text.rfind(mark) for mark in (". ", "! ", "? ", ".\n", "!\n", "?\n"))
    if text.endswith((".", "!", "?")):
        return text
    return text[: end + 1] if end > len(text) // 3 else text + "…"
