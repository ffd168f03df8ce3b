"""Imports every built-in stage module so that each registers itself."""

from bakery.stages import neural_texture, ntc  # noqa: F401
