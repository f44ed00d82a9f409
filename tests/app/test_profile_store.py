"""The profile store: saving, finding, pruning, JSON files, damaged databases, migrations."""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from app.paths import app_paths
from app.stores.profile_store import (
    APPLICATION_ID,
    KEEP_PER_BUILD,
    MAX_PROFILE_BYTES,
    MIGRATIONS,
    SCHEMA_VERSION,
    ProfileStore,
    model_key,
)
from app.stores.sqlite_migrations import applied_migrations, apply_migrations
from engine.errors import BadInputError
from engine.machine.profile import (
    AttentionPoint,
    Device,
    GpuProfile,
    KernelPoint,
    KernelShape,
    Profile,
    ProfileMode,
    RepackResult,
    UnusableConfig,
)
from engine.planning.plan import PlanFamily
from engine.planning.step_correction import Correction, CorrectionKey

LAPTOP = "cpu=AMD Ryzen 7 5800H;cores=8;ram=32GiB;gpu=NVIDIA GeForce RTX 3060 Laptop GPU/6GiB"
DESKTOP = "cpu=Intel Core i5-12400;cores=6;ram=64GiB;gpu=none"
BUILD = "b5400-1e0fd0b"
# Per-thread-count compute rate (GFLOP/s) of a Q4_K_M dense block on an 8-core laptop CPU.
CPU_GFLOPS = {1: 38.0, 2: 74.0, 3: 108.0, 4: 139.0, 5: 166.0, 6: 188.0, 7: 201.0, 8: 207.0}
QUANT_BITS = {"Q4_0": 4.5, "Q4_K_M": 4.85, "Q6_K": 6.56, "Q8_0": 8.5}


def kernel(
    quant: str, shape: KernelShape, threads: int, n_tokens: int, device: Device = Device.CPU
) -> KernelPoint:
    """A block of a 2048-wide micro-model: flops for n_tokens, weight bytes at the quant's bits."""
    params = 2048 * 2048 * 4 + 2048 * 5632 * 3 * (1 if shape is KernelShape.DENSE else 2)
    weight_bytes = int(params * QUANT_BITS[quant] / 8)
    flops = 2.0 * params * n_tokens
    gflops = CPU_GFLOPS[threads] if device is Device.CPU else 9000.0
    seconds = max(flops / (gflops * 1e9), weight_bytes / 45e9)  # compute- or bandwidth-bound
    return KernelPoint(device, shape, quant, threads, n_tokens, seconds, flops, weight_bytes)


def make_profile(
    fingerprint: str = LAPTOP,
    created_at: str = "2025-05-01T10:00:00+00:00",
    llama_build: str = BUILD,
    mode: ProfileMode = ProfileMode.FAST,
    quants: tuple[str, ...] = ("Q4_K_M",),
    shapes: tuple[KernelShape, ...] = (KernelShape.DENSE,),
    threads: tuple[int, ...] = (1, 4, 8),
    n_tokens: tuple[int, ...] = (1, 32),
    with_gpu: bool = False,
) -> Profile:
    """A small, realistic profile of one machine measured at `created_at`."""
    kernels = tuple(
        kernel(q, s, t, n) for q in quants for s in shapes for t in threads for n in n_tokens
    )
    gpu = None
    if with_gpu:
        gpu = GpuProfile(
            name="NVIDIA GeForce RTX 3060 Laptop GPU",
            vram_total_bytes=6 * 1024**3,
            kernels=tuple(
                kernel(q, s, 1, n, Device.GPU) for q in quants for s in shapes for n in n_tokens
            ),
            h2d_pinned_gbps=12.1,
            h2d_pageable_gbps=7.9,
            cpu_derate_under_copy=0.91,
            step_overhead_s=0.00042,
            memory_gbps=336.0,
            attention=tuple(
                AttentionPoint(Device.GPU, n, 1, 2e-6 * n / 1024, 32) for n in (1024, 4096, 16384)
            ),
        )
    return Profile(
        fingerprint=fingerprint,
        llama_build=llama_build,
        mode=mode,
        created_at=created_at,
        duration_s=41.7,
        physical_cores=8,
        cpu_kernels=kernels,
        cpu_call_overhead_s={t: 0.00018 + 0.00002 * t for t in threads},
        cpu_layer_overhead_s={t: 0.000011 + 0.000002 * t for t in threads},
        dram_read_gbps=45.3,
        repack=RepackResult(works=True, speedup=1.31, detail="CPU_REPACK buffer type"),
        gpu=gpu,
        cpu_attention=tuple(
            AttentionPoint(Device.CPU, n, 1, 1.5e-5 * n / 1024, 32) for n in (1024, 4096, 16384)
        ),
        hardware={"cpu_model": "AMD Ryzen 7 5800H", "ram_bytes": 32 * 1024**3},
        unusable=(UnusableConfig("Q8_0 moe threads=8", "child timed out after 30 s"),),
        description="" if mode is not ProfileMode.DESCRIBED else "from the RTX 3060 datasheet",
    )


