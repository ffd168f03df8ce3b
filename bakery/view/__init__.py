"""``bakery view``: every bundle under an output folder drawn in a browser by three.js,
each decoder running as generated WebGL2 code (bakery/view/server.py serves the page;
bakery/view/snapshot.py drives headless Chromium to write what it computed)."""
