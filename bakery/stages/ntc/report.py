"""The ntc stage's report plot: rate against distortion, the neural set beside BCn."""

from __future__ import annotations

import numpy as np


def rd_points(manifest: dict) -> dict[str, list[tuple[float, float]]]:
    """Rate (bits per texel) and set PSNR (dB, from the mean MSE) of the neural bundle, the
    rates its search tried, and the BCn baseline at full size and at the same bytes."""
    ntc = manifest.get("ntc") or {}
    rate, metrics = ntc.get("rate") or {}, manifest.get("metrics") or {}
    if "bpp" not in rate or "mean_psnr_db" not in metrics:
        return {}
    pts = {"neural (this bundle)": [(float(rate["bpp"]), float(metrics["mean_psnr_db"]))]}
    tried = [(float(t["bpp"]), float(t["mean_psnr_db"])) for t in rate.get("tried") or []]
    if tried:
        pts["neural (rates tried)"] = sorted(tried)
    base = ntc.get("baseline") or {}
    bcn = [(float(b["bpp"]), float(b["mean_psnr"])) for b in (base.get("total"), base.get("same_bytes"))
           if b and np.isfinite(b.get("mean_psnr", np.inf))]
    if bcn:
        pts["BCn (full size, same bytes)"] = sorted(bcn)
    return pts


def rate_distortion(manifest: dict) -> str:
    from bakery.reporting import figure_axes, plot

    pts = rd_points(manifest)
    if not pts:
        return ""
    fig, ax = figure_axes()
    styles = {"neural (this bundle)": dict(marker="*", markersize=14, linestyle="none", color="tab:red"),
              "neural (rates tried)": dict(marker="o", linestyle="--", color="tab:red", alpha=0.5),
              "BCn (full size, same bytes)": dict(marker="s", linestyle="-", color="tab:blue")}
    for label, xy in pts.items():
        x, y = zip(*xy)
        ax.plot(x, y, label=label, **styles.get(label, {}))
    ax.set_xlabel("bits per texel (whole texture set)")
    ax.set_ylabel("PSNR of the mean MSE (dB)")
    ax.set_title("rate-distortion: neural vs BCn")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    return plot(fig, "rate-distortion")
