"""What the VRAM panel says of the computers lent to this one: each with its memory, the
budget ShardChat may fill, its link and its speed as measured, or that they were not."""

from __future__ import annotations

from app.screen_text.lent_computers_view import (
    NONE_YET,
    SPLITS_RUN_ACROSS,
    WHERE_SPLITS_RUN,
    LentComputersView,
    checking,
    failed,
    listed,
    running_across,
    with_split,
)
from app.stores.remote_machines import RemoteMachine
from engine.remote.link_measure import LinkFigures
from engine.remote.remote_speed import RemoteSpeed
from engine.remote.rpc_probe import RemoteDevice

GIB = 2**30


def machine(**changes: object) -> RemoteMachine:
    kept = {
        "address": "ssh://me@desk-pc:22",
        "added_at": "2026-12-04T20:00:00+00:00",
        "probed_at": "2026-12-04T20:00:00+00:00",
        "protocol": "7.0.0",
        "devices": (RemoteDevice(0, 14 * GIB, 16 * GIB),),
        "budget_bytes": 12 * GIB,
        "link": LinkFigures(0.31e-3, 0.94e9 / 8, 0.93e9 / 8),
        "speed": RemoteSpeed(0.001, 0.0031, 13 * 2**20, 0.84e-3, 1024, 256),
    }
    kept.update(changes)
    return RemoteMachine(**kept)


def test_a_measured_computer_is_one_row_of_its_figures() -> None:
    view = listed([machine()])
    (row,) = view.rows
    assert row.address == "ssh://me@desk-pc:22"
    assert row.memory == "14.0 GiB free of 16.0 GiB" and row.budget == "12.0 GiB"
    assert row.link == "0.31 ms, 0.94 / 0.93 Gbit/s"
    assert row.speed == "3.10x this one, +0.84 ms a step"
    assert view.note == WHERE_SPLITS_RUN and not view.busy and not view.error


def test_what_was_not_measured_or_given_says_so() -> None:
    (row,) = listed([machine(budget_bytes=None, link=None, speed=None)]).rows
    assert row.budget == "90% of what is free" and row.link == "not measured"
    assert row.speed == "not measured: add it again"


def test_checking_then_failing_keeps_the_list_and_says_why() -> None:
    view = checking(listed([machine()]), "tcp://10.0.0.9:50052")
    assert "Checking tcp://10.0.0.9:50052" in view.busy and len(view.rows) == 1
    view = failed(view, "cannot reach 10.0.0.9:50052: refused")
    assert not view.busy and view.error == "cannot reach 10.0.0.9:50052: refused"
    assert len(view.rows) == 1
    assert LentComputersView().note == NONE_YET


def test_with_the_switch_on_the_split_it_runs_is_said_and_outlives_a_new_list() -> None:
    view = running_across(listed([machine()]), True)
    view = with_split(view, "SmolLM2", "split: blocks 0-9 here, 10-29 on 10.0.0.9:50052", True)
    assert view.split == "SmolLM2 runs across these computers: split: blocks 0-9 here, " + (
        "10-29 on 10.0.0.9:50052"
    )
    assert view.note == SPLITS_RUN_ACROSS
    relisted = listed([machine(), machine(address="tcp://10.0.0.9:50052")], view)
    assert relisted.across and relisted.split == view.split and len(relisted.rows) == 2
    would = with_split(running_across(relisted, False), "SmolLM2", "split: blocks 0-29 here")
    assert would.split == "SmolLM2 across these computers: split: blocks 0-29 here"
    assert would.note == WHERE_SPLITS_RUN and with_split(would, "SmolLM2", "").split == ""
