"""Training inside a worker: one epoch on one shard, and the checkpoint between epochs."""
