"""``python rank_task_rss.py TRACES``: summarise TRACES in this process (inline engine) and print, per rank task, its
rows and the peak RSS it reached above the RSS before it (sampled every 2 ms), as JSON. A fresh process, so that
nothing but the merge's own waves came before (tests/test_partitioned.py)."""
import ctypes, gc, json, sys, threading, time
from trace_merge import engines, kernels, partitioned

def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096

seen = []
real = partitioned.merge_rank

def measured(task):
    gc.collect(); ctypes.CDLL("libc.so.6").malloc_trim(0)
    before = peak = rss()
    done = threading.Event()
    def sample():
        nonlocal peak
        while not done.is_set():
            peak = max(peak, rss()); time.sleep(0.002)
    t = threading.Thread(target=sample); t.start()
    try:
        return real(task)
    finally:
        done.set(); t.join()
        seen.append({"rows": sum(p.rows for p in task.pieces), "before": before, "peak": max(peak, rss())})

partitioned.merge_rank = measured
pm = partitioned.merge_partitioned(sys.argv[1], engine=engines.Inline(), analysis=kernels.SummaryHook(), keep_rows=False)
pm.cleanup()
print(json.dumps(seen))
