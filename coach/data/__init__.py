"""Datasets a job can train on, split into train/validation and sharded across workers."""

from coach.data.datasets import (DATASET_OPTIONS, DATASETS, SYNTHETIC_DEFAULTS, Dataset, load_dataset, shard_steps,
                                 train_size)

__all__ = ["DATASETS", "DATASET_OPTIONS", "SYNTHETIC_DEFAULTS", "Dataset", "load_dataset", "shard_steps",
           "train_size"]
