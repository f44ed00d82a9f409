"""The whole window with "Run models across these computers" switched on: the model loads
split onto two lent computers (real RPC servers of this build on loopback) in a process of
its own, and when one of them dies mid-reply the window stays, the chat is kept, the model
loads without it and the next message is answered."""

from __future__ import annotations

from PySide6.QtCore import Qt

from engine.generation.sampling import GREEDY
from tests.lent_computers import STORY, here_budget, kill_server, port
from tests.ui.conftest import TIMEOUT_MS, no_gpu
from ui.desktop import Desktop


def test_a_lent_computer_dying_mid_reply_leaves_the_window_and_the_chat(
    qtbot, desktops, two_lent, default_model_file, recorded_profile_here
) -> None:
    long_replies = GREEDY.with_changes(max_tokens=800)
    desktop = Desktop(str(default_model_file), recorded_profile_here, 4096, long_replies, no_gpu)
    desktops.append(desktop)
    qtbot.addWidget(desktop.window)
    with qtbot.waitSignal(desktop.bridge.model_loaded, timeout=TIMEOUT_MS):
        desktop.start()
    box, window = desktop.window.vram_panel.lent_computers, desktop.window
    qtbot.waitUntil(lambda: box.table.rowCount() == 2 and box.across.isVisibleTo(box))

    desktop.worker.here_bytes = int(here_budget(default_model_file))  # less than the model
    with qtbot.waitSignal(desktop.bridge.model_loaded, timeout=TIMEOUT_MS):
        box.across.click()
    port_a, port_b = (port(address) for address in two_lent)
    qtbot.waitUntil(lambda: "runs across these computers" in box.split.text())
    assert (
        f"split: blocks 0-9 here, 10-19 on 127.0.0.1:{port_a}, 20-29 on 127.0.0.1:{port_b}"
        in box.split.text()
    )
    assert "weights on the lent computers as planned" in box.split.text()
    assert window.plan_label.text().startswith("Split: blocks 0-9 here, 10-19 on 127.0.0.1:")

    with qtbot.waitSignal(desktop.bridge.token_streamed, timeout=TIMEOUT_MS):
        qtbot.keyClicks(window.input, STORY)
        qtbot.keyClick(window.input, Qt.Key.Key_Return)
    reloaded = qtbot.waitSignal(desktop.bridge.model_loaded, timeout=TIMEOUT_MS)
    with reloaded, qtbot.waitSignal(desktop.bridge.engine_lost, timeout=TIMEOUT_MS) as lost:
        kill_server(two_lent[0])
    assert lost.args[0].gone == (two_lent[0],)
    said = window.statusBar().currentMessage()
    assert f"the lent computer {two_lent[0]} stopped answering" in said
    qtbot.waitUntil(lambda: f"10-29 on 127.0.0.1:{port_b}" in box.split.text())
    conversation = desktop.chat.conversation_id
    assert [m.content for m in desktop.store.messages(conversation)][0] == STORY  # kept

    with qtbot.waitSignal(desktop.bridge.reply_finished, timeout=TIMEOUT_MS) as finished:
        qtbot.keyClicks(window.input, "Say the word yes.")
        qtbot.keyClick(window.input, Qt.Key.Key_Return)
    assert finished.args[0].text.strip()
    said = [(m.role, m.content) for m in desktop.store.messages(conversation)]
    assert said[0] == ("user", STORY) and said[-2] == ("user", "Say the word yes.")
    assert said[-1] == ("assistant", finished.args[0].text)
