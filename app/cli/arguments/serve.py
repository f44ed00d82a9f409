"""`shardchat serve`: what it accepts (app.cli.commands.serve_command runs it)."""

from __future__ import annotations

import argparse
import os

from app.api.server_config import DEFAULT_PORT
from app.cli.arguments.arg_types import add_prompt_format_option, positive_int, size
from app.cli.arguments.run_later import run_later


def add_serve_command(commands: argparse._SubParsersAction) -> None:
    cmd = commands.add_parser(
        "serve",
        help="serve the model over an OpenAI-compatible HTTP API",
        description="Serve a model at /v1/chat/completions, /v1/completions and /v1/models, "
        "as LM Studio, Ollama and llama-server do. Concurrent requests decode together. "
        "Listens on 127.0.0.1 unless --host is given (then --api-key is required).",
    )
    cmd.add_argument("--model", "-m", metavar="PATH", help="GGUF model (default: the embedded one)")
    cmd.add_argument("--mmproj", metavar="PATH", help="its vision projector, to accept images")
    cmd.add_argument("--host", default="127.0.0.1", help="address to listen on (127.0.0.1)")
    cmd.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port ({DEFAULT_PORT})")
    cmd.add_argument(
        "--api-key",
        default=os.environ.get("SHARDCHAT_API_KEY"),
        help="clients must send 'Authorization: Bearer KEY' (default: $SHARDCHAT_API_KEY)",
    )
    cmd.add_argument(
        "--parallel", type=positive_int, default=4,
        help="requests decoded together (slots); more wait in a queue",
    )  # fmt: skip
    cmd.add_argument(
        "--ctx-per-slot", type=positive_int, default=4096, help="context tokens of each slot"
    )
    cmd.add_argument(
        "--max-queue", type=int, default=32, help="requests waiting for a slot before 429"
    )
    cmd.add_argument("--threads", type=positive_int, default=None, help="CPU threads")
    cmd.add_argument(
        "--vram", type=size, default=None, metavar="SIZE",
        help="VRAM budget for the planner (needs this machine's profile; 0: CPU only)",
    )  # fmt: skip
    cmd.add_argument(
        "--cors-origin", action="append", default=[], metavar="ORIGIN",
        help="let a web page from ORIGIN call the API (repeatable; '*' for any)",
    )  # fmt: skip
    cmd.add_argument(
        "--log-prompts", action="store_true", help="write request bodies to the log (off)"
    )
    cmd.add_argument(
        "--allow-model-switch", action="store_true",
        help="a request may name any model of the model list (shardchat models list): it is "
        "loaded once the requests in flight have ended (default: 404 naming the loaded one)",
    )  # fmt: skip
    add_prompt_format_option(cmd)
    cmd.set_defaults(command="serve", run=run_later("app.cli.commands.serve_command", "run_serve"))
