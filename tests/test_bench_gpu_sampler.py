"""The benchmarks' GPU sampler: figures come from nvidia-smi's lines, or are None without it."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import workloads  # noqa: E402

# Three readings of two GPUs, 0.3 s apart, as ``nvidia-smi ... -lms`` prints them; then it
# keeps running (silent) until the sampler stops it. The first block is the idle reading.
FAKE = """#!{python}
import sys, time
from pathlib import Path
Path({argv!r}).write_text(" ".join(sys.argv[1:]))
blocks = [["0, 0, 1000", "1, 0, 500"], ["0, 80, 3000", "1, 40, 700"], ["0, 100, 2500", "1, 60, 650"]]
for block in blocks:
    print("\\n".join(block), flush=True)
    time.sleep(0.3)
time.sleep(60)
"""


def _fake_nvidia_smi(folder: Path) -> Path:
    argv = folder / "argv.txt"
    exe = folder / "nvidia-smi"
    exe.write_text(FAKE.format(python=sys.executable, argv=str(argv)))
    exe.chmod(0o755)
    return argv


def test_figures_come_from_the_lines_nvidia_smi_prints(tmp_path, monkeypatch):
    argv = _fake_nvidia_smi(tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path))
    with workloads.GpuSampler() as gpu:
        assert gpu.idle_mib.get(0) == 1000.0   # read before the bake would start
        deadline = time.monotonic() + 10
        while len(gpu.samples) < 6 and time.monotonic() < deadline:
            time.sleep(0.05)
    assert "--query-gpu=index,utilization.gpu,memory.used" in argv.read_text()
    assert gpu.busy() == {0: 0.6, 1: pytest.approx(0.333)}
    assert gpu.busy_percent() == 60.0
    assert gpu.busy_percent(index=1) == pytest.approx(33.3)
    assert gpu.count() == 3
    last = max(t for t, i, _, _ in gpu.samples if i == 0)
    assert gpu.busy_percent([(last - 0.1, last + 1.0)]) == 100.0
    assert gpu.busy_percent([(0.0, 1.0)]) is None   # no sample in the window
    assert gpu.peak_mib() == 2000.0
    assert gpu.peak_mib(index=1) == 200.0


def test_every_figure_is_none_without_nvidia_smi(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with workloads.GpuSampler() as gpu:
        pass
    assert gpu.busy() is None
    assert gpu.busy_percent() is None
    assert gpu.busy_percent([(0.0, 1e12)]) is None
    assert gpu.peak_mib() is None
    assert gpu.count() == 0
