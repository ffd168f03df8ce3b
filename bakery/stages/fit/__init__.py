"""Stage `fit`: recover the inputs of a user's differentiable Slang shader from a reference."""

from bakery.stages.fit.stage import Fit

__all__ = ["Fit"]