def day(n: int) -> str:
    return f"2025-05-{n:02d}T10:00:00+00:00"


@pytest.fixture
def store(tmp_path: Path) -> ProfileStore:
    with ProfileStore(tmp_path / "store" / "profiles.sqlite3") as opened:
        yield opened


# -- saving and finding ------------------------------------------------------------------------


def test_save_then_latest_returns_an_equal_profile(store: ProfileStore) -> None:
    profile = make_profile(with_gpu=True)
    saved = store.save(profile)
    assert store.latest(LAPTOP) == profile
    assert saved.fingerprint == LAPTOP and saved.replaced_ids == ()
    assert saved.size_bytes == len(profile.to_json().encode())
    assert store.get(saved.profile_id) == profile


def test_default_file_is_in_the_data_folder_and_a_second_store_reads_it() -> None:
    profile = make_profile()
    with ProfileStore() as first:
        first.save(profile)
    assert (app_paths().data_dir / "profiles.sqlite3").is_file()
    with ProfileStore() as second:
        assert second.latest(LAPTOP) == profile
        assert second.recovered_from is None


def test_latest_is_per_fingerprint_and_optionally_per_build(store: ProfileStore) -> None:
    old_build = make_profile(created_at=day(1), llama_build="b5000")
    new_build = make_profile(created_at=day(2))
    desktop = make_profile(DESKTOP, created_at=day(3))
    for profile in (old_build, new_build, desktop):
        store.save(profile)
    assert store.latest(LAPTOP) == new_build
    assert store.latest(LAPTOP, "b5000") == old_build
    assert store.latest(DESKTOP) == desktop
    assert store.latest(DESKTOP, "b5000") is None
    assert store.latest("cpu=unknown") is None


def test_newest_is_by_created_at_whatever_the_save_order_or_time_zone(
    store: ProfileStore,
) -> None:
    newer = make_profile(created_at="2025-05-02T08:00:00Z")
    older = make_profile(created_at="2025-05-02T09:00:00+02:00")  # 07:00 UTC
    store.save(newer)
    store.save(older)
    assert store.latest(LAPTOP) == newer
    assert [s.created_at for s in store.list()] == [
        "2025-05-02T08:00:00.000000+00:00",
        "2025-05-02T07:00:00.000000+00:00",
    ]


def test_keeps_the_three_newest_per_fingerprint_and_build(store: ProfileStore) -> None:
    saved = [store.save(make_profile(created_at=day(n))) for n in range(1, 6)]
    other = store.save(make_profile(DESKTOP, created_at=day(1)))
    ids = [s.profile_id for s in saved]
    assert [s.replaced_ids for s in saved] == [(), (), (), (ids[0],), (ids[1],)]
    assert other.replaced_ids == ()
    assert [s.id for s in store.list()] == [ids[4], ids[3], ids[2], other.profile_id]


def test_saving_an_older_profile_keeps_it_and_drops_the_oldest_other(store: ProfileStore) -> None:
    ids = [store.save(make_profile(created_at=day(n))).profile_id for n in (5, 6, 7)]
    older = store.save(make_profile(created_at=day(1)))
    assert older.replaced_ids == (ids[0],)
    assert [s.id for s in store.list()] == [ids[2], ids[1], older.profile_id]


def test_list_summarises_newest_first(store: ProfileStore) -> None:
    fast = make_profile(created_at=day(1))
    described = make_profile(DESKTOP, created_at=day(2), mode=ProfileMode.DESCRIBED)
    store.save(fast)
    store.save(described)
    first, second = store.list()
    assert (first.fingerprint, first.mode, first.described) == (DESKTOP, "described", True)
    assert (second.fingerprint, second.mode, second.described) == (LAPTOP, "fast", False)
    assert second.llama_build == BUILD
    assert second.size_bytes == len(fast.to_json().encode())


