"""Profiles and machines in words: the text `shardchat profile` prints and the wizard shows.

The CLI and the first-launch wizard describe the same figures; keeping the
wording in one UI-free module means they never disagree, and the phrasing
can be tested without a terminal or a window. Rows are (label, value) pairs
so each front end lays them out its own way.
"""

from __future__ import annotations

from app.model_lifecycle.auto_budget import AutoBudget
from app.screen_text.units import format_bytes, format_duration
from engine.machine.gpu_probe import NO_GPU_FOUND
from engine.machine.hardware_info import GpuInfo, HardwareInfo
from engine.machine.profile import KernelShape, Profile, Quietness
from engine.planning.prediction_range import sureness

_SUMMARY_TOKENS = (1, 16, 256)

Row = tuple[str, str]


# -- the CLI's summary -------------------------------------------------------------------------


def render_profile(profile: Profile) -> str:
    """A short human summary: throughput by quant at the best thread count, bandwidths, GPU."""
    described = " (described, not measured)" if profile.is_described else ""
    token_counts = " / ".join(map(str, _SUMMARY_TOKENS))
    lines = [
        f"profile        {profile.mode.value}{described}, {profile.created_at}, "
        f"took {profile.duration_s:.1f} s",
        f"machine        {_machine(profile)}",
        f"llama.cpp      {profile.llama_build}",
        f"GFLOP/s        at the best thread count, for {token_counts} tokens",
    ]
    lines += [f"  {line}" for line in _throughput_lines(profile)]
    lines += [
        f"DRAM read      {profile.dram_read_gbps:.1f} GB/s",
        f"repacking      {_repack(profile)}",
        f"fixed costs    {_fixed(profile)}",
        f"attention      {_attention(profile)}",
        f"GPU            {_gpu(profile)}",
        f"unusable       {_unusable(profile)}",
        f"machine load   {machine_load_text(profile)}",
    ]
    return "\n".join(lines)


def machine_load_text(profile: Profile) -> str:
    """How busy other programs kept the machine while it was measured, and what to do.

    A busy profile is stored but its figures are slower than the machine is, so
    every summary of it says so and offers the remedy; one stored before the load
    was recorded says that much instead of pretending it was quiet.
    """
    load = profile.machine_load
    if load is None:
        return "described, not measured" if profile.is_described else "not recorded"
    repeated = f"; {_steps(load.steps_repeated)} measured again" if load.steps_repeated else ""
    share = f"other programs used {100 * load.other_cpu_share:.0f}% of the processor{repeated}"
    if load.verdict is Quietness.QUIET:
        return f"quiet ({share})"
    worst = f"{100 * load.busiest_share:.0f}% during {load.busiest_step}"
    if load.verdict is Quietness.BUSY:
        return (
            f"busy: {share}, {worst}; the figures may be slow, profile again when the "
            "machine is quiet"
        )
    return f"too busy: {share}, {worst}; not fit to plan with, profile again when it is quiet"


def _steps(count: int) -> str:
    return "1 step" if count == 1 else f"{count} steps"


def _unusable(profile: Profile) -> str:
    return "; ".join(f"{u.config}: {u.reason}" for u in profile.unusable) or "none"


def _machine(profile: Profile) -> str:
    hardware = profile.hardware
    if not hardware:
        return profile.description or f"{profile.physical_cores} cores"
    cpu, memory = hardware.get("cpu", {}), hardware.get("memory", {})
    return (
        f"{cpu.get('model', '?')}, {cpu.get('physical_cores', '?')} cores, "
        f"{format_bytes(memory.get('total_bytes', 0))} RAM"
    )


def _throughput_lines(profile: Profile) -> list[str]:
    lines = []
    for shape in KernelShape:
        for quant in sorted({k.quant for k in profile.cpu_kernels if k.shape is shape}):
            points = [k for k in profile.cpu_kernels if k.shape is shape and k.quant == quant]
            best = max({k.threads for k in points}, key=lambda t: _peak(points, t))
            cells = []
            for n_tokens in _SUMMARY_TOKENS:
                match = [k for k in points if k.threads == best and k.n_tokens == n_tokens]
                cells.append(f"{match[0].gflops:7.1f}" if match else "      -")
            lines.append(f"{shape.value:6}{quant:6} {best:>3} threads {' /'.join(cells)}")
    return lines


def _peak(points: list, threads: int) -> float:
    return max(k.gflops for k in points if k.threads == threads)


def _repack(profile: Profile) -> str:
    repack = profile.repack
    if repack is None or not repack.works:
        return f"not usable ({repack.detail if repack else 'not measured'})"
    verdict = "pays off" if repack.pays_off else "does not pay off"
    return f"works, {repack.speedup:.2f}x for Q4_0 ({verdict})"


def _fixed(profile: Profile) -> str:
    top = max(profile.cpu_call_overhead_s, default=None)
    if top is None:
        return "not measured"
    call = 1e6 * profile.cpu_call_overhead_s[top]
    per_block = 1e6 * profile.cpu_layer_overhead_s.get(top, 0.0)
    return f"{call:.1f} µs per call, {per_block:.1f} µs per block ({top} threads)"


