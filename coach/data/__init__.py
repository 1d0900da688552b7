"""Datasets a job can train on, split into train/validation and sharded across workers."""

from coach.data.datasets import DATASETS, Dataset, load_dataset, shard_indices

__all__ = ["DATASETS", "Dataset", "load_dataset", "shard_indices"]
