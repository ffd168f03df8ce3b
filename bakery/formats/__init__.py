"""File formats: images in, engine-ready bundles out. Reading and writing them needs numpy
only: no module here imports slangpy when it loads, so engine import scripts and CI tools
read bundles without a GPU stack. The one call that takes a device
(``coopvec_shader.coopvec_weight_buffer``: weights in a driver's own matrix layout)
imports slangpy when it runs."""