def _attention(profile: Profile) -> str:
    single = [p for p in profile.cpu_attention if p.n_tokens == 1]
    if not single:
        return "not measured"
    point = max(single, key=lambda p: p.n_ctx)
    per_head_per_k = 1e6 * point.seconds_per_layer / point.n_head / point.n_ctx * 1000
    return f"{per_head_per_k:.2f} µs per head and block per 1k cached tokens (1-token step)"


def _gpu(profile: Profile) -> str:
    gpu = profile.gpu
    if gpu is not None:
        return (
            f"{gpu.name} — {backend_text(gpu.backend, gpu.ggml_device)}, "
            f"{format_bytes(gpu.vram_total_bytes)}, VRAM {gpu.memory_gbps:.0f} GB/s, "
            f"host->device {gpu.h2d_pinned_gbps:.1f} GB/s pinned, {gpu.h2d_pageable_gbps:.1f} "
            f"pageable, CPU at {100 * gpu.cpu_derate_under_copy:.0f}% during copies"
        )
    reason = profile.hardware.get("gpu_reason") if profile.hardware else None
    return f"none ({reason})" if reason else "none"


# -- the wizard's pages ------------------------------------------------------------------------


def hardware_rows(hardware: HardwareInfo) -> list[Row]:
    """What the probe found, before anything is measured."""
    memory = hardware.memory
    rows = [
        ("CPU", _cpu_text(hardware)),
        ("Instruction sets", ", ".join(hardware.cpu.flags) or "none that llama.cpp uses"),
        (
            "Memory",
            f"{format_bytes(memory.total_bytes)} RAM, {format_bytes(memory.available_bytes)} free",
        ),
    ]
    rows += gpu_rows(hardware)
    rows.append(("llama.cpp", hardware.llama_build))
    rows += backend_rows(hardware)
    return rows


def backend_rows(hardware: HardwareInfo) -> list[Row]:
    """The backend modules llama.cpp loaded or skipped (and why), the CPU variant among them;
    the CPU variants not chosen stay out (the report lists them: shardchat info --devices)."""
    if not hardware.backends:
        return []
    head, *modules = hardware.backends
    variant = head.partition("CPU variant: ")[2]
    rows = (
        [("CPU variant", variant)] if variant else [("Backends", head.removeprefix("backends: "))]
    )
    for line in (line.strip() for line in modules):
        if line.startswith("libggml-cpu-"):
            continue
        name, _, state = line.partition(": ")
        rows.append((f"Backend {name}", state))
    return rows


def gpu_rows(hardware: HardwareInfo) -> list[Row]:
    """One row per GPU with its backend and link, or the one line saying why there is none."""
    if not hardware.gpus:
        return [("GPU", no_gpu_text(hardware.gpu_reason))]
    rows = [(f"GPU {gpu.index}", gpu_identity(gpu)) for gpu in hardware.gpus]
    rows += [(f"PCIe (GPU {gpu.index})", pcie_text(gpu)) for gpu in hardware.gpus if _has_link(gpu)]
    if hardware.driver_version:
        cuda = f", CUDA {hardware.cuda_driver_version}" if hardware.cuda_driver_version else ""
        rows.append(("Driver", f"{hardware.driver_version}{cuda}"))
    return rows


def no_gpu_text(reason: str | None) -> str:
    """The probe's reason as a sentence; older profiles stored only NVML's part of it."""
    if reason and reason.startswith(NO_GPU_FOUND):
        return reason
    return f"no GPU found ({reason})" if reason else "no GPU found"


def backend_text(backend: str, ggml_device: str | None) -> str:
    """The llama.cpp backend and the device name it logs, e.g. Vulkan (Vulkan0).

    Without a device name (data stored before it was recorded, or an NVIDIA GPU
    that a build without CUDA cannot use) the backend is all that is known.
    """
    return f"{backend} ({ggml_device})" if ggml_device else backend


def gpu_identity(gpu: GpuInfo) -> str:
    """Name, backend, device and memory, e.g. llvmpipe (...) — Vulkan (Vulkan0), 2.0 GiB VRAM.

    Who else uses the memory is said only where the driver can tell (NVML); an
    integrated GPU's memory is named as the system RAM it is.
    """
    size = format_bytes(gpu.vram_total_bytes)
    memory = f"{size} of system RAM (integrated GPU)" if gpu.integrated else f"{size} VRAM"
    if gpu.other_processes_known:
        memory += f" ({format_bytes(gpu.other_processes_bytes)} used by others)"
    return f"{gpu.name} — {backend_text(gpu.backend, gpu.ggml_device)}, {memory}"


def _has_link(gpu: GpuInfo) -> bool:
    """ggml knows no PCIe link: a row of question marks would say nothing."""
    fields = (gpu.pcie_generation_current, gpu.pcie_generation_max, gpu.pcie_width_current)
    return any(value is not None for value in (*fields, gpu.pcie_width_max))


