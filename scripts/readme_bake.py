"""Re-measures what README.md says about the default bake: one real bake of pipeline.toml
over assets/ (in a scratch copy, so every task builds), its wall time and console table,
and a screenshot of its out/report.html in headless Chromium (docs/report.png).

    python3 scripts/readme_bake.py            # rewrites README.md between its bake markers
    python3 scripts/readme_bake.py --check    # prints, writes nothing

The README's block between ``<!-- default-bake:begin -->`` and ``<!-- default-bake:end -->``
is this script's output, so its figures are always from a run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BEGIN, END = "<!-- default-bake:begin -->", "<!-- default-bake:end -->"
SHOT_SIZE = (1200, 1500)


def bake(work: Path) -> tuple[float, str, dict]:
    """One bake of a copy of the default pipeline; (seconds, console table, bake report)."""
    shutil.copy(ROOT / "pipeline.toml", work / "pipeline.toml")
    shutil.copytree(ROOT / "assets", work / "assets")
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    start = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "bakery", "bake", "pipeline.toml"], cwd=work, env=env,
                       capture_output=True, text=True)
    seconds = time.monotonic() - start
    sys.stderr.write(r.stderr)
    if r.returncode not in (0, 1):
        raise SystemExit(f"the bake failed (exit {r.returncode}):\n{r.stdout}")
    return seconds, r.stdout.rstrip(), json.loads((work / "out" / "bake-report.json").read_text())


def screenshot(page: Path, shot: Path, profile: Path) -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("needs chromium (scripts/setup.sh installs it)")
    subprocess.run([chromium, "--headless", "--no-sandbox", "--use-angle=swiftshader", "--enable-unsafe-swiftshader",
                    "--hide-scrollbars", f"--user-data-dir={profile}", f"--screenshot={shot}",
                    f"--window-size={SHOT_SIZE[0]},{SHOT_SIZE[1]}", page.as_uri()],
                   check=True, capture_output=True, timeout=180)


def block(seconds: float, table: str, report: dict, load: float) -> str:
    dev = report.get("device") or {}
    cores = os.cpu_count()
    where = f"{dev.get('adapter', 'no device')}{' (software)' if dev.get('software') else ''}"
    t = report["totals"]
    m, s = divmod(round(seconds), 60)
    return "\n".join([
        BEGIN,
        f"Measured by `python3 scripts/readme_bake.py`: the default bake, every task built "
        f"({t['built']} built, {t['failed']} failed), took **{m} min {s:02d} s** on {cores} cores "
        f"({platform.machine()}, {where}; warm Slang and Mesa shader caches; load average {load:.1f} when it "
        f"started{', so other work shared the cores' if load > 0.5 * (cores or 1) else ''}). Its console summary:",
        "", "```", table, "```", END])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="print the block; change no file")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bakery-readme-") as tmp:
        work = Path(tmp)
        load = os.getloadavg()[0]
        seconds, table, report = bake(work)
        text = block(seconds, table, report, load)
        print(text)
        if args.check:
            return
        screenshot(work / "out" / "report.html", ROOT / "docs" / "report.png", work / "profile")
    readme = (ROOT / "README.md").read_text()
    if BEGIN not in readme or END not in readme:
        raise SystemExit(f"README.md has no {BEGIN} ... {END} block to replace")
    readme = re.sub(re.escape(BEGIN) + ".*?" + re.escape(END), lambda _: text, readme, flags=re.S)
    (ROOT / "README.md").write_text(readme)
    print("README.md and docs/report.png updated", file=sys.stderr)


if __name__ == "__main__":
    main()
