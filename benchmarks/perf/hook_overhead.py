"""What the zero-code hooks cost per training step (docs/hooks.md): a tf.data loop with a trivial tf.function step
(or, ``--framework torch``, a DataLoader loop with a trivial optimizer step), run as a whole process with the
launcher's hooks and without, in interleaved pairs.

``python benchmarks/perf/hook_overhead.py [--framework tf|torch] [--steps 3000] [--pairs 5]`` prints one JSON line:
the loop's time per step without hooks and with them (median of the pairs, each process timing its own loop after a
warm-up epoch), and the difference, which is what the hooks add to one step together: TF's fetch and step hooks
(two intervals recorded, the step and epoch numbering, the eager-mode checks); PyTorch's fetch and step hooks and,
the loader having no workers, its reader hooks in the loop's own process (five intervals: the fetch, the step, the
batch, its one sample and its collation).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LOOP = """
import time, tensorflow as tf
ds = tf.data.Dataset.range({steps}).map(lambda x: tf.reshape(x, [1]))
w = tf.Variable(0, dtype=tf.int64)
@tf.function
def step(x):
    w.assign_add(x[0])
for x in ds.take(50):  # warm-up: tracing, the pipeline's threads
    step(x)
t0 = time.perf_counter_ns()
for x in ds:
    step(x)
print("NS_PER_STEP", (time.perf_counter_ns() - t0) / {steps})
"""
LOOP_TORCH = """
import time, torch
data = torch.utils.data.TensorDataset(torch.arange({steps}, dtype=torch.float32).reshape(-1, 1))
loader = torch.utils.data.DataLoader(data, batch_size=1)
w = torch.nn.Parameter(torch.zeros(1))
opt = torch.optim.SGD([w], lr=0.0)
def epoch(limit=None):
    for i, (x,) in enumerate(loader):
        if i == limit:
            break
        w.grad = x[0]
        opt.step()
epoch(50)  # warm-up
t0 = time.perf_counter_ns()
epoch()
print("NS_PER_STEP", (time.perf_counter_ns() - t0) / {steps})
"""


def _one(steps: int, hooks: bool, run_dir: Path, loop: str = LOOP) -> float:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIMELOGGER_")}
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    if hooks:  # what `timelogger run` sets (timelogger/cli.py)
        env["PYTHONPATH"] = os.pathsep.join(x for x in (str(REPO / "timelogger" / "_boot"), str(REPO),
                                                        env.get("PYTHONPATH", "")) if x)
        env["TIMELOGGER_DIR"] = str(run_dir)
        env["TIMELOGGER_HOOKS"] = "1"
    p = subprocess.run([sys.executable, "-c", loop.format(steps=steps)], env=env, capture_output=True, text=True,
                       timeout=600, check=True)
    return float(next(x for x in p.stdout.splitlines() if x.startswith("NS_PER_STEP")).split()[1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--framework", choices=("tf", "torch"), default="tf")
    a = ap.parse_args()
    loop = LOOP if a.framework == "tf" else LOOP_TORCH
    off, on = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(a.pairs):
            off.append(_one(a.steps, False, Path(tmp), loop))
            on.append(_one(a.steps, True, Path(tmp) / f"run-{i}", loop))
    m_off, m_on = statistics.median(off), statistics.median(on)
    print(json.dumps({"benchmark": "hook_overhead", "framework": a.framework, "steps": a.steps, "pairs": a.pairs,
                      "step_ns_without_hooks": round(m_off), "step_ns_with_hooks": round(m_on),
                      "hook_ns_per_step": round(m_on - m_off), "ratio": round(m_on / m_off, 3),
                      "without": [round(x) for x in off], "with": [round(x) for x in on]}))


if __name__ == "__main__":
    main()
