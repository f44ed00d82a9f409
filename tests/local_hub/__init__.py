"""A local Hugging Face Hub for tests and benchmarks (no network on our machines).

    from local_hub import LocalHub, publish_test_repos

    with LocalHub() as hub:
        repos = publish_test_repos(hub, workdir)
        HfApi(endpoint=hub.url).list_models(search="tiny", filter="gguf")

Not a pytest plugin: benchmarks import it with ``sys.path.insert(0, "tests")``.
"""

from .files import GgufHeader, GgufHeaderError, HubFile, read_gguf_header
from .repos import TEST_TOKEN, TestRepos, publish_test_repos, qwen3_header
from .server import Faults, LocalHub, RequestRecord

__all__ = [
    "TEST_TOKEN",
    "Faults",
    "GgufHeader",
    "GgufHeaderError",
    "HubFile",
    "LocalHub",
    "RequestRecord",
    "TestRepos",
    "publish_test_repos",
    "qwen3_header",
    "read_gguf_header",
]
