"""Neural texture compression: material sets, rate control and the per-texel decoder."""
