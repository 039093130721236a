"""Four threads log empty phases as fast as they can until killed; a side file records their progress.

``python tl_flood.py RUN_DIR PROGRESS_FILE [THREADS]``. Every 50 ms a monitor thread appends one line
``<time_ns> <tid>:<count> ...`` to PROGRESS_FILE with os.write (it survives kill -9): each count was read after
that many intervals of the thread had ended, so all of them ended before ``time_ns``.
"""
import os
import sys
import threading
import time

from timelogger import TimeLogger

run_dir, progress = sys.argv[1], sys.argv[2]
n_threads = int(sys.argv[3]) if len(sys.argv) > 3 else 4
tl = TimeLogger(run_dir, rank=0, world_size=1)
counts = [0] * n_threads
tids = [0] * n_threads
ready = threading.Barrier(n_threads + 1)


def produce(i: int) -> None:
    tids[i] = threading.get_native_id()
    phase = tl.phase
    ready.wait()
    n = 0
    while True:
        with phase("tick", cat="compute"):
            pass
        n += 1
        counts[i] = n


for i in range(n_threads):
    threading.Thread(target=produce, args=(i,), daemon=True).start()
ready.wait()
fd = os.open(progress, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
while True:
    snap = list(counts)
    os.write(fd, (f"{time.time_ns()} " + " ".join(f"{t}:{c}" for t, c in zip(tids, snap)) + "\n").encode())
    time.sleep(0.05)
