"""Exporting a conversation as Markdown, and `shardchat chats`: a real store, real files."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from markdown_it import MarkdownIt
from markdown_it.token import Token

from app.cli.main import main
from app.conversation.chat_export import conversation_markdown, export_conversation
from app.stores.chat_store import ChatStore
from engine.errors import BadInputError
from engine.model.image_input import ImageFile

CODE = 'def greet(name):\n    return f"hello {name}"\n'
ANSWER = f"Here is a function:\n\n```python\n{CODE}```\n\nCall it with a name."
THINKING = "The user wants a greeting.\n\nA one-line function will do."


@pytest.fixture
def store(isolated_home: Path) -> Iterator[ChatStore]:
    with ChatStore() as chats:  # the default file under SHARDCHAT_HOME, as the CLI opens it
        yield chats


@pytest.fixture
def conversation(store: ChatStore) -> int:
    """A system prompt, a user message with two images, a thinking reply, a reply cut short."""
    created = store.create_conversation("Greeting code", system_prompt="Be brief.\n\nUse Python.")
    conversation_id = created.conversation_id
    store.add_message(
        conversation_id,
        "user",
        "Write a greeting function like the ones in these screenshots.",
        images=[ImageFile("shot_1.png", b"\x89PNG one"), ImageFile("shot*2.png", b"\x89PNG two")],
    )
    reply = store.add_message(conversation_id, "assistant", "", complete=False).message_id
    assert reply is not None
    store.update_message(reply, ANSWER, complete=True, thinking=THINKING)
    store.add_message(conversation_id, "user", "And a farewell one?")
    store.add_message(conversation_id, "assistant", "Sure:\n\n```python\ndef bye(", complete=False)
    return conversation_id


def tokens_of(markdown: str) -> list[Token]:
    return MarkdownIt("commonmark").parse(markdown)


def headings(tokens: list[Token]) -> list[tuple[str, str]]:
    """Each heading's level and its text as rendered (escapes resolved)."""
    return [
        (token.tag, "".join(child.content for child in tokens[i + 1].children or []))
        for i, token in enumerate(tokens)
        if token.type == "heading_open"
    ]


def test_the_document_has_the_title_header_system_prompt_and_each_speaker_in_order(
    store: ChatStore, conversation: int
) -> None:
    when = datetime(2025, 3, 4, 6, 7, tzinfo=timezone(timedelta(hours=1)))
    markdown = conversation_markdown(store, conversation, exported_at=when)
    tokens = tokens_of(markdown)

    assert headings(tokens) == [
        ("h1", "Greeting code"),
        ("h2", "You"),
        ("h2", "Assistant"),
        ("h2", "You"),
        ("h2", "Assistant"),
    ]
    header = tokens[4]  # the paragraph after the title
    assert header.type == "inline"
    assert [t.type for t in header.children or []] == ["em_open", "text", "em_close"]
    assert header.content == (
        "*Exported from ShardChat on 2025-03-04 05:07 (UTC) · 4 messages*"
    )  # the hour given in UTC+1 is named in UTC
    quote_start = next(i for i, t in enumerate(tokens) if t.type == "blockquote_open")
    assert tokens[quote_start - 2].content == "**System prompt**"
    quoted = [t.content for t in tokens[quote_start:] if t.type == "inline"][:2]
    assert quoted == ["Be brief.", "Use Python."]  # both paragraphs inside the quote
    assert tokens[quote_start + 4].type == "paragraph_open"  # second paragraph, still quoted
    assert quote_start < markdown.index("## You")


def test_images_are_named_in_italics_not_embedded(store: ChatStore, conversation: int) -> None:
    markdown = conversation_markdown(store, conversation)
    tokens = tokens_of(markdown)
    image_lines = [
        "".join(child.content for child in t.children or [])
        for t in tokens
        if t.type == "inline" and t.content.startswith("*[image:")
    ]
    assert image_lines == ["[image: shot_1.png]", "[image: shot*2.png]"]  # '*' did not italicise
    for line in (t for t in tokens if t.type == "inline" and "[image:" in t.content):
        assert [c.type for c in line.children or []][0] == "em_open"
    assert "PNG" not in markdown and "![" not in markdown
    you = markdown.index("## You")
    assert you < markdown.index("*[image: shot") < markdown.index("Write a greeting")


