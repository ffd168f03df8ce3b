"""Classical BCn baselines: what a studio ships today, measured the same way as the neural set.

``bcn`` encodes/decodes one surface, ``resample`` moves images between resolutions,
``material`` builds the per-role shipping set and its report (full resolution and
same-bytes), ``transcode`` hands BCn blocks to the bundle writer.
"""
