"""bakery: a neural asset baking pipeline for game engines.

Importing the package must stay cheap and GPU-free: the format readers in
``bakery.formats`` are used by engine import scripts that have no slangpy.
"""

__version__ = "0.1.0"
