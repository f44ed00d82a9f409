"""The VRAM panel names the GPU's llama.cpp backend and device, and says what it cannot know.

Built from overviews of GPUs as engine.hardware reports them: a described NVIDIA
laptop GPU (NVML's figures) and Mesa's lavapipe, a Vulkan device only ggml sees.
"""

from __future__ import annotations

from dataclasses import replace

from app.vram_overview import vram_overview
from engine.described_machines import DESCRIBED_MACHINES, described_hardware
from ui.vram_panel import VramPanel

GIB = 1 << 30


def nvidia_laptop():
    gpu = described_hardware(DESCRIBED_MACHINES["laptop-8gb"]).gpus[0]
    return replace(gpu, vram_used_bytes=GIB + GIB // 2, other_processes_bytes=GIB)


def lavapipe():
    """What the probe reports for lavapipe under the Vulkan build (tests/gpu checks it)."""
    return replace(
        nvidia_laptop(),
        name="llvmpipe (LLVM 15.0.6, 256 bits)",
        uuid="",
        vram_total_bytes=2 * GIB,
        vram_free_bytes=2 * GIB - GIB // 4,
        vram_used_bytes=GIB // 4,
        other_processes_bytes=0,
        pcie_generation_current=None,
        pcie_generation_max=None,
        pcie_width_current=None,
        pcie_width_max=None,
        backend="Vulkan",
        ggml_device="Vulkan0",
        other_processes_known=False,
    )


def panel_showing(qtbot, gpu) -> VramPanel:
    panel = VramPanel()
    qtbot.addWidget(panel)
    panel.show_overview(vram_overview(None, gpu))
    return panel


def test_an_nvidia_gpu_shows_its_backend_and_who_uses_its_vram(qtbot) -> None:
    panel = panel_showing(qtbot, replace(nvidia_laptop(), ggml_device="CUDA0"))
    assert panel.explanation.text() == "NVIDIA GeForce RTX 4060 Laptop GPU — CUDA (CUDA0), 8.0 GiB"
    assert panel.live.text() == "ShardChat 512.0 MiB · other programs 1.0 GiB · of 8.0 GiB"
    assert panel.slider.isEnabled() and panel.slider.maximum() == 8 << 10


def test_a_vulkan_gpu_shows_its_device_and_use_without_owners(qtbot) -> None:
    panel = panel_showing(qtbot, lavapipe())
    assert panel.explanation.text() == (
        "llvmpipe (LLVM 15.0.6, 256 bits) — Vulkan (Vulkan0), 2.0 GiB"
    )
    assert panel.live.text() == "in use 256.0 MiB (ShardChat and other programs) · of 2.0 GiB"
    assert panel.slider.isEnabled() and panel.slider.maximum() == 2 << 10
    assert "other programs" not in [label for label, _ in panel.bar.segments()]


def test_an_integrated_gpu_says_its_memory_is_system_ram(qtbot) -> None:
    iris = replace(lavapipe(), name="Intel(R) Iris(R) Xe Graphics", integrated=True)
    panel = panel_showing(qtbot, iris)
    assert panel.explanation.text().endswith(
        "— Vulkan (Vulkan0), 2.0 GiB of system RAM (integrated GPU)"
    )


def test_without_a_gpu_the_panel_says_so(qtbot) -> None:
    panel = panel_showing(qtbot, None)
    assert panel.explanation.text() == "no GPU found: the model runs on the CPU."
    assert panel.live.text() == "no GPU" and not panel.slider.isEnabled()