def pcie_text(gpu: GpuInfo) -> str:
    """Current and best link: a GPU idles at a lower generation, so both are worth seeing."""
    generation = _link_part("gen ", gpu.pcie_generation_current, gpu.pcie_generation_max)
    width = _link_part("x", gpu.pcie_width_current, gpu.pcie_width_max)
    return f"{generation}, {width}"


def _link_part(prefix: str, current: int | None, best: int | None) -> str:
    if current is None and best is None:
        return f"{prefix}?"
    if current == best or best is None:
        return f"{prefix}{current}"
    return f"{prefix}{current if current is not None else '?'} (up to {prefix}{best})"


def suggested_budget_bytes(hardware: HardwareInfo) -> int:
    """The auto budget of the first GPU right now; 0 means a CPU plan."""
    gpu = hardware.gpus[0] if hardware.gpus else None
    return AutoBudget(apply=lambda _budget: None).budget_for(gpu)


def budget_text(budget_bytes: int) -> str:
    if budget_bytes <= 0:
        return "0 B: no GPU memory to use, so the model runs on the CPU (CPU plan)"
    return f"{format_bytes(budget_bytes)} (the VRAM other programs leave, minus a reserve)"


def result_rows(profile: Profile, budget_bytes: int) -> list[Row]:
    """The measured figures a person can check against what they know of their machine."""
    hardware = HardwareInfo.from_dict(profile.hardware) if profile.hardware else None
    rows = [("CPU", _cpu_text(hardware) if hardware is not None else _machine(profile))]
    if profile.thread_counts:
        threads = ", ".join(map(str, profile.thread_counts))
        rows.append(("Threads", f"measured {threads}; fastest with {fastest_threads(profile)}"))
    if hardware is not None:
        rows.append(("Memory", f"{format_bytes(hardware.memory.total_bytes)} RAM"))
    rows.append(("DRAM read", f"{profile.dram_read_gbps:.1f} GB/s"))
    rows += _measured_gpu_rows(profile, hardware)
    rows.append(("Suggested VRAM budget", budget_text(budget_bytes)))
    rows.append(("Predictions", sureness(profile).basis()))  # how sure they are (issue 29)
    if profile.unusable:
        rows.append(("Not usable here", _unusable(profile)))
    if profile.machine_load is not None:
        rows.append(("Machine while measured", machine_load_text(profile)))
    took = format_duration(profile.duration_s)
    rows.append(
        ("Measured in", "not measured: a described machine" if profile.is_described else took)
    )
    return rows


def _cpu_text(hardware: HardwareInfo) -> str:
    cpu = hardware.cpu
    return f"{cpu.model}, {cpu.physical_cores} cores / {cpu.logical_cores} threads"


def _measured_gpu_rows(profile: Profile, hardware: HardwareInfo | None) -> list[Row]:
    if hardware is None:
        return [("GPU", _gpu(profile))]
    if not hardware.gpus:
        return [("GPU", no_gpu_text(hardware.gpu_reason))]
    rows = [row for row in gpu_rows(hardware) if row[0] != "Driver"]
    gpu = profile.gpu
    if gpu is None:
        return rows + [("Host→device", "not measured (the GPU steps failed)")]
    pinned, pageable = gpu.h2d_pinned_gbps, gpu.h2d_pageable_gbps
    return rows + [
        ("VRAM read", f"{gpu.memory_gbps:.0f} GB/s"),
        ("Host→device", f"{pinned:.1f} GB/s pinned, {pageable:.1f} GB/s pageable"),
    ]


def fastest_threads(profile: Profile) -> int:
    """The thread count whose dense (else any) CPU kernels add up to the most GFLOP/s."""
    points = [k for k in profile.cpu_kernels if k.shape is KernelShape.DENSE]
    points = points or list(profile.cpu_kernels)
    totals: dict[int, float] = {}
    for point in points:
        totals[point.threads] = totals.get(point.threads, 0.0) + point.gflops
    return max(totals, key=totals.__getitem__)


# -- time ----------------------------------------------------------------------------------------


def expected_duration_text(previous: Profile | None) -> str:
    """How long profiling will take, said before it starts: what it took here last time, else
    no promise of a figure. A fixed "about a minute" was 3 min 22 s on a busy machine; once
    running, the time left comes from the steps measured so far (`time_left_text`)."""
    if previous is not None and previous.duration_s > 0 and not previous.is_described:
        return (
            f"the last profile here took {format_duration(previous.duration_s)}; the time left "
            "shows as the steps are measured"
        )
    return (
        "from one to a few minutes, longer while other programs keep the processor busy; "
        "the time left shows as the steps are measured"
    )


def time_left_text(eta_s: float | None) -> str:
    """An ETA that does not pretend to be exact: rounded to 5 s, or to minutes when long.
    Below zero the step running now has outlasted the estimate: saying "a few seconds" then
    would be wrong for as long as that step takes."""
    if eta_s is None:
        return "estimating the time left…"
    if eta_s < 0:
        return "taking longer than estimated…"
    if eta_s < 10:
        return "a few seconds left"
    if eta_s < 120:
        return f"about {5 * round(eta_s / 5)} s left"
    return f"about {round(eta_s / 60)} min left"
