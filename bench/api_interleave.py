"""A GUI chat and API clients on one engine: does either starve the other?

The engine worker owns the one model and advances each activity one
llama_decode at a time in turn: a step of the GUI's reply (the model's own
context, one sequence), then a step of all the API's streams together (the
API pool's context, one sequence per client), and so on. So a GUI reply
slows down while API streams run, but never waits for them to finish, and
the API streams keep going while the GUI replies.

This measures, with the default model in one process, side by side:

- the GUI reply's decode tokens/s alone and while N API streams run;
- the API's aggregate tokens/s alone and while the GUI replies.

    .venv/bin/python bench/api_interleave.py [--clients 8] [--threads 2]

Last run (2 cores, default model, 8 clients, 96 tokens each, GUI reply 96 tokens):
GUI reply 111.7 tokens/s alone, 18.8 beside the API streams (0.17x); the 8 API streams
188.3 tokens/s alone, 140.9 beside the GUI reply (0.75x): about one share per stream.
"""

from __future__ import annotations

import argparse
import asyncio
import queue
import sys
import threading
import time
from dataclasses import dataclass

import openai

from app.api.server import ApiServer, ServerConfig
from app.events import EngineEvent, ModelLoaded, ReplyFinished, RequestFailed, TokenStreamed
from app.load_planning import LoadRequest
from app.worker import EngineWorker
from engine.generation.sampling import GREEDY
from engine.model.default_model import default_model_path

GUI_PROMPT = "Tell me a long story about a lighthouse keeper and a storm."
API_PROMPTS = [f"Write a paragraph about the number {n} and where it appears." for n in range(64)]


@dataclass
class Figures:
    tokens: int
    seconds: float

    @property
    def rate(self) -> float:
        return self.tokens / self.seconds if self.seconds else 0.0


class Engine:
    def __init__(self, threads: int, clients: int) -> None:
        self.events: queue.Queue[EngineEvent] = queue.Queue()
        self.worker = EngineWorker(self.events.put).start()
        request = LoadRequest(str(default_model_path()), 2048, None, n_threads=threads)
        loaded = self.wait(self.worker.load_planned(request))
        if not isinstance(loaded, ModelLoaded):
            sys.exit(f"could not load the default model: {loaded}")
        config = ServerConfig(port=0, n_slots=clients, n_ctx_per_slot=1024, max_queue=64)
        self.server = ApiServer(self.worker, config)
        self.base_url = self.server.start() + "/v1"
        assert self.worker.api.model is not None
        self.model_id = self.worker.api.model.id

    def wait(self, request_id: int) -> EngineEvent:
        while True:
            event = self.events.get(timeout=600)
            if isinstance(event, TokenStreamed):
                continue
            if getattr(event, "request_id", None) == request_id:
                if isinstance(event, RequestFailed):
                    sys.exit(f"request failed: {event.message}")
                return event

    def gui_reply(self, max_tokens: int) -> Figures:
        self.wait(self.worker.start_conversation())
        settings = GREEDY.with_changes(max_tokens=max_tokens, stop_loops=False)
        done = self.wait(self.worker.send_message(GUI_PROMPT, settings))
        assert isinstance(done, ReplyFinished)
        stats = done.stats
        decode_seconds = (stats.generated_tokens - 1) / max(stats.decode_tokens_per_s, 1e-9)
        return Figures(stats.generated_tokens - 1, decode_seconds)

    def close(self) -> None:
        self.server.stop()
        self.worker.shutdown()


class ApiLoad:
    """N clients streaming on a thread of their own; counts tokens (content chunks) per second
    inside a window the caller opens and closes."""

    def __init__(self, engine: Engine, clients: int, max_tokens: int, rounds: int) -> None:
        self.engine, self.clients, self.max_tokens, self.rounds = (
            engine,
            clients,
            max_tokens,
            rounds,
        )
        self.started = threading.Event()
        self.stamps: list[float] = []
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)

    def start(self) -> ApiLoad:
        self._thread.start()
        return self

    def join(self) -> None:
        self._thread.join()

    def tokens_between(self, start: float, end: float) -> int:
        return sum(1 for t in list(self.stamps) if start <= t < end)

    async def _run(self) -> None:
        client = openai.AsyncOpenAI(base_url=self.engine.base_url, api_key="x", max_retries=0)
        running = [0]

        async def one(index: int) -> None:
            for turn in range(self.rounds):
                prompt = API_PROMPTS[(index * self.rounds + turn) % len(API_PROMPTS)]
                stream = await client.chat.completions.create(
                    model=self.engine.model_id, messages=[{"role": "user", "content": prompt}],
                    temperature=0, max_tokens=self.max_tokens, stream=True,
                )  # fmt: skip
                async for chunk in stream:
                    if chunk.choices and chunk.choices[0].delta.content:
                        if not self.started.is_set():
                            running[0] += 1
                            if running[0] >= self.clients:
                                self.started.set()
                        self.stamps.append(time.perf_counter())

        await asyncio.gather(*(one(i) for i in range(self.clients)))
        await client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=96)
    args = parser.parse_args()
    engine = Engine(args.threads, args.clients)
    try:
        engine.gui_reply(8)  # warm-up
        gui_alone = engine.gui_reply(args.max_tokens)

        alone = ApiLoad(engine, args.clients, args.max_tokens, 1).start()
        alone.join()
        api_alone = Figures(len(alone.stamps), alone.stamps[-1] - alone.stamps[0])

        both = ApiLoad(engine, args.clients, args.max_tokens * 4, 1).start()
        both.started.wait(600)
        opened = time.perf_counter()
        gui_with_api = engine.gui_reply(args.max_tokens)
        closed = time.perf_counter()
        api_with_gui = Figures(both.tokens_between(opened, closed), closed - opened)
        both.join()
    finally:
        engine.close()
    print(f"{'':38s} {'alone':>10s} {'together':>10s} {'ratio':>7s}")
    rows = [
        ("GUI reply, decode tokens/s", gui_alone.rate, gui_with_api.rate),
        (f"API, {args.clients} streams, tokens/s (aggregate)", api_alone.rate, api_with_gui.rate),
    ]
    for name, single, shared in rows:
        print(f"{name:38s} {single:10.1f} {shared:10.1f} {shared / single:7.2f}x")


if __name__ == "__main__":
    main()
