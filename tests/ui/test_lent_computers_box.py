"""The VRAM panel's "Other computers": a computer that shares is added from the dialog's
values, checked and measured off the GUI thread, listed with its budget, and removed; an
address that leads nowhere is one line under the list."""

from __future__ import annotations

import pytest
from PySide6.QtWidgets import QDialogButtonBox

from app.lent.computers import kept_machines
from app.screen_text.lent_computers_view import NONE_YET, WHERE_SPLITS_RUN
from tests.lent_computers import endpoint, free_port
from ui.lent.lent_computers_box import AddComputerDialog, ComputerToAdd, LentComputersBox
from ui.lent.lent_computers_controller import LentComputersController


@pytest.fixture
def others(qtbot):
    box = LentComputersBox()
    qtbot.addWidget(box)
    controller = LentComputersController(box)
    yield box, controller
    controller.shutdown()


def test_a_sharing_computer_is_added_listed_with_its_budget_and_removed(
    qtbot, others, lend, default_model_file
) -> None:
    box, controller = others
    qtbot.waitUntil(lambda: box.note.text() == NONE_YET)
    address = f"tcp://{endpoint(lend())}"
    controller.add(ComputerToAdd(address, "1GiB", ""))
    assert "Checking" in box.busy.text() and not box.add.isEnabled()
    qtbot.waitUntil(lambda: box.table.rowCount() == 1, timeout=60_000)
    cells = [box.table.item(0, column).text() for column in range(box.table.columnCount())]
    assert cells[0] == address and "free of" in cells[1] and cells[2] == "1.0 GiB"
    assert cells[3].endswith("Gbit/s") and "x this one, +" in cells[4]
    assert box.note.text() == WHERE_SPLITS_RUN and box.add.isEnabled()
    # the loaded model, as chat --lent would run it now (here it fits this computer)
    controller.use_model(str(default_model_file), "SmolLM2", 4096)
    qtbot.waitUntil(lambda: box.split.isVisibleTo(box), timeout=10_000)
    assert box.split.text().startswith("SmolLM2 across these computers: split: blocks 0-29 here")
    assert [machine.address for machine in kept_machines()] == [address]  # as devices add keeps
    box.table.selectRow(0)
    assert box.remove.isEnabled()
    box.remove.click()
    qtbot.waitUntil(lambda: box.table.rowCount() == 0, timeout=10_000)
    assert kept_machines() == [] and box.note.text() == NONE_YET
    qtbot.waitUntil(lambda: not box.split.isVisibleTo(box), timeout=10_000)  # none to split onto


def test_an_address_that_leads_nowhere_is_one_line_and_nothing_is_kept(qtbot, others) -> None:
    box, controller = others
    port = free_port()
    controller.add(ComputerToAdd(f"tcp://127.0.0.1:{port}", "", ""))
    qtbot.waitUntil(lambda: box.error.isVisibleTo(box), timeout=30_000)
    assert f"cannot reach 127.0.0.1:{port}" in box.error.text() and "\n" not in box.error.text()
    assert box.table.rowCount() == 0 and box.add.isEnabled() and not box.busy.isVisibleTo(box)
    controller.add(ComputerToAdd("tcp://127.0.0.1:50052", "lots", ""))
    assert box.error.text().startswith("Budget:")
    assert kept_machines() == []


def test_the_dialog_gathers_an_address_its_budget_and_an_ssh_key(qtbot) -> None:
    dialog = AddComputerDialog()
    qtbot.addWidget(dialog)
    add = dialog.buttons.button(QDialogButtonBox.StandardButton.Ok)
    assert add.text() == "Add" and not add.isEnabled()  # nothing to add without an address
    dialog.address.setText("  ssh://me@desk-pc ")
    dialog.budget.setText("12GiB")
    dialog.identity.setText("~/.ssh/lab")
    assert add.isEnabled()
    assert dialog.computer() == ComputerToAdd("ssh://me@desk-pc", "12GiB", "~/.ssh/lab")
