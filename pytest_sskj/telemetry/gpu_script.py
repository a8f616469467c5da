"""The GPU sampler run on every node during a point (stdlib + ``pynvml`` from ``nvidia-ml-py``).

``python -c SAMPLER_PY INTERVAL_S`` prints one JSON line per interval until it is terminated:
``{"t": epoch_s, "gpus": [{"index", "uuid", "power_w", "sm_clock_mhz", "sm_clock_max_mhz", "mem_used_mib",
"util_pct", "throttle": [reason names], "pids": [[pid, name], ...]}]}``; where NVML cannot run it prints one
``{"t": ..., "unavailable": reason}`` line and exits 0 (no pynvml, no driver, no GPU).  Throttle reasons
are NVML's clock-event reasons, idle and application-clock settings left out (they are not throttling).
"""

from __future__ import annotations

__all__ = ["SAMPLER_PY", "nvml_unavailable"]

SAMPLER_PY = r"""
import json, sys, time
interval = float(sys.argv[1]) if len(sys.argv) > 1 else 1.0

def say(obj):
    sys.stdout.write("SSKJ-GPU " + json.dumps(obj) + "\n")
    sys.stdout.flush()

try:
    import pynvml as N
except ImportError:
    say({"t": time.time(), "unavailable": "no pynvml (nvidia-ml-py) in " + sys.executable})
    sys.exit(0)
try:
    N.nvmlInit()
    n = N.nvmlDeviceGetCount()
except Exception as exc:
    say({"t": time.time(), "unavailable": f"NVML: {type(exc).__name__}: {exc}"})
    sys.exit(0)
if n == 0:
    say({"t": time.time(), "unavailable": "NVML sees no GPU"})
    sys.exit(0)
REASONS = {0x4: "sw_power_cap", 0x8: "hw_slowdown", 0x10: "sync_boost", 0x20: "sw_thermal",
           0x40: "hw_thermal", 0x80: "hw_power_brake", 0x100: "display_clocks"}
handles = [N.nvmlDeviceGetHandleByIndex(i) for i in range(n)]

def opt(fn, *a):
    try:
        return fn(*a)
    except Exception:
        return None

def name_of(pid):
    try:
        return open(f"/proc/{pid}/comm").read().strip()
    except OSError:
        return None

def one(i, h):
    power = opt(N.nvmlDeviceGetPowerUsage, h)
    mem = opt(N.nvmlDeviceGetMemoryInfo, h)
    util = opt(N.nvmlDeviceGetUtilizationRates, h)
    get_reasons = (getattr(N, "nvmlDeviceGetCurrentClocksEventReasons", None)
                   or N.nvmlDeviceGetCurrentClocksThrottleReasons)
    mask = opt(get_reasons, h) or 0
    procs = []
    for fn in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
        for p in opt(getattr(N, fn), h) or []:
            procs.append([int(p.pid), name_of(p.pid)])
    uuid = opt(N.nvmlDeviceGetUUID, h)
    return {
        "index": i,
        "uuid": uuid.decode() if isinstance(uuid, bytes) else uuid,
        "power_w": None if power is None else power / 1000.0,
        "sm_clock_mhz": opt(N.nvmlDeviceGetClockInfo, h, N.NVML_CLOCK_SM),
        "sm_clock_max_mhz": opt(N.nvmlDeviceGetMaxClockInfo, h, N.NVML_CLOCK_SM),
        "mem_used_mib": None if mem is None else mem.used // (1024 * 1024),
        "util_pct": None if util is None else util.gpu,
        "throttle": [name for bit, name in REASONS.items() if mask & bit],
        "pids": procs,
    }

try:
    while True:
        t = time.time()
        say({"t": t, "gpus": [one(i, h) for i, h in enumerate(handles)]})
        time.sleep(max(0.0, interval - (time.time() - t)))
finally:
    N.nvmlShutdown()
"""


def nvml_unavailable() -> str | None:
    """Why NVML cannot sample on this machine (the sampler's own reason strings), ``None`` when it can."""
    import sys

    try:
        import pynvml
    except ImportError:
        return f"no pynvml (nvidia-ml-py) in {sys.executable}"
    try:
        pynvml.nvmlInit()
    except Exception as exc:
        return f"NVML: {type(exc).__name__}: {exc}"
    try:
        if pynvml.nvmlDeviceGetCount() == 0:
            return "NVML sees no GPU"
    finally:
        pynvml.nvmlShutdown()
    return None
