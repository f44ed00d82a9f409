"""Several threads creating the same store file at once.

The Discover tab's suggestions, a download's worker and the Models dialog each
open the hub store on their own thread; on a first run they race to create the
file. SQLite creates a database as an empty file first, and switching it to
WAL mode takes an exclusive lock without waiting, so a second opener either
took the brand-new file for a damaged one and moved it aside (a download job
vanished as it started, in CI) or failed with "database is locked".
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from app.stores import chat_schema, job_store, model_library, profile_store
from app.stores.chat_store import ChatStore
from app.stores.hub_store import HubStore
from app.stores.job_store import JobStore
from app.stores.model_library import ModelLibrary
from app.stores.profile_store import ProfileStore
from app.stores.sqlite_migrations import Migration, applied_migrations, apply_migrations

ROUNDS = 25
THREADS = 4

STORES: dict[str, Callable[[Path], object]] = {
    "hub": HubStore,
    "chats": ChatStore,
    "profiles": ProfileStore,
    "jobs": JobStore,
}


def _at_once(*work: Callable[[], object]) -> list[BaseException]:
    """Run each callable on its own thread, released together; the exceptions they raised."""
    start = threading.Barrier(len(work))
    failures: list[BaseException] = []

    def run(one: Callable[[], object]) -> None:
        start.wait()
        try:
            one()
        except BaseException as exc:  # reported by the caller, with its round
            failures.append(exc)

    threads = [threading.Thread(target=run, args=(one,)) for one in work]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return failures


def _moved_aside(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.glob("*.corrupt-*"))


@pytest.mark.parametrize("kind", sorted(STORES))
def test_threads_creating_one_store_at_once_share_it(kind: str, tmp_path: Path) -> None:
    for round_ in range(ROUNDS):
        path = tmp_path / f"{round_}" / "store.sqlite3"

        def open_and_close(path: Path = path) -> None:
            STORES[kind](path).close()  # type: ignore[attr-defined]

        assert _at_once(*[open_and_close] * THREADS) == [], f"round {round_}"
        assert _moved_aside(path.parent) == [], f"round {round_}"


def test_a_download_added_while_another_thread_opens_the_store_is_kept(tmp_path: Path) -> None:
    """The CI failure itself: one thread adds a job while another opens the store."""
    for round_ in range(ROUNDS):
        path = tmp_path / f"{round_}" / "hub.sqlite3"
        added: list[int] = []

        def add(path: Path = path, added: list[int] = added) -> None:
            with HubStore(path) as store:
                added.append(store.add_download("org/repo", "main", "m.gguf", path.parent, []).id)

        def look(path: Path = path) -> None:
            HubStore(path).close()

        assert _at_once(add, look) == [], f"round {round_}"
        with HubStore(path) as store:
            assert store.download(added[0]).repo_id == "org/repo", f"round {round_}"
        assert _moved_aside(path.parent) == [], f"round {round_}"


# every store with more than one migration (the hub store has one, so no earlier version)
EARLIER_VERSIONS: dict[str, tuple[Callable[[Path], object], tuple[Migration, ...], str]] = {
    "chats": (ChatStore, chat_schema.MIGRATIONS, chat_schema.MIGRATIONS_TABLE),
    "jobs": (JobStore, job_store.MIGRATIONS, job_store.MIGRATIONS_TABLE),
    "models": (ModelLibrary, model_library.MIGRATIONS, model_library.MIGRATIONS_TABLE),
    "profiles": (ProfileStore, profile_store.MIGRATIONS, profile_store.MIGRATIONS_TABLE),
}


@pytest.mark.parametrize(
    ("kind", "applied"),
    [(kind, n) for kind, (_, ms, _) in sorted(EARLIER_VERSIONS.items()) for n in range(1, len(ms))],
)
def test_a_store_an_earlier_version_wrote_is_upgraded_where_it_is(
    kind: str, applied: int, tmp_path: Path
) -> None:
    """A file with only the first migrations applied is what an earlier ShardChat left, and
    also what another thread's store looks like halfway through creating it: the opener
    applies the rest, never takes it for a damaged file and moves it aside."""
    store_class, migrations, table = EARLIER_VERSIONS[kind]
    path = tmp_path / "store.sqlite3"
    conn = sqlite3.connect(path, isolation_level=None)
    apply_migrations(conn, migrations[:applied], table=table)
    conn.close()

    store = store_class(path)
    try:
        assert store.recovered_from is None  # type: ignore[attr-defined]
    finally:
        store.close()  # type: ignore[attr-defined]
    assert _moved_aside(tmp_path) == []
    check = sqlite3.connect(path)
    try:
        assert applied_migrations(check, table) == [m.__name__ for m in migrations]
    finally:
        check.close()
