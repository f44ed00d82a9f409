"""One message's Markdown as the HTML a QTextDocument draws: tables, lists, highlighted code.

Each message is rendered on its own, once (the chat view caches the result), so
the cost of showing a conversation does not grow with its length. markdown-it
parses CommonMark plus tables and strikethrough; raw HTML in a reply is shown
as text, never interpreted. Code blocks are coloured by Pygments with inline
styles (Qt's rich text has no style sheets for classes) on a panel of the
theme's code colour, with the language above and a `copy:N` link below once
the block is closed (a block still streaming in gets its link when its fence
closes). Qt's HTML subset decides the shapes: a one-cell table is the only
box with a background and padding that it draws.
"""

from __future__ import annotations

import contextlib
import html
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Protocol

from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import get_lexer_by_name, guess_lexer
from pygments.lexers.special import TextLexer
from pygments.util import ClassNotFound

if TYPE_CHECKING:
    from markdown_it import MarkdownIt
    from markdown_it.token import Token

THINK_SCHEME = "think"  # the fold line of a reasoning model's thinking
COPY_SCHEME, COPY_LABEL = "copy", "Copy code"  # copy:N under closed code block N
GUESS_MIN_CHARS = 40  # shorter untagged code is left plain: a guess on a line is noise


class MessageColours(Protocol):
    """What the renderer needs of a theme (ui.theme.Theme has these and more)."""

    @property
    def text(self) -> str: ...
    @property
    def muted_text(self) -> str: ...
    @property
    def code_background(self) -> str: ...
    @property
    def border(self) -> str: ...
    @property
    def link(self) -> str: ...
    @property
    def pygments_style(self) -> str: ...


@dataclass(frozen=True)
class RenderedMessage:
    html: str
    codes: tuple[str, ...]  # the code of each closed block, by its copy link's number


def render_message(
    markdown: str,
    colours: MessageColours,
    thinking: str = "",
    thinking_open: bool = False,
    streaming: bool = False,
) -> RenderedMessage:
    """The message as HTML; a reasoning model's thinking folds into one line above it,
    unless open (or still the only thing streamed: then it shows live)."""
    codes: list[str] = []
    env = {"colours": colours, "codes": codes, "lines": markdown.split("\n")}
    body = _parser().render(markdown + (" ▌" if streaming else ""), env)
    fold = _thinking_html(thinking, colours, thinking_open, live=streaming and not markdown)
    table = (
        f'<table border="1" cellspacing="0" cellpadding="5" style="border-color:{colours.border};'
        f' border-collapse:collapse">'
    )
    body = body.replace("<table>", table)
    page = f'<html><body style="color:{colours.text}">{fold}{body}</body></html>'
    return RenderedMessage(page, tuple(codes))


def _fence(
    _renderer: object, tokens: Sequence[Token], idx: int, _options: object, env: dict
) -> str:
    token, colours, codes = tokens[idx], env["colours"], env["codes"]
    link = ""
    if _is_closed(token, env["lines"]):
        link = (
            f'<p><a href="{COPY_SCHEME}:{len(codes)}" style="color:{colours.link}">'
            f"{COPY_LABEL}</a></p>"
        )
        codes.append(token.content)
    return _code_panel(token.content, token.info.strip(), colours) + link


def _code_block(
    _renderer: object, tokens: Sequence[Token], idx: int, _options: object, env: dict
) -> str:
    return _code_panel(tokens[idx].content, "", env["colours"])


@lru_cache(maxsize=1)
def _parser() -> MarkdownIt:
    """Made once, when the first message is drawn (or by warm_up after the model's first
    load): building the rule chains costs more than a message, and importing markdown-it
    (20-30 ms) would otherwise delay the window's first paint."""
    from markdown_it import MarkdownIt

    parser = MarkdownIt("commonmark", {"html": False, "breaks": False})
    parser.enable(["table", "strikethrough"])
    parser.add_render_rule("fence", _fence)
    parser.add_render_rule("code_block", _code_block)
    return parser


def _is_closed(token: Token, lines: list[str]) -> bool:
    if token.map is None:
        return False
    start, end = token.map
    closing = lines[end - 1].strip() if end - 1 > start and end - 1 < len(lines) else ""
    return closing.startswith(token.markup)


def _code_panel(code: str, info: str, colours: MessageColours) -> str:
    language = info.split()[0] if info else ""
    coloured = _highlighted(code.rstrip("\n"), language, colours.pygments_style)
    label = (
        f'<div style="color:{colours.muted_text}; font-size:small">{html.escape(language)}</div>'
        if language
        else ""
    )
    return (
        f'<table width="100%" cellspacing="0" cellpadding="8" bgcolor="{colours.code_background}"'
        f' style="border-color:{colours.border}"><tr><td>{label}'
        f'<pre style="font-family:monospace; white-space:pre-wrap">{coloured}</pre>'
        "</td></tr></table>"
    )


def _highlighted(code: str, language: str, style: str) -> str:
    try:
        if language:
            lexer = get_lexer_by_name(language)
        elif len(code) >= GUESS_MIN_CHARS:
            lexer = guess_lexer(code)
        else:
            lexer = TextLexer()
    except ClassNotFound:
        lexer = TextLexer()
    return highlight(code, lexer, _formatter(style)).rstrip("\n")


@lru_cache(maxsize=8)
def _formatter(style: str) -> HtmlFormatter:
    """One per style: making one reads the whole style (2 ms)."""
    return HtmlFormatter(noclasses=True, nowrap=True, style=style)


WARM_LANGUAGES = (
    "python", "bash", "console", "json", "javascript", "typescript", "c", "cpp", "rust", "go",
    "java", "html", "css", "yaml", "toml", "sql", "markdown", "diff",
)  # fmt: skip


def warm_up(styles: Sequence[str]) -> None:
    """Compile the common lexers and the themes' formatters ahead of the first reply with
    code (for a thread at start-up): a lexer compiles its rules when first made, about
    40 ms for Python's, which would otherwise land on the GUI thread mid-conversation."""
    for language in WARM_LANGUAGES:
        with contextlib.suppress(ClassNotFound):
            highlight("x = 1\n", get_lexer_by_name(language), _formatter(styles[0]))
    for style in styles:
        _formatter(style)
    _parser().render("warm *up*\n\n| a |\n|---|\n| 1 |\n")


def _thinking_html(thinking: str, colours: MessageColours, unfolded: bool, live: bool) -> str:
    if not thinking:
        return ""
    quoted = html.escape(thinking).replace("\n", "<br>")
    block = f'<p style="color:{colours.muted_text}"><i>{quoted}</i></p>'
    if live:
        return f'<p style="color:{colours.muted_text}"><b>Thinking…</b></p>{block}'
    action = "hide" if unfolded else "show"
    words = len(thinking.split())
    link = (
        f'<p><a href="{THINK_SCHEME}:0" style="color:{colours.muted_text}">'
        f"Thought for {words} words — click to {action}</a></p>"
    )
    return link + (block if unfolded else "")
