"""Training inside a worker: its part of one epoch (worker.py), and the checkpoint between epochs."""
