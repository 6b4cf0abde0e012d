"""Peak memory of a computation above its start: torch's peak allocation on CUDA, the process's peak resident set
on Linux."""
from __future__ import annotations

import os

import torch


class PeakMemory:
    """Peak memory above the level at entry. CUDA: torch's peak allocation. CPU (Linux): the process's peak
    resident set (VmHWM, reset at entry through /proc/self/clear_refs, after freed heap memory is handed back with
    malloc_trim) minus the resident set at entry; the process's other threads count too. `bytes` is None where
    neither is available."""

    def __init__(self, device) -> None:
        self.device, self.bytes, self._base = torch.device(device), None, None

    def __enter__(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self._base = torch.cuda.memory_allocated(self.device)
        else:
            _trim_heap()  # before the reset: the peak then starts from the trimmed resident set
            if _reset_peak_rss():
                self._base = _status_bytes("VmRSS")
        return self

    def __exit__(self, *exc):
        if self._base is None:
            return False
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            peak = torch.cuda.max_memory_allocated(self.device)
        else:
            peak = _status_bytes("VmHWM")
        if peak is not None:
            self.bytes = max(0, int(peak - self._base))
        return False


def _reset_peak_rss() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")  # 5 resets the peak resident set size only (proc(5))
        return True
    except OSError:
        return False


def _trim_heap() -> None:
    """Hand freed heap memory back to the system (glibc), so the peak counts what the computation allocates
    rather than what it reuses of memory the process already held."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _status_bytes(field_name: str) -> int | None:
    try:
        with open(f"/proc/{os.getpid()}/status") as fh:
            for line in fh:
                if line.startswith(field_name + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None
