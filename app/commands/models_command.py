"""`shardchat models`: find models on Hugging Face, see how fast each runs here, get them.

    models search QUERY      GGUF repositories on the Hub (--kind, --sort, --max-params)
    models show REPO         each quant: size and predicted speed on this machine
    models pull REPO[:QUANT|:FILE]
                             download (resumable, verified), then add to the model list
    models list              the model list, and unfinished downloads
    models remove NAME       take a model off the list (--delete-file deletes it too)
    models import [PATH...]  list GGUFs where they are (--hf-cache, --lmstudio)
    models token             keep a Hugging Face token for gated repositories
    models folder [DIR]      where downloads go, and how much they take

The Hub is `HF_ENDPOINT` (a mirror) or huggingface.co. Nothing here loads a model.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path

from tqdm import tqdm

from app.commands.arg_types import positive_int, size
from app.commands.plan_command import load_profile_for_planning
from app.hub.catalogue import SORT_KEYS, Catalogue, RepoDetails
from app.hub.file_transfer import DownloadStopped, TransferControl
from app.hub.gguf_files import RemoteModel, choose_model
from app.hub.hub_settings import forget_token, hub_token, models_dir, save_token, set_models_dir
from app.hub.local_caches import hf_cache_dir, lmstudio_dirs, model_files_in
from app.hub.model_download import DownloadProgress, run_download, start_or_resume
from app.hub.remote_plans import (
    Prediction,
    QuantReading,
    default_budget,
    may_fit,
    predict_quants,
    read_quants,
    recommended,
)
from app.model_library import ModelEntry, ModelLibrary
from app.stores.hub_store import UNFINISHED, HubStore
from app.units import format_bytes, format_count
from engine.errors import BadInputError
from engine.machine.profile import Profile

log = logging.getLogger(__name__)


def add_models_command(commands: argparse._SubParsersAction) -> None:
    models = commands.add_parser(
        "models",
        help="search Hugging Face, predict speed here, download and manage models",
        description="Find GGUF models on Hugging Face, see how fast each quant would run on "
        "this machine before downloading it, download it, and manage the model list.",
    )
    models.set_defaults(command="models", run=_usage(models))
    actions = models.add_subparsers(title="actions", metavar="ACTION")
    _add_search(actions)
    _add_show(actions)
    _add_pull(actions)
    _add_list(actions)
    _add_remove(actions)
    _add_import(actions)
    _add_token(actions)
    _add_folder(actions)


# -- search ----------------------------------------------------------------------------------------


def _add_search(actions: argparse._SubParsersAction) -> None:
    search = actions.add_parser("search", help="search the Hub for GGUF repositories")
    search.add_argument("query", metavar="QUERY", help="words in the repository's name")
    search.add_argument("--kind", choices=("text", "moe", "vision"), help="only this kind")
    search.add_argument("--sort", choices=tuple(SORT_KEYS), default="downloads")
    search.add_argument("--limit", type=positive_int, default=20)
    search.add_argument(
        "--max-params", type=_param_count, metavar="N", help="at most N parameters (e.g. 14B)"
    )
    search.add_argument(
        "--fits",
        action="store_true",
        help="only models whose 4-bit quant fits this machine's RAM and VRAM (needs its profile)",
    )
    search.add_argument("--json", action="store_true", help="print the results as JSON")
    search.set_defaults(run=run_search)


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


def _add_show(actions: argparse._SubParsersAction) -> None:
    show = actions.add_parser(
        "show",
        help="a repository's quants with the predicted speed on this machine",
        description="Read only the header of each GGUF in REPO (HTTP range requests), plan it "
        "for this machine's profile and VRAM budget, and print the prediction per quant.",
    )
    show.add_argument("repo", metavar="REPO", help="owner/name")
    show.add_argument("--revision", default="main", help="branch, tag or commit")
    show.add_argument("--vram", type=size, metavar="SIZE", help="VRAM budget (default: the GPU)")
    show.add_argument("--ctx", type=positive_int, default=4096, help="context length to plan for")
    show.add_argument(
        "--hardware", metavar="PROFILE", help="plan for a profile file or described machine"
    )
    show.add_argument("--json", action="store_true", help="print as JSON")
    show.set_defaults(run=run_show)


def run_show(args: argparse.Namespace) -> int:
    catalogue = Catalogue()
    details = catalogue.details(args.repo, args.revision)
    if not details.models:
        raise BadInputError(f"{args.repo} has no GGUF model files")
    with HubStore() as store:
        readings = _read_quants(catalogue, details, details.models, store)
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
    speed = f"{prediction.decode_tokens_per_s:.1f} tok/s"
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


def _add_pull(actions: argparse._SubParsersAction) -> None:
    pull = actions.add_parser(
        "pull",
        help="download a model (resumable, verified) and add it to the model list",
        description="Download REPO's recommended quant, or the quant or file named after a "
        "colon, with its vision projector. An interrupted pull resumes where it stopped.",
    )
    pull.add_argument("target", metavar="REPO[:QUANT|:FILE]")
    pull.add_argument("--revision", default="main", help="branch, tag or commit")
    pull.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    pull.set_defaults(run=run_pull)


def run_pull(args: argparse.Namespace) -> int:
    repo_id, _, wanted = args.target.partition(":")
    catalogue = Catalogue()
    details = catalogue.details(repo_id, args.revision)
    model = _chosen_model(details, wanted, catalogue)
    with HubStore() as store:
        _check_headers(details, model, catalogue, store)
        download = start_or_resume(store, details, model, models_dir())
        resumed_from = download.bytes_on_disk()
        if resumed_from:
            print(
                f"shardchat: resuming at {format_bytes(resumed_from)} of "
                f"{format_bytes(download.total_bytes)}",
                file=sys.stderr,
            )
        bar = tqdm(
            total=download.total_bytes, initial=resumed_from, unit="B", unit_scale=True,
            unit_divisor=1024, desc=Path(model.path).name, disable=args.quiet, file=sys.stderr,
        )  # fmt: skip

        counted = [resumed_from]  # bytes on disk at the start plus every byte received since

        def on_progress(progress: DownloadProgress) -> None:
            counted[0] = progress.done_bytes
            bar.update(progress.done_bytes - bar.n)

        try:
            done = run_download(
                store, download.id, catalogue.endpoint, catalogue.auth_headers(), on_progress,
                TransferControl(),
            )  # fmt: skip
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


def _read_quants(
    catalogue: Catalogue, details: RepoDetails, models: Sequence[RemoteModel], store: HubStore
) -> list[QuantReading]:
    """The quants' headers (cached by commit in the hub store) as the planner reads them."""
    return read_quants(
        models, catalogue.endpoint, details.repo_id, details.revision, catalogue.auth_headers(),
        store,
    )  # fmt: skip


