"""The job loop: tune, plan, run an epoch on a backend, record, until the stop rule is met.

submit.py       several jobs at once on one backend, a thread each
loop.py         one job from submission to a final status
epoch.py        one epoch (all roles at once) on a backend, with deadline, abort and retries
coordinator.py  the capacity every job on the machine shares (in the store), granted through the planner
earlier.py      earlier runs of the same model and data in the store, the ETA's second opinion
"""
