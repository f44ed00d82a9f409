"""Every SQLite store, given a damaged or foreign file where its own belongs.

What each of them must do (app.stores.sqlite_file, app.stores.store_base): never write to
the file and never delete it, but move it aside, byte for byte and with its -wal/-shm, to
`<name>.corrupt-YYYYmmdd-HHMMSS` beside it; log where it went; say so in `recovered_from`;
and start a fresh store of its own that keeps what is written to it. Real files in the
data folder, each store used only through its own methods.
"""

from __future__ import annotations

import logging
import random
import re
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from app.paths import app_paths
from app.stores import chat_schema, hub_store, job_store, model_library, profile_store
from app.stores.chat_store import ChatStore
from app.stores.hub_store import DownloadFile, HubStore
from app.stores.job_store import DONE, FileRecord, JobStore
from app.stores.model_library import ModelLibrary
from app.stores.profile_store import ProfileStore
from engine.machine.profile import Profile
from engine.model.synthetic import write_synthetic_model
from engine.model.synthetic_spec import SyntheticSpec

RECORDED_PROFILE = Path(__file__).resolve().parents[1] / "data" / "profile-epyc-2core-fast.json"
JOB_INPUT, JOB_OUTPUT = Path("/documents"), Path("/summaries")


# -- writing and reading each store through its own methods -----------------------------------


def _write_chat(store: ChatStore, folder: Path, n: int) -> None:
    conversation_id = store.create_conversation(f"conversation {n}").conversation_id
    assert conversation_id is not None
    for m in range(10):
        store.add_message(conversation_id, "user", f"message {m} " + "lorem ipsum " * 40)


def _chat_contents(store: ChatStore) -> list[object]:
    return [(c.title, [m.content for m in store.messages(c.id)]) for c in store.conversations()]


def _write_profile(store: ProfileStore, folder: Path, n: int) -> None:
    recorded = Profile.from_json(RECORDED_PROFILE.read_text(encoding="utf-8"))
    store.save(replace(recorded, fingerprint=f"machine {n}"))


def _profile_contents(store: ProfileStore) -> list[object]:
    return [(s.fingerprint, s.llama_build, s.mode) for s in store.list()]


def _write_model(store: ModelLibrary, folder: Path, n: int) -> None:
    model = folder / f"tiny-{n}.gguf"
    write_synthetic_model(model, SyntheticSpec("llama", vocab_size=256, seed=n), "F16")
    store.add(model)


def _model_contents(store: ModelLibrary) -> list[object]:
    return [(e.path, e.architecture, e.kind) for e in store.models() if not e.builtin]


def _write_hub(store: HubStore, folder: Path, n: int) -> None:
    name = f"model-{n}.gguf"
    part = DownloadFile(name, 1000 + n, "ab" * 32, "part", folder / name, done=False)
    store.add_download("org/repo", "c0ffee", name, folder, [part])
    header = random.Random(n).randbytes(4096)  # incompressible: the file gets a page a header
    store.keep_header("org/repo", "c0ffee", name, header, 1000 + n, len(header))


def _hub_contents(store: HubStore) -> list[object]:
    return [
        (d.model_path, d.total_bytes, store.header(d.repo_id, d.revision, d.model_path))
        for d in store.downloads()
    ]


def _write_job(store: JobStore, folder: Path, n: int) -> None:
    job = store.start_or_resume(JOB_INPUT, JOB_OUTPUT, {"n": n})
    store.add_files(job.id, [f"doc-{n}-{i}.txt" for i in range(40)])
    record = FileRecord(f"doc-{n}-0.txt", DONE, 1, 1200, 400, 60, 2.5)
    store.record(job.id, record, fingerprint=f"fingerprint {n}")


def _job_contents(store: JobStore) -> list[object]:
    return sorted(
        (path, fingerprint, record)
        for path, (fingerprint, record) in store.summarised(JOB_INPUT, JOB_OUTPUT).items()
    )


@dataclass(frozen=True)
class Kind:
    """One store: how to open it, its file, and how to write and read it through its API."""

    open: Callable[..., Any]  # (path or nothing: the data folder's) -> the store
    file_name: str  # in the data folder: what a user finds there, so named here literally
    application_id: int
    write: Callable[[Any, Path, int], None]  # store item n (its files, if any, in the folder)
    contents: Callable[[Any], list[object]]
    real_items: int  # how many items make a real store for the damage to land in


KINDS: dict[str, Kind] = {
    "chats": Kind(
        ChatStore, "chats.sqlite3", chat_schema.APPLICATION_ID, _write_chat, _chat_contents, 30
    ),
    "profiles": Kind(
        ProfileStore, "profiles.sqlite3", profile_store.APPLICATION_ID,
        _write_profile, _profile_contents, 3,
    ),
    "models": Kind(
        ModelLibrary, "models.sqlite3", model_library.APPLICATION_ID,
        _write_model, _model_contents, 3,
    ),
    "hub": Kind(HubStore, "hub.sqlite3", hub_store.APPLICATION_ID, _write_hub, _hub_contents, 20),
    "jobs": Kind(JobStore, "jobs.sqlite3", job_store.APPLICATION_ID, _write_job, _job_contents, 20),
}  # fmt: skip


def _raw(path: Path) -> sqlite3.Connection:
    """A plain connection, to look at the file the way another program would."""
    return sqlite3.connect(path)


