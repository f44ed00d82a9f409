"""The profiler's GPU steps measure the device: on lavapipe, at its software sizes.

lavapipe's speed means nothing, but a step that reads the clock before the device
has finished (llama_decode only queues GPU work) measures nothing at all: the
differences of the micro-model pairs come out as zero, and this check fails.
(Its host-to-device figures are not checked: on a software device the "copy" is
within system RAM and drowns in the timing noise of two shared cores.)
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from engine.machine.profile import Device
from engine.profiling.gpu_steps import SOFTWARE_GPU_SIZES, measure_gpu_kernels
from engine.profiling.micro_models import DENSE

QUICK = dataclasses.replace(SOFTWARE_GPU_SIZES, token_counts=(1, 16))
MEASURED = 1e-5  # seconds a block takes at the least on lavapipe; the clamp is 1e-7
REPEATS = 3  # medians: lavapipe shares the 2 cores with everything else


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("micro-models")


def test_gpu_kernel_steps_time_the_device_work(folder: Path) -> None:
    points = measure_gpu_kernels(str(folder), DENSE, "Q4_0", REPEATS, QUICK)
    assert [p.n_tokens for p in points] == [1, 16]
    assert all(p.device is Device.GPU for p in points)
    one, sixteen = points
    assert one.seconds_per_layer > MEASURED, one
    assert sixteen.seconds_per_layer > one.seconds_per_layer, points
