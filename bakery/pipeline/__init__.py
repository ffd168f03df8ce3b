"""The pipeline engine: reads pipeline.toml, plans (stage, asset) tasks, bakes them
through a content-hash cache and reports. See docs/PIPELINE.md."""
