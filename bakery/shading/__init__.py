"""Differentiable shading shared by the stages that train against a render.

``brdf.slang`` (GGX microfacet BRDF x cos) and ``directions.slang`` are included from
Slang as ``#include "shading/brdf.slang"``; ``brdf.py`` and ``directions.py`` are their
numpy twins for tests and CPU-side references.
"""
