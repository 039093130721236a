"""A 2-rank Horovod training loop in miniature, timed by TimeLogger: ``mpiexec -n 2 timelogger run
--horovod-timeline -- python hvd_steps.py [--steps 4] [--work-ms 10] [--slow-ms 0] [--slow-rank 1]``.

Each step (a ``Training Iteration`` phase inside one ``Train Loop`` epoch) sleeps ``work-ms`` on every rank, plus
``slow-ms`` on ``slow-rank`` only (a straggler), then allreduces a 1,024-float tensor.
"""
import argparse
import time

# MPI initialised by mpi4py before TensorFlow and Horovod load, in the order this workload has always run
# isort: off
from mpi4py import MPI
import tensorflow as tf
import horovod.tensorflow as hvd
# isort: on

from timelogger import default_logger

ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
ap.add_argument("--steps", type=int, default=4)
ap.add_argument("--work-ms", type=float, default=10.0)
ap.add_argument("--slow-ms", type=float, default=0.0)
ap.add_argument("--slow-rank", type=int, default=1)
a = ap.parse_args()

hvd.init()
tl = default_logger()
tl.sync_clocks(MPI.COMM_WORLD)
x = tf.ones([1024])
with tl.phase("Train Loop"):
    tl.set_epoch(0)
    for step in range(a.steps):
        tl.set_step(step)
        with tl.phase("Training Iteration", cat="compute"):
            time.sleep((a.work_ms + (a.slow_ms if hvd.rank() == a.slow_rank else 0.0)) / 1000)
            hvd.allreduce(x * (hvd.rank() + 1), op=hvd.Sum, name="grad")
time.sleep(0.3)  # let Horovod's timeline writer catch up before shutdown
tl.close()
