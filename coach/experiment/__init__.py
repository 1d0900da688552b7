"""Experiments: the same workload of Coach jobs placed by each scheduler in turn, on the
local control plane or simulated, to compare how long jobs wait, which ones deadlock, and
what room half-placed groups hold.

workload.py   the jobs: a workload file, or a random one from a seed
replay.py     one scheduler's run: submit on time, start a job once its minimum group is bound,
              end it after its run time, stop when nothing moves any more
summary.py    the figures of a run
schedulers.py the placement policies compared: default-scheduler (spread), bin-pack, coach-gang
compare.py    the schedulers in turn on one control plane
simulate.py   one scheduler's run as a discrete-event model, without a control plane
"""

from coach.experiment.replay import Run, replay
from coach.experiment.summary import Summary, summarize
from coach.experiment.workload import JobArrival, load_workload, random_workload

__all__ = ["JobArrival", "Run", "Summary", "load_workload", "random_workload", "replay", "summarize"]
