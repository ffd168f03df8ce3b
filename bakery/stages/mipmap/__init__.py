"""Stage `mipmap`: normal/roughness (and albedo) mip chains trained so that rendering each
level matches the area-averaged render of level 0, measured against box, Toksvig and vMF
filtering on held-out light/view directions."""

from bakery.stages.mipmap.stage import Mipmap

__all__ = ["Mipmap"]