def _check_headers(
    details: RepoDetails, model: RemoteModel, catalogue: Catalogue, store: HubStore
) -> None:
    """Refuse, before a byte of weights, a file whose header is not a usable GGUF."""
    (reading,) = _read_quants(catalogue, details, [model], store)
    if reading.problem:
        raise BadInputError(f"not downloading {details.repo_id}/{model.path}: {reading.problem}")


def _chosen_model(details: RepoDetails, wanted: str, catalogue: Catalogue) -> RemoteModel:
    if wanted:
        model = choose_model(details.models, wanted)
        if model is None:
            quants = ", ".join(m.quant or m.path for m in details.models) or "none"
            raise BadInputError(f"{details.repo_id} has no quant or file {wanted!r} ({quants})")
        return model
    if not details.models:
        raise BadInputError(f"{details.repo_id} has no GGUF model files")
    profile, _note = _profile_or_note(None)
    if profile is None:
        return details.models[0]  # the smallest: safe without knowing the machine
    with HubStore() as store:
        readings = _read_quants(catalogue, details, details.models, store)
    predictions = predict_quants(readings, profile, default_budget(profile), 4096)
    best = recommended(list(details.models), lambda m: predictions.get(m.path))
    return best or details.models[0]


# -- list, remove ----------------------------------------------------------------------------------


def _add_list(actions: argparse._SubParsersAction) -> None:
    listing = actions.add_parser("list", help="the model list, and unfinished downloads")
    listing.add_argument("--json", action="store_true", help="print as JSON")
    listing.set_defaults(run=run_list)


def run_list(args: argparse.Namespace) -> int:
    with ModelLibrary() as library:
        entries = library.models()
    with HubStore() as store:
        pending = store.downloads(UNFINISHED)
    if args.json:
        print(json.dumps({
            "models": [_entry_dict(e) for e in entries],
            "downloads": [{"id": d.id, "repo_id": d.repo_id, "path": d.model_path,
                           "status": d.status, "done_bytes": d.bytes_on_disk(),
                           "total_bytes": d.total_bytes, "error": d.error} for d in pending],
        }, indent=1))  # fmt: skip
        return 0
    for entry in entries:
        flags = " ".join(f for f, on in (("default", entry.is_default), ("built-in", entry.builtin),
                                           ("missing", not entry.exists)) if on)  # fmt: skip
        shown = format_bytes(entry.file_bytes) if entry.file_bytes else "-"
        print(f"{entry.readable_name:44} {entry.kind_text:18} {shown:>10}  {entry.path}"
              + (f"  [{flags}]" if flags else ""))  # fmt: skip
    for d in pending:
        print(f"downloading {d.repo_id}/{d.model_path}: {d.status}, "
              f"{format_bytes(d.bytes_on_disk())} of {format_bytes(d.total_bytes)}"
              + (f" ({d.error})" if d.error else ""))  # fmt: skip
    return 0