def test_thinking_sits_in_a_details_block_above_the_answer_and_code_is_kept_as_it_is(
    store: ChatStore, conversation: int
) -> None:
    markdown = conversation_markdown(store, conversation)
    tokens = tokens_of(markdown)
    html = [(i, t.content.strip()) for i, t in enumerate(tokens) if t.type == "html_block"]
    assert [content for _, content in html] == [
        "<details><summary>Thinking</summary>",
        "</details>",
    ]
    (opened, _), (closed, _) = html
    inside = [t.content for t in tokens[opened:closed] if t.type == "inline"]
    assert inside == THINKING.split("\n\n")  # its paragraphs stay Markdown inside the block
    fences = [t for t in tokens if t.type == "fence"]
    assert fences[0].info == "python" and fences[0].content == CODE
    assert f"```python\n{CODE}```" in markdown  # byte for byte
    answer = next(i for i, t in enumerate(tokens) if t.content == "Here is a function:")
    assert closed < answer < tokens.index(fences[0])
    assert markdown.count("<details>") == 1  # only the reply that thought has the block


def test_a_reply_cut_short_is_marked_and_its_open_code_fence_does_not_swallow_the_rest(
    store: ChatStore, conversation: int
) -> None:
    markdown = conversation_markdown(store, conversation)
    tokens = tokens_of(markdown)
    last_fence = [t for t in tokens if t.type == "fence"][-1]
    assert last_fence.content == "def bye(\n"  # closed right after what the model said
    last_inline = [t for t in tokens if t.type == "inline"][-1]
    assert last_inline.content == "*(reply cut short)*"
    assert [c.type for c in last_inline.children or []][0] == "em_open"
    assert markdown.count("*(reply cut short)*") == 1  # the complete reply is not marked
    assert markdown.endswith("*(reply cut short)*\n")


def test_an_open_fence_in_the_middle_of_a_conversation_leaves_the_next_heading_a_heading(
    store: ChatStore,
) -> None:
    cid = store.create_conversation("Stopped at max tokens").conversation_id
    store.add_message(cid, "user", "Show me")
    store.add_message(cid, "assistant", "~~~~bash\nls -l\n```\n")  # ``` does not close ~~~~
    store.add_message(cid, "user", "Thanks")
    tokens = tokens_of(conversation_markdown(store, cid))
    assert headings(tokens) == [
        ("h1", "Stopped at max tokens"),
        ("h2", "You"),
        ("h2", "Assistant"),
        ("h2", "You"),
    ]
    assert [t.content for t in tokens if t.type == "fence"] == ["ls -l\n```\n"]


def test_without_a_system_prompt_there_is_no_quote_and_a_heading_hash_is_kept(
    store: ChatStore,
) -> None:
    cid = store.create_conversation("Issue #").conversation_id
    store.add_message(cid, "user", "Hi")
    markdown = conversation_markdown(store, cid)
    assert "System prompt" not in markdown and ">" not in markdown
    assert headings(tokens_of(markdown))[0] == ("h1", "Issue #")
    assert "· 1 message*" in markdown
    empty = store.create_conversation("C#").conversation_id
    assert headings(tokens_of(conversation_markdown(store, empty))) == [("h1", "C#")]


def test_an_unknown_conversation_is_bad_input(store: ChatStore) -> None:
    with pytest.raises(BadInputError, match="no conversation with id 42"):
        conversation_markdown(store, 42)


def test_export_writes_the_whole_document_and_leaves_no_temp_file(
    store: ChatStore, conversation: int, tmp_path: Path
) -> None:
    target = tmp_path / "out" / "greeting.md"
    target.parent.mkdir()
    target.write_text("an older export")
    assert export_conversation(store, conversation, target) == target
    written = target.read_text(encoding="utf-8")
    expected = conversation_markdown(store, conversation)
    assert _without_header(written) == _without_header(expected)
    assert written.endswith("*(reply cut short)*\n")
    assert sorted(p.name for p in target.parent.iterdir()) == ["greeting.md"]


