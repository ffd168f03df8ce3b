"""File formats: images in, engine-ready bundles out. numpy only, never slangpy, so
engine import scripts and CI tools can read bundles without a GPU stack."""