def _entry_dict(entry: ModelEntry) -> dict[str, object]:
    return {
        "name": entry.readable_name, "path": str(entry.path), "kind": entry.kind_text,
        "file_bytes": entry.file_bytes, "default": entry.is_default, "builtin": entry.builtin,
        "exists": entry.exists,
        "mmproj_path": str(entry.mmproj_path) if entry.mmproj_path else None,
    }  # fmt: skip


def _add_remove(actions: argparse._SubParsersAction) -> None:
    remove = actions.add_parser("remove", help="take a model off the list")
    remove.add_argument("name", metavar="NAME", help="its path, file name or name as listed")
    remove.add_argument("--delete-file", action="store_true", help="delete the file too")
    remove.set_defaults(run=run_remove)


def run_remove(args: argparse.Namespace) -> int:
    with ModelLibrary() as library:
        entry = _find_entry(library, args.name)
        removed = library.remove(entry.path, delete_file=args.delete_file)
    said = " and deleted its file" if removed.file_deleted else " (the file stays on disk)"
    print(f"shardchat: removed {entry.readable_name}{said}", file=sys.stderr)
    return 0


def _find_entry(library: ModelLibrary, name: str) -> ModelEntry:
    entries = [e for e in library.models() if not e.builtin]
    wanted = name.lower()
    for match in (
        lambda e: str(e.path) == str(Path(name).expanduser().resolve()),
        lambda e: e.path.name.lower() in (wanted, wanted + ".gguf"),
        lambda e: e.readable_name.lower() == wanted or e.name.lower() == wanted,
    ):
        found = [e for e in entries if match(e)]
        if len(found) == 1:
            return found[0]
        if len(found) > 1:
            raise BadInputError(f"{name!r} names {len(found)} models; give the path")
    raise BadInputError(f"no model {name!r} in the model list (see: shardchat models list)")


def _add_import(actions: argparse._SubParsersAction) -> None:
    imports = actions.add_parser(
        "import",
        help="list GGUF models where they already are (files, folders, other tools' caches)",
        description="Add GGUF models to the model list in place (nothing is copied): files, "
        "folders searched recursively, the Hugging Face cache, LM Studio's models folder.",
    )
    imports.add_argument("paths", nargs="*", metavar="PATH", help="GGUF files or folders")
    imports.add_argument("--hf-cache", action="store_true", help="the Hugging Face cache")
    imports.add_argument("--lmstudio", action="store_true", help="LM Studio's models folder")
    imports.set_defaults(run=run_import)


def run_import(args: argparse.Namespace) -> int:
    folders = [Path(p).expanduser() for p in args.paths]
    folders += [hf_cache_dir()] if args.hf_cache else []
    folders += lmstudio_dirs() if args.lmstudio else []
    if not folders:
        raise BadInputError("name GGUF files or folders, or --hf-cache / --lmstudio")
    files: list[Path] = []
    for place in folders:
        if not place.exists():
            raise BadInputError(f"{place}: no such file or folder")
        files += model_files_in(place) if place.is_dir() else [place]
    added, refused = 0, 0
    with ModelLibrary() as library:
        for path in files:
            try:
                entry = library.add(path)
            except BadInputError as exc:
                refused += 1
                print(f"shardchat: refused {exc}", file=sys.stderr)
                continue
            except Exception as exc:  # one file's surprise must not cost the others
                log.exception("importing %s failed", path)
                refused += 1
                print(f"shardchat: refused {path}: unexpected {type(exc).__name__}: {exc} "
                      "(details in the log)", file=sys.stderr)  # fmt: skip
                continue
            added += 1
            print(entry.path)
    summary = f"{added} model(s) in the list from {len(files)} file(s)"
    print(f"shardchat: {summary}" + (f", {refused} refused" if refused else ""), file=sys.stderr)
    return 2 if refused else 0


# -- token, folder ---------------------------------------------------------------------------------


def _add_token(actions: argparse._SubParsersAction) -> None:
    token = actions.add_parser(
        "token",
        help="keep a Hugging Face token (read from standard input) for gated repositories",
    )
    token.add_argument("--forget", action="store_true", help="remove the token kept here")
    token.set_defaults(run=run_token)


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


def _add_folder(actions: argparse._SubParsersAction) -> None:
    folder = actions.add_parser("folder", help="where downloads go, and the disk they use")
    folder.add_argument("dir", nargs="?", metavar="DIR", help="send later downloads here")
    folder.set_defaults(run=run_folder)


def run_folder(args: argparse.Namespace) -> int:
    folder = set_models_dir(Path(args.dir)) if args.dir else models_dir()
    used = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) if folder.exists() else 0
    print(f"{folder}  ({format_bytes(used)} of models)")
    return 0


def _param_count(text: str) -> int:
    units = {"k": 1e3, "m": 1e6, "b": 1e9, "t": 1e12}
    text = text.strip().lower()
    try:
        if text and text[-1] in units:
            return int(float(text[:-1]) * units[text[-1]])
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a parameter count (e.g. 14B)") from None


def _usage(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    def run(_args: argparse.Namespace) -> int:
        parser.print_help(sys.stderr)
        return 2

    return run
