"""Does llama.cpp read this model file? Asked in a child process, so an abort costs the child.

`engine.model.gguf_checks` refuses every value we know llama.cpp would abort
on, but llama.cpp asserts in places no list keeps up with. A model is checked
here once, when it enters the model list (`app.stores.model_library`): llama.cpp
reads its header, hyper-parameters, vocabulary and tensor table without
allocating or reading a single weight (`no_alloc`, as its own `--fit` does),
then builds the worst-case graph of a small context. That is where load-time
asserts fire, and it takes a fraction of a second even for a model of tens of
gigabytes (the child's start and imports make it about 1.5 s in all). A crash,
a hang or a refusal becomes a ModelFileError carrying llama.cpp's own reason
or assertion, and the app goes on.
"""

from __future__ import annotations

import os
import threading

import llama_cpp

from engine.child_process import run_in_child
from engine.errors import ModelFileError
from engine.llama import backends
from engine.llama import log_capture as llama_log

CHECK_TIMEOUT_S = 120.0  # a tokenizer of 250k tokens reads in seconds; a hang does not end
_CHECK_CONTEXT = 256
_ANSWERS_LOCK = threading.Lock()
_answers: dict[tuple[str, int, int], str] = {}  # file version -> why it fails ("" passes)


def check_loads_in_child(path: str | os.PathLike[str], timeout_s: float = CHECK_TIMEOUT_S) -> None:
    """Refuse (ModelFileError) a model file that llama.cpp cannot load, or dies loading.

    A file version (path, size, modification time) is asked about once in this
    process: an import checks on a reader thread and lists the file (or refuses
    it) on the GUI thread, which must not wait for a child.
    """
    version = _version(path)
    with _ANSWERS_LOCK:
        answer = _answers.get(version)
    if answer is None:
        outcome = run_in_child(
            read_without_weights, (os.fspath(path),), timeout_s, label="file-check"
        )
        answer = "" if outcome.ok else _reason(outcome.failure or "")
        with _ANSWERS_LOCK:
            _answers[version] = answer
    if answer:
        raise ModelFileError(f"{path}: llama.cpp cannot load it: {answer}")


def _reason(failure: str) -> str:
    reason = failure.removeprefix("ModelFileError: ")
    if "GGML_ASSERT" in reason:  # "crashed (signal 6, SIGABRT): /src/x.cpp:12: GGML_ASSERT(..."
        died, _, assertion = reason.partition(": ")
        reason = f"{died}: GGML_ASSERT{assertion.partition('GGML_ASSERT')[2]}"
    return reason


def _version(path: str | os.PathLike[str]) -> tuple[str, int, int]:
    stat = os.stat(path)
    return os.path.realpath(path), stat.st_size, stat.st_mtime_ns


def read_without_weights(path: str) -> None:
    """In the child: llama.cpp's whole load and a context's graph, no weights read or placed.

    Its ERROR lines go to stderr, where an abort's assertion also lands, so the
    parent's last line of stderr is llama.cpp's own reason.
    """
    os.environ["GGML_NO_BACKTRACE"] = "1"  # an abort prints its assertion, not a gdb session
    errors = llama_log.ErrorLines()
    llama_log.LOGGER.addHandler(errors)  # for the child's whole life: it ends after this
    llama_log.install()
    backends.start_ggml()
    params = llama_cpp.llama_model_default_params()
    params.n_gpu_layers = 0
    params.no_alloc = True
    params.load_mode = llama_cpp.LLAMA_LOAD_MODE_NONE
    model = llama_cpp.llama_model_load_from_file(os.fsencode(path), params)
    if not model:
        raise ModelFileError(errors.reason or "the model could not be read")
    try:
        context_params = llama_cpp.llama_context_default_params()
        context_params.n_ctx = context_params.n_batch = context_params.n_ubatch = _CHECK_CONTEXT
        context = llama_cpp.llama_init_from_model(model, context_params)
        if not context:
            raise ModelFileError(errors.reason or "no context could be made for it")
        llama_cpp.llama_free(context)
    finally:
        llama_cpp.llama_model_free(model)
