"""The one llama.cpp build: its backend modules, loaded from llama-cpp-python's own folder.

Each case that chooses how ggml starts (a forced CPU variant, a hidden Vulkan driver)
runs `shardchat info --devices --json` in a process of its own, since ggml loads its
modules once per process; the cases about this process read what it loaded (`info
--devices` in process).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_run import CliRun

from engine.llama import backends
from engine.llama.ggml_devices import DeviceType, GgmlDevice, list_devices, offload_devices

SHARDCHAT = str(Path(sys.executable).parent / "shardchat")

# The instruction sets each x86 variant of ggml-cpu is built for (ggml/src/CMakeLists.txt
# of the vendored llama.cpp), as Linux's /proc/cpuinfo names them: Linux lists a feature
# there only when it has enabled its register state, so a variant whose flags are all
# listed is one that runs on this machine.
VARIANT_FLAGS = {
    "x64": set(),
    "sse42": {"sse4_2"},
    "sandybridge": {"sse4_2", "avx"},
    "ivybridge": {"sse4_2", "avx", "f16c"},
    "piledriver": {"sse4_2", "avx", "f16c", "fma"},
    "haswell": {"sse4_2", "avx", "f16c", "fma", "avx2", "bmi2"},
    "skylakex": {"sse4_2", "avx", "f16c", "fma", "avx2", "bmi2", "avx512f", "avx512cd",
                 "avx512vl", "avx512dq", "avx512bw"},
    "alderlake": {"sse4_2", "avx", "f16c", "fma", "avx2", "bmi2", "avx_vnni"},
}  # fmt: skip
AVX512 = VARIANT_FLAGS["skylakex"]
VARIANT_FLAGS |= {
    "cannonlake": AVX512 | {"avx512vbmi"},
    "cascadelake": AVX512 | {"avx512_vnni"},
    "icelake": AVX512 | {"avx512vbmi", "avx512_vnni"},
    "cooperlake": AVX512 | {"avx512_vnni", "avx512_bf16"},
    "zen4": AVX512 | {"avx512vbmi", "avx512_vnni", "avx512_bf16"},
    "sapphirerapids": AVX512 | {"avx512vbmi", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_int8"},
}


def devices_json(**env: str) -> dict:
    done = subprocess.run(
        [SHARDCHAT, "info", "--devices", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **env},
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def cpu_flags() -> set[str]:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            return set(line.partition(":")[2].split())
    raise AssertionError("no flags line in /proc/cpuinfo")


def test_every_module_of_the_build_is_accounted_for_and_the_cpu_runs_one() -> None:
    report = backends.start_ggml()
    assert report.loadable and report.failure is None
    shipped = {path.name for _, _, path in backends.module_files(Path(report.folder))}
    assert {m.file for m in report.modules} == shipped  # each once, loaded or skipped
    assert {"libggml-vulkan.so", "libggml-rpc.so"} <= shipped
    assert sum(1 for m in report.modules if m.backend == "cpu" and m.loaded) == 1
    assert all(m.note for m in report.modules if not m.loaded)  # a skip always says why
    rpc = next(m for m in report.modules if m.backend == "rpc")
    assert rpc.loaded and rpc.devices == ()  # RPC servers are added later, one by one
    assert list_devices()[-1].name == "CPU"  # the CPU module registered its device


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/cpuinfo")
def test_the_cpu_variant_is_the_widest_one_this_cpu_and_os_enable() -> None:
    report = backends.start_ggml()
    flags = cpu_flags()
    runnable = {name for name, needs in VARIANT_FLAGS.items() if needs <= flags}
    assert report.cpu_variant in runnable
    widest = max(len(VARIANT_FLAGS[name]) for name in runnable)
    assert len(VARIANT_FLAGS[report.cpu_variant]) == widest
    for module in report.modules:
        if module.backend == "cpu" and module.variant not in runnable:
            assert not module.loaded
            assert module.note == "needs instructions this CPU or its OS does not enable"


def test_a_forced_cpu_variant_is_loaded_and_a_model_still_answers(
    default_model_file: Path,
) -> None:
    forced = devices_json(SHARDCHAT_CPU_VARIANT="x64")
    assert forced["cpu_variant"] == "x64"
    done = subprocess.run(
        [SHARDCHAT, "--selftest"],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "SHARDCHAT_CPU_VARIANT": "sse42"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "selftest: CPU variant: sse42" in done.stdout
    assert "selftest: answer: " in done.stdout


def test_a_variant_this_cpu_cannot_run_is_not_forced() -> None:
    flags = cpu_flags() if sys.platform.startswith("linux") else set()
    impossible = next((name for name, needs in VARIANT_FLAGS.items() if not needs <= flags), None)
    if impossible is None:
        pytest.skip("this CPU runs every variant")
    chosen = devices_json(SHARDCHAT_CPU_VARIANT=impossible)
    assert chosen["cpu_variant"] != impossible
    assert chosen["cpu_variant"] in VARIANT_FLAGS


def test_without_a_vulkan_driver_the_cpu_answers_and_the_reason_is_one_line() -> None:
    missing = "/nonexistent/no_icd.json"
    shown = devices_json(VK_ICD_FILENAMES=missing, VK_DRIVER_FILES=missing)
    vulkan = next(m for m in shown["modules"] if m["backend"] == "vulkan")
    assert not vulkan["loaded"]
    assert vulkan["note"] == "the Vulkan loader found no driver (no ICD installed)"
    assert shown["gpu_used"] == []
    assert "libggml-vulkan.so: the Vulkan loader found no driver" in shown["why_no_gpu"]
    assert [d["name"] for d in shown["devices"]] == ["CPU"]


def test_info_devices_prints_the_modules_devices_and_the_gpu_used(shardchat: CliRun) -> None:
    done = shardchat("info", "--devices")  # in this process: ggml as it started here
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    variant = backends.start_ggml().cpu_variant
    assert any(line.startswith("backends: modules from ") for line in lines)
    assert f"CPU variant: {variant}" in done.stdout
    assert f"  libggml-cpu-{variant}.so: loaded (devices: CPU)" in lines
    assert any(line.startswith("  CPU ") for line in lines)
    assert lines[-1].startswith("GPU used ")


def test_info_wants_a_model_or_devices_not_both(shardchat: CliRun) -> None:
    for args in (["info"], ["info", "default", "--devices"]):
        done = shardchat(*args)
        assert done.returncode == 2 and "Traceback" not in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1


def gpu(name: str, backend: str, pci: str | None, kind: DeviceType = DeviceType.GPU) -> GgmlDevice:
    return GgmlDevice(name, f"{backend} card", kind, backend, 1 << 30, 8 << 30, pci)


def test_a_gpu_seen_by_cuda_and_vulkan_is_used_once_through_the_first_registered() -> None:
    """llama.cpp's rule (src/llama.cpp: same device id, keep the first registered)."""
    cuda0 = gpu("CUDA0", "CUDA", "0000:01:00.0")
    vulkan0 = gpu("Vulkan0", "Vulkan", "0000:01:00.0")
    vulkan1 = gpu("Vulkan1", "Vulkan", "0000:02:00.0")  # an AMD card beside it
    cpu = GgmlDevice("CPU", "EPYC", DeviceType.CPU, "CPU", 0, 0)
    assert offload_devices((cuda0, vulkan0, vulkan1, cpu)) == (cuda0, vulkan1)
    assert offload_devices((vulkan0, cuda0, cpu)) == (vulkan0,)
    unknown = gpu("Vulkan0", "Vulkan", None)  # no PCI id: never merged
    assert offload_devices((cuda0, unknown)) == (cuda0, unknown)
    rpc = gpu("RPC0", "RPC", None)
    igpu = gpu("Vulkan0", "Vulkan", "0000:00:02.0", DeviceType.IGPU)
    assert offload_devices((rpc, igpu, cpu)) == (igpu,)  # an iGPU only where no GPU is