def test_export_refuses_a_folder_that_does_not_exist_and_creates_nothing(
    store: ChatStore, conversation: int, tmp_path: Path
) -> None:
    target = tmp_path / "missing" / "greeting.md"
    with pytest.raises(BadInputError, match="does not exist") as refused:
        export_conversation(store, conversation, target)
    assert "\n" not in str(refused.value)
    assert not target.parent.exists()
    with pytest.raises(BadInputError, match="is a folder"):
        export_conversation(store, conversation, tmp_path)


# -- the command line --------------------------------------------------------------------------


def one_line_error(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("shardchat: error:"), err
    assert "Traceback" not in err
    return lines[0]


def test_chats_lists_conversations_newest_first_as_a_table_and_as_json(
    store: ChatStore, conversation: int, capsys: pytest.CaptureFixture[str]
) -> None:
    newer = store.create_conversation("Weather talk").conversation_id
    store.add_message(newer, "user", "Rain tomorrow?")

    assert main(["chats"]) == 0
    rows = capsys.readouterr().out.splitlines()
    assert rows[0].split() == ["id", "updated", "(UTC)", "messages", "title"]
    assert [row.split()[0] for row in rows[1:]] == [str(newer), str(conversation)]
    assert re.fullmatch(rf"\s*{newer}  \d{{4}}-\d\d-\d\d \d\d:\d\d\s+1  Weather talk", rows[1])
    assert rows[2].endswith("  4  Greeting code")

    assert main(["chats", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [(c["id"], c["title"], c["messages"]) for c in listed] == [
        (newer, "Weather talk", 1),
        (conversation, "Greeting code", 4),
    ]
    assert listed[0]["updated_at"] == store.conversation(newer).updated_at


def test_chats_with_no_history_says_so_on_stderr_only(
    store: ChatStore, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["chats"]) == 0
    out, err = capsys.readouterr()
    assert out == "" and "no saved conversations" in err
    assert main(["chats", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []


def test_chats_search_finds_by_message_text_and_title(
    store: ChatStore, conversation: int, capsys: pytest.CaptureFixture[str]
) -> None:
    other = store.create_conversation("Weather talk").conversation_id
    assert main(["chats", "search", "FAREWELL"]) == 0  # a message, any case
    rows = capsys.readouterr().out.splitlines()
    assert len(rows) == 2 and rows[1].endswith("Greeting code")
    assert main(["chats", "search", "weather", "--json"]) == 0  # a title
    assert [c["id"] for c in json.loads(capsys.readouterr().out)] == [other]
    assert main(["chats", "--json", "search", "weather"]) == 0  # --json either side
    assert [c["id"] for c in json.loads(capsys.readouterr().out)] == [other]
    assert main(["chats", "search", "no such words"]) == 0
    out, err = capsys.readouterr()
    assert out == "" and "no conversation contains 'no such words'" in err


def test_chats_export_prints_the_markdown_or_writes_the_file(
    store: ChatStore, conversation: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["chats", "export", str(conversation)]) == 0
    out, err = capsys.readouterr()
    assert _without_header(out) == _without_header(conversation_markdown(store, conversation))
    assert err == ""

    target = tmp_path / "greeting.md"
    assert main(["chats", "export", str(conversation), "--out", str(target)]) == 0
    out, err = capsys.readouterr()
    assert out == "" and str(target) in err
    assert _without_header(target.read_text(encoding="utf-8")) == _without_header(
        conversation_markdown(store, conversation)
    )


def test_chats_export_refuses_an_unknown_id_and_a_missing_folder_in_one_line(
    store: ChatStore, conversation: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["chats", "export", "999"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and one_line_error(err) == "shardchat: error: no conversation with id 999"

    target = tmp_path / "missing" / "greeting.md"
    assert main(["chats", "export", str(conversation), "--out", str(target)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "does not exist" in one_line_error(err)
    assert not target.parent.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shardchat-home"]  # nothing left


def _without_header(markdown: str) -> str:
    """The document less its export-time line (the minute may turn between two exports)."""
    return re.sub(r"\*Exported from ShardChat on [^*]*\*", "*Exported*", markdown, count=1)
