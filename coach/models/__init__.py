"""Models a job can train: built-in Gluon blocks or a user file with `build(num_classes)`."""

from coach.models.zoo import BUILTIN_MODELS, build_model, first_forward

__all__ = ["BUILTIN_MODELS", "build_model", "first_forward"]