def test_get_of_an_unknown_id_is_bad_input(store: ProfileStore) -> None:
    with pytest.raises(BadInputError, match="no profile with id 42"):
        store.get(42)


def test_an_interrupted_save_leaves_the_previous_profile(
    store: ProfileStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    previous = make_profile(created_at=day(1))
    store.save(previous)

    def crash(*_args: object, **_kwargs: object) -> tuple[int, ...]:
        raise KeyboardInterrupt

    monkeypatch.setattr(store, "_prune", crash)
    with pytest.raises(KeyboardInterrupt):
        store.save(make_profile(created_at=day(2)))
    assert store.latest(LAPTOP) == previous
    assert len(store.list()) == 1


def test_close_and_context_manager(tmp_path: Path) -> None:
    with ProfileStore(tmp_path / "p.sqlite3") as store:
        store.save(make_profile())
    with pytest.raises(sqlite3.ProgrammingError):
        store.list()
    store.close()  # twice is fine


# -- size limit --------------------------------------------------------------------------------


def test_a_profile_over_200_kb_is_refused(store: ProfileStore) -> None:
    base = make_profile()
    padding = MAX_PROFILE_BYTES - len(base.to_json().encode()) + 1
    too_big = make_profile(mode=ProfileMode.DESCRIBED)
    too_big = Profile.from_dict({**too_big.to_dict(), "description": "x" * padding})
    assert len(too_big.to_json().encode()) > MAX_PROFILE_BYTES
    with pytest.raises(BadInputError, match="200 KB"):
        store.save(too_big)
    assert store.list() == []


def test_a_realistic_full_profile_fits_well_under_the_limit(store: ProfileStore) -> None:
    full = make_profile(
        mode=ProfileMode.FULL,
        quants=("Q4_0", "Q4_K_M", "Q6_K", "Q8_0"),
        shapes=(KernelShape.DENSE, KernelShape.MOE),
        threads=tuple(range(1, 9)),
        n_tokens=(1, 8, 32, 128, 512),
        with_gpu=True,
    )
    assert len(full.cpu_kernels) == 4 * 2 * 8 * 5
    saved = store.save(full)
    assert saved.size_bytes < MAX_PROFILE_BYTES // 2
    assert store.latest(LAPTOP) == full


# -- JSON export and import --------------------------------------------------------------------


def test_export_then_import_round_trips(store: ProfileStore, tmp_path: Path) -> None:
    profile = make_profile(with_gpu=True)
    target = tmp_path / "exported" / "laptop.json"
    target.parent.mkdir()
    assert store.export_json(profile, target) == target
    assert list(target.parent.iterdir()) == [target]  # no temp file left behind
    text = target.read_text(encoding="utf-8")
    assert "\n " in text and json.loads(text)["fingerprint"] == LAPTOP
    with ProfileStore(tmp_path / "other.sqlite3") as other:
        assert other.import_json(target) == profile
        assert other.latest(LAPTOP) == profile


def test_export_replaces_an_existing_file(store: ProfileStore, tmp_path: Path) -> None:
    target = tmp_path / "p.json"
    target.write_text("old")
    store.export_json(make_profile(DESKTOP), target)
    assert json.loads(target.read_text())["fingerprint"] == DESKTOP


def test_an_imported_described_profile_keeps_its_mark(store: ProfileStore, tmp_path: Path) -> None:
    target = tmp_path / "rtx5090.json"
    store.export_json(make_profile(DESKTOP, mode=ProfileMode.DESCRIBED), target)
    imported = store.import_json(target)
    assert imported.is_described
    assert store.latest(DESKTOP).is_described
    assert store.list()[0].described is True


def _too_big(path: Path) -> None:
    data = make_profile().to_dict()
    data["description"] = "x" * (MAX_PROFILE_BYTES + 1)
    path.write_text(json.dumps(data))


def _missing_keys(path: Path) -> None:
    data = make_profile().to_dict()
    del data["fingerprint"], data["cpu_kernels"]
    path.write_text(json.dumps(data))


BAD_FILES: dict[str, Callable[[Path], object]] = {
    "garbage": lambda p: p.write_bytes(b"\x89PNG\r\n\x1a\n\x00garbage"),
    "not json": lambda p: p.write_text("fingerprint = laptop\n"),
    "a json list": lambda p: p.write_text(json.dumps([make_profile().to_dict()])),
    "schema 999": lambda p: p.write_text(
        json.dumps({**make_profile().to_dict(), "schema_version": 999})
    ),
    "missing keys": _missing_keys,
    "bad mode": lambda p: p.write_text(json.dumps({**make_profile().to_dict(), "mode": "turbo"})),
    "too big": _too_big,
    "missing file": lambda p: None,
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_importing_a_bad_file_is_bad_input_naming_the_file(
    case: str, store: ProfileStore, tmp_path: Path
) -> None:
    path = tmp_path / "incoming profile.json"
    BAD_FILES[case](path)
    with pytest.raises(BadInputError) as caught:
        store.import_json(path)
    message = str(caught.value)
    assert str(path) in message
    assert "\n" not in message
    assert store.list() == []


def test_schema_version_error_says_which_versions(store: ProfileStore, tmp_path: Path) -> None:
    path = tmp_path / "future.json"
    BAD_FILES["schema 999"](path)
    with pytest.raises(BadInputError, match="version 999"):
        store.import_json(path)


# -- damaged and foreign database files --------------------------------------------------------
# A damaged or foreign file is moved aside by every store alike: tests/app/test_store_recovery.py


def test_two_recoveries_in_one_second_keep_both_files(tmp_path: Path) -> None:
    path = tmp_path / "profiles.sqlite3"
    asides = []
    for content in (b"first damaged file", b"second damaged file"):
        path.write_bytes(content * 50)
        with ProfileStore(path) as store:
            asides.append(store.recovered_from)
        path.unlink()
        for sidecar in tmp_path.glob("profiles.sqlite3-*"):
            sidecar.unlink()
    assert asides[0] != asides[1]
    assert [a.read_bytes()[:5] for a in asides] == [b"first", b"secon"]


def test_a_healthy_store_is_marked_as_ours(store: ProfileStore) -> None:
    conn = sqlite3.connect(store.path)
    try:
        assert conn.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        conn.close()


def test_a_row_with_broken_json_is_skipped_with_a_warning(
    store: ProfileStore, caplog: pytest.LogCaptureFixture
) -> None:
    good = make_profile(created_at=day(1))
    store.save(good)
    store.save(make_profile(DESKTOP, created_at=day(2)))
    conn = sqlite3.connect(store.path)
    with conn:
        cursor = conn.execute(
            "INSERT INTO profiles (fingerprint, llama_build, mode, created_at, described, json)"
            " VALUES (?, ?, 'fast', ?, 0, ?)",
            (LAPTOP, BUILD, "2025-05-09T10:00:00.000000+00:00", '{"fingerprint": "trunc'),
        )
    conn.close()
    with caplog.at_level(logging.WARNING, logger="app.stores.profile_store"):
        assert store.latest(LAPTOP) == good
        assert [s.fingerprint for s in store.list()] == [DESKTOP, LAPTOP]
    assert f"unreadable profile {cursor.lastrowid}" in caplog.text
    with pytest.raises(BadInputError, match="unreadable"):
        store.get(cursor.lastrowid)


# -- migrations --------------------------------------------------------------------------------


def m001_notes(conn: sqlite3.Connection) -> None:
    conn.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT NOT NULL)")


def m002_note_tags(conn: sqlite3.Connection) -> None:
    conn.execute("ALTER TABLE notes ADD COLUMN tags TEXT NOT NULL DEFAULT ''")


def test_migrations_apply_once_and_a_later_one_on_the_next_open(tmp_path: Path) -> None:
    path = tmp_path / "notes.sqlite3"
    for migrations, expected in (
        ([m001_notes], ["m001_notes"]),
        ([m001_notes], []),
        ([m001_notes, m002_note_tags], ["m002_note_tags"]),
        ([m001_notes, m002_note_tags], []),
    ):
        conn = sqlite3.connect(path)
        try:
            assert apply_migrations(conn, migrations) == expected
        finally:
            conn.close()
    conn = sqlite3.connect(path)
    try:
        assert applied_migrations(conn) == ["m001_notes", "m002_note_tags"]
        conn.execute("INSERT INTO notes (body, tags) VALUES ('x', 'y')")
    finally:
        conn.close()


def test_a_failing_migration_is_rolled_back_and_retried(tmp_path: Path) -> None:
    def m002_half_done(conn: sqlite3.Connection) -> None:
        conn.execute("CREATE TABLE tags (name TEXT)")
        raise RuntimeError("disk full, say")

    conn = sqlite3.connect(tmp_path / "notes.sqlite3")
    try:
        with pytest.raises(RuntimeError):
            apply_migrations(conn, [m001_notes, m002_half_done], table="_schema")
        assert applied_migrations(conn, "_schema") == ["m001_notes"]
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        assert "tags" not in tables and "notes" in tables
        assert apply_migrations(conn, [m001_notes, m002_note_tags], table="_schema") == [
            "m002_note_tags"
        ]
    finally:
        conn.close()


def test_migration_names_and_table_are_checked() -> None:
    conn = sqlite3.connect(":memory:")
    try:
        with pytest.raises(ValueError, match="duplicate"):
            apply_migrations(conn, [m001_notes, m001_notes])
        with pytest.raises(ValueError, match="identifier"):
            apply_migrations(conn, [m001_notes], table="x; DROP TABLE y")
    finally:
        conn.close()


def test_the_store_applies_its_migrations_once(tmp_path: Path) -> None:
    path = tmp_path / "profiles.sqlite3"
    ProfileStore(path).close()
    ProfileStore(path).close()
    conn = sqlite3.connect(path)
    try:
        assert applied_migrations(conn) == [m.__name__ for m in MIGRATIONS]
        assert apply_migrations(conn, MIGRATIONS) == []
    finally:
        conn.close()


# -- what running models taught the cost model -------------------------------------------------

DECODE = CorrectionKey(PlanFamily.CPU_ONLY, 1)
PROMPT = CorrectionKey(PlanFamily.CPU_ONLY, 256)


def model_file(folder: Path, name: str, size: int = 64) -> str:
    path = folder / name
    path.write_bytes(b"GGUF" + bytes(size - 4))
    return str(path)


def test_corrections_survive_reopening_keyed_by_profile_and_model(tmp_path: Path) -> None:
    path, profile = tmp_path / "profiles.sqlite3", make_profile()
    model, other_model = model_file(tmp_path, "a.gguf"), model_file(tmp_path, "b.gguf")
    learned = {DECODE: Correction(0.9, 400), PROMPT: Correction(-0.2, 3)}
    with ProfileStore(path) as store:
        store.save(profile)
        assert store.save_corrections(profile, model_key(model), learned) == 2
        store.save_corrections(profile, model_key(model), {DECODE: Correction(0.92, 401)})
    with ProfileStore(path) as reopened:
        assert reopened.corrections(profile, model_key(model)) == {
            DECODE: Correction(0.92, 401),
            PROMPT: Correction(-0.2, 3),
        }
        assert reopened.corrections(profile, model_key(other_model)) == {}
        newer = make_profile(created_at=day(2))  # a new profile: a new cost model
        assert reopened.corrections(newer, model_key(model)) == {}
        elsewhere = make_profile(fingerprint=DESKTOP)
        assert reopened.corrections(elsewhere, model_key(model)) == {}


def test_a_model_file_replaced_under_the_same_name_starts_fresh(store: ProfileStore) -> None:
    profile, folder = make_profile(), store.path.parent
    before = model_key(model_file(folder, "m.gguf", size=64))
    store.save_corrections(profile, before, {DECODE: Correction(0.5, 10)})
    after = model_key(model_file(folder, "m.gguf", size=128))
    assert after != before and store.corrections(profile, after) == {}


def test_a_pruned_profile_takes_its_corrections_with_it(store: ProfileStore) -> None:
    oldest, key = make_profile(created_at=day(1)), model_key(model_file(store.path.parent, "m"))
    store.save(oldest)
    store.save_corrections(oldest, key, {DECODE: Correction(0.5, 10)})
    for n in range(2, 2 + KEEP_PER_BUILD):
        store.save(make_profile(created_at=day(n)))
    assert store.corrections(oldest, key) == {}


def test_a_store_of_the_first_schema_is_upgraded_keeping_its_profiles(tmp_path: Path) -> None:
    path, profile = tmp_path / "profiles.sqlite3", make_profile()
    with ProfileStore(path) as first_schema:
        first_schema.save(profile)
    conn = sqlite3.connect(path)  # back to what the first schema wrote
    conn.execute("DROP TABLE step_corrections")
    conn.execute("DELETE FROM _migrations WHERE name = 'm002_step_corrections'")
    conn.execute("PRAGMA user_version = 1")
    conn.commit()
    conn.close()
    with ProfileStore(path) as upgraded:
        assert upgraded.recovered_from is None and upgraded.latest(LAPTOP) == profile
        upgraded.save_corrections(profile, "m", {DECODE: Correction(0.1, 1)})
        assert upgraded.corrections(profile, "m") == {DECODE: Correction(0.1, 1)}
