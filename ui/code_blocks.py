"""Copy links under the code blocks of a Markdown text.

Qt renders Markdown without buttons, so each finished code block gets a link
line after it (`copy:N`) that the chat view answers by putting block N on the
clipboard. markdown-it finds the blocks, so fences inside lists, `~~~` fences
and code that merely mentions backticks are all handled as CommonMark says.
A block still streaming in (no closing fence yet) gets no link until it closes.
"""

from __future__ import annotations

from markdown_it import MarkdownIt

COPY_SCHEME = "copy"
COPY_LABEL = "Copy code"
_PARSER = MarkdownIt("commonmark")


def with_copy_links(markdown: str) -> tuple[str, list[str]]:
    """The text with a copy link after every closed code block, and those blocks' code."""
    lines = markdown.split("\n")
    insertions: list[tuple[int, str]] = []  # (line index to insert after, link line)
    codes: list[str] = []
    for token in _PARSER.parse(markdown):
        if token.type != "fence" or token.map is None:
            continue
        start, end = token.map
        closing = lines[end - 1].strip() if end - 1 > start else ""
        if not closing.startswith(token.markup):
            continue  # still open: the reply is streaming
        indent = lines[start][: len(lines[start]) - len(lines[start].lstrip())]
        insertions.append((end, f"{indent}[{COPY_LABEL}]({COPY_SCHEME}:{len(codes)})"))
        codes.append(token.content)
    for line_index, link in reversed(insertions):
        lines[line_index:line_index] = [link, ""]  # the blank keeps the next line its own
    return "\n".join(lines), codes