def test_cuda_registers_before_vulkan_unless_the_setting_says_vulkan(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    shipped = ["cpu", "cuda", "rpc", "vulkan"]
    order = backends._load_order(shipped)
    assert order.index("cuda") < order.index("vulkan") and order[-1] == "cpu"
    monkeypatch.setenv(backends.GPU_BACKEND_ENV, "vulkan")
    order = backends._load_order(shipped)
    assert order.index("vulkan") < order.index("cuda") and order[-1] == "cpu"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux's device nodes")
def test_whether_a_gpu_may_register_is_told_from_drivers_and_device_nodes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No child process for the device list where no GPU can appear: a machine whose only
    Vulkan driver is lavapipe, or that has no GPU device node at all."""
    lavapipe, radeon = tmp_path / "lvp_icd.x86_64.json", tmp_path / "radeon_icd.x86_64.json"
    lavapipe.write_text("{}")
    radeon.write_text("{}")
    monkeypatch.delenv("GGML_VK_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("VK_ICD_FILENAMES", raising=False)
    monkeypatch.setattr(backends, "_gpu_device_nodes", lambda: ["/dev/dri/renderD128"])
    monkeypatch.setenv("VK_DRIVER_FILES", str(lavapipe))
    assert not backends.gpu_may_register()
    monkeypatch.setenv("VK_DRIVER_FILES", f"{lavapipe}:{radeon}")
    assert backends.gpu_may_register()
    monkeypatch.setattr(backends, "_gpu_device_nodes", lambda: [])  # a radeon driver, no GPU
    assert not backends.gpu_may_register()
    monkeypatch.setenv("GGML_VK_VISIBLE_DEVICES", "0")  # lavapipe asked for by name
    assert backends.gpu_may_register()
