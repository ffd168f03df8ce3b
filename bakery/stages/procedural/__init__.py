"""Stage `procedural`: an image turned into a compact procedural shader program."""

from bakery.stages.procedural.stage import Procedural

__all__ = ["Procedural"]
