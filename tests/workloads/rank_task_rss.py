"""``python rank_task_rss.py TRACES``: summarise TRACES in this process (inline engine) and print, per rank task, its
rows and the peak RSS it reached above the RSS before it, as JSON: the kernel's high-water mark (``VmHWM``), reset
before the task (``clear_refs``), not samples (a sample can only miss a peak). A fresh process, so that nothing but
the merge's own waves came before (tests/test_partitioned.py)."""
import ctypes
import gc
import json
import sys

from trace_merge import engines, kernels, partitioned


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096

def high_water_mark() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))

seen = []
real = partitioned.merge_rank

def measured(task):
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    before = rss()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # the high-water mark starts again from the RSS now
    try:
        return real(task)
    finally:
        seen.append({"rows": sum(p.rows for p in task.pieces), "before": before, "peak": max(high_water_mark(), rss())})

partitioned.merge_rank = measured
pm = partitioned.merge_partitioned(sys.argv[1], engine=engines.Inline(), analysis=kernels.SummaryHook(),
                                   keep_rows=False)
pm.cleanup()
print(json.dumps(seen))
