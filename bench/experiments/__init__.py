"""The lab: research variants of the product's code that benchmarks compare, kept out of
``bakery/`` (the product ships only the configurations it uses)."""