def _checkpoint(path: Path) -> None:
    """Fold the WAL into the file and remove the sidecars, so the file alone is the store."""
    conn = _raw(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    for sidecar in path.parent.glob(f"{path.name}-*"):
        sidecar.unlink()


@pytest.fixture(scope="module")
def real_stores(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[str], bytes]]:
    """A closed store of each kind holding real items, made once: what the damage spoils."""
    made: dict[str, bytes] = {}

    def real(name: str) -> bytes:
        if name not in made:
            kind = KINDS[name]
            folder = tmp_path_factory.mktemp(f"real-{name}")
            path = folder / kind.file_name
            with kind.open(path) as store:
                for n in range(kind.real_items):
                    kind.write(store, folder, n)
            _checkpoint(path)
            made[name] = path.read_bytes()
        return made[name]

    yield real


# -- what lands where a store's file belongs ---------------------------------------------------


def _damaged_page(path: Path, real: bytes) -> None:
    """A sound header and schema, but garbage over pages in the middle of the file."""
    data = bytearray(real)
    page = int.from_bytes(data[16:18], "big")
    start = len(data) // 2
    end = min(start + 3 * page, len(data))
    data[start:end] = random.Random(3).randbytes(end - start)
    path.write_bytes(bytes(data))


def _foreign_sqlite(path: Path, real: bytes) -> None:
    conn = _raw(path)
    conn.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)")
    conn.execute("INSERT INTO notes (body) VALUES ('my shopping list')")
    conn.commit()
    conn.close()


def _other_applications_sqlite(path: Path, real: bytes) -> None:
    """Another tool's database whose only table happens to share our migrations table's name."""
    conn = _raw(path)
    conn.execute("PRAGMA application_id = 1280068913")  # not ours
    conn.execute("CREATE TABLE _migrations (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)")
    conn.commit()
    conn.close()


DAMAGE: dict[str, Callable[[Path, bytes], object]] = {
    "random bytes": lambda p, real: p.write_bytes(random.Random(7).randbytes(20_000)),
    "sqlite header then garbage": lambda p, real: p.write_bytes(real[:16] + b"\xff" * 200),
    "truncated header": lambda p, real: p.write_bytes(real[:60]),
    "truncated store": lambda p, real: p.write_bytes(real[: len(real) // 2]),
    "damaged page": _damaged_page,
    "foreign sqlite": _foreign_sqlite,
    "other application_id": _other_applications_sqlite,
}


def _another_kind(name: str) -> str:
    """The next kind in name order: its store is ShardChat's own, but not this one."""
    names = sorted(KINDS)
    return names[(names.index(name) + 1) % len(names)]


def _moved_aside(path: Path) -> list[str]:
    """The files moved aside from `path`, their -wal/-shm/-journal left out."""
    found = path.parent.glob(f"{path.name}.corrupt-*")
    return sorted(p.name for p in found if not p.name.endswith(("-wal", "-shm", "-journal")))


# -- the tests ---------------------------------------------------------------------------------


@pytest.mark.parametrize("damage", [*sorted(DAMAGE), "another ShardChat store"])
@pytest.mark.parametrize("name", sorted(KINDS))
def test_a_damaged_or_foreign_file_is_moved_aside_and_a_fresh_store_starts(
    name: str,
    damage: str,
    real_stores: Callable[[str], bytes],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    kind = KINDS[name]
    path = app_paths().data_dir / kind.file_name
    path.parent.mkdir(parents=True)
    if damage == "another ShardChat store":
        path.write_bytes(real_stores(_another_kind(name)))
    else:
        DAMAGE[damage](path, real_stores(name))
    original = path.read_bytes()

    with caplog.at_level(logging.WARNING, logger="app.stores.sqlite_file"):
        store = kind.open()
    with store:
        aside = store.recovered_from
        assert store.path == path
        assert aside is not None
        assert re.fullmatch(re.escape(kind.file_name) + r"\.corrupt-\d{8}-\d{6}", aside.name)
        assert aside.parent == path.parent
        assert aside.read_bytes() == original
        assert kind.contents(store) == []
        kind.write(store, tmp_path, 0)
        written = kind.contents(store)
    assert written != []
    assert str(aside) in caplog.text
    assert _moved_aside(path) == [aside.name]

    with kind.open() as reopened:
        assert reopened.recovered_from is None
        assert kind.contents(reopened) == written
    conn = _raw(path)
    try:
        assert conn.execute("PRAGMA application_id").fetchone()[0] == kind.application_id
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        conn.close()


@pytest.mark.parametrize("name", sorted(KINDS))
def test_a_damaged_file_moves_with_its_wal_and_shm(name: str, tmp_path: Path) -> None:
    kind = KINDS[name]
    path = tmp_path / kind.file_name
    path.write_bytes(b"not a database at all" * 100)
    path.with_name(f"{path.name}-wal").write_bytes(b"wal bytes")
    path.with_name(f"{path.name}-shm").write_bytes(b"shm bytes")
    with kind.open(path) as store:
        aside = store.recovered_from
    assert aside is not None and aside.read_bytes() == b"not a database at all" * 100
    assert (tmp_path / f"{aside.name}-wal").read_bytes() == b"wal bytes"
    assert (tmp_path / f"{aside.name}-shm").read_bytes() == b"shm bytes"
