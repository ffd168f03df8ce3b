#!/usr/bin/env bash
# Runs benchmarks (and the test suite) on the GPU machine, each under its own time limit,
# so one slow run cannot eat the others' share of the machine's time. Logs and JSON land in
# $OUT (where set) or bench/out, packed as results.tar.gz.
#
#   bash bench/all.sh NAME[:SECONDS] ...
#
# NAME: suite | mipmap | fit | procedural | procedural_one | procedural_seeds | procedural_alone | procedural_presets |
#       procedural_fit | train_texture | ntc | ntc_scatter | ntc_updates | ntc_touched |
#       ntc_repeat | ntc_options | backward_anatomy | neural_material | runners | scale | determinism |
#       determinism_STAGE | studio_library | studio_library_STAGE[_SET] | rebake | library
# SUITE_ARGS: extra pytest arguments for the suite (e.g. --ignore=tests/test_view.py where no browser is installed).
# The machine needs slangpy, a Vulkan driver and the packages pyproject.toml names (see README).
set -u
cd "$(dirname "$0")/.."
dest=${OUT:-bench/out}
mkdir -p "$dest/logs" bench/out
export PYTHONUNBUFFERED=1

command_of() {
  case "$1" in
    # -v -rfE: each test named as it ends, so a run cut at its limit still names its
    # failures; junit.xml (in results.tar.gz) keeps them per test; --timeout where the
    # image has pytest-timeout, so one hanging test fails alone.
    suite)           echo "python3 -m pytest -n 14 -p no:cacheprovider -v -rfE --durations=25" \
                          "--junitxml=$dest/logs/junit.xml ${SUITE_ARGS:-} $(python3 -c 'import pytest_timeout' 2>/dev/null \
                          && echo --timeout=240)" ;;
    mipmap)          echo "python3 bench/mipmap.py --device vulkan --no-ablation" ;;
    fit)             echo "python3 bench/fit.py --device vulkan" ;;
    procedural)      echo "python3 bench/procedural.py --device vulkan --workers 6" ;;
    # One target at a time: the GPU's own time per target, without six processes sharing it.
    procedural_alone) echo "python3 bench/procedural.py --device vulkan --workers 1" \
                          "--only checker_ramp,bricks,striped_gradient --out bench/out/procedural_alone.json" ;;
    # The whole suite one target at a time: the seconds per target issue 44 is judged by.
    procedural_one)  echo "python3 bench/procedural.py --device vulkan --workers 1 --out bench/out/procedural_one.json" ;;
    # The photographs' texture loss at two more seeds: the search's own spread beside a change.
    procedural_seeds) only="--only rust,wood"
                     echo "python3 bench/procedural.py --device vulkan --workers 1 $only --seed 2" \
                          "--out bench/out/procedural_seed2.json &&" \
                          "python3 bench/procedural.py --device vulkan --workers 1 $only --seed 3" \
                          "--out bench/out/procedural_seed3.json" ;;
    # The GPU preset against a smaller search (fewer generations and structures: less host work per
    # target), one target at a time, generated and photographed targets, in one call.
    procedural_presets) only="--only checker_ramp,bricks,striped_gradient,saw_bands,rust,wood"
                     echo "python3 bench/procedural.py --device vulkan --workers 1 $only" \
                          "--out bench/out/procedural_preset_default.json &&" \
                          "python3 bench/procedural.py --device vulkan --workers 1 $only" \
                          "--param generations=3 --param population=16 --out bench/out/procedural_preset_small.json" ;;
    # The search's fitting step alone: 40 jobs x 4096 pixels of 128^2 through the interpreter.
    procedural_fit)  echo "python3 bench/procedural_fit.py --device vulkan --steps 200" ;;
    train_texture)   echo "python3 bench/train_texture.py --device vulkan --steps 500" ;;
    ntc)             echo "python3 bench/ntc.py --device vulkan --big 2048 --big-steps 2000 --check 500" ;;
    ntc_scatter)     echo "python3 bench/ntc.py --device vulkan --bpp --big 2048 --big-steps 1000 --check 500" \
                          "--big-scatter thread staged none --big-samples texels lines --big-updates dense" \
                          "--out bench/out/ntc_scatter.json &&" \
                          "python3 bench/ntc.py --device vulkan --bpp --big 2048 --big-steps 1000 --check 500" \
                          "--big-scatter staged shuffle --out bench/out/ntc_scatter_patches.json" ;;
    ntc_updates)     echo "python3 bench/ntc.py --device vulkan --bpp --big 2048 --big-steps 3000 --check 500" \
                          "--big-scatter staged --big-samples texels lines8 patches --big-updates dense lazy" \
                          "--out bench/out/ntc_updates.json" ;;
    # the large-set default (lazy Adam over the marked cells only) against the lazy Adam reading every gradient
    ntc_touched)     echo "python3 bench/ntc.py --device vulkan --bpp --big 2048 --big-steps 1000 --check 500" \
                          "--big-samples patches --big-updates lazy touched --out bench/out/ntc_touched.json" ;;
    # the default's speed and final quality over three seeds (the median settles a target at the edge)
    ntc_repeat)      echo "python3 bench/ntc.py --device vulkan --bpp --big 2048 --big-steps 6000 --check 1000" \
                          "--big-repeat 3 --out bench/out/ntc_repeat.json" ;;
    # quality at 8 bpp at full length: the default and the speed options (lines, patches)
    ntc_options)     echo "python3 bench/ntc.py --device vulkan --bpp 8 --out bench/out/ntc_default.json &&" \
                          "python3 bench/ntc.py --device vulkan --bpp 8 --param latent_updates=lazy" \
                          "--param line_texels=8 --out bench/out/ntc_lazy_lines8.json &&" \
                          "python3 bench/ntc.py --device vulkan --bpp 8 --param latent_updates=lazy" \
                          "--param patches=true --out bench/out/ntc_lazy_patches.json" ;;
    backward_anatomy) echo "python3 bench/backward_anatomy.py --device vulkan" ;;
    neural_material) echo "python3 bench/neural_material.py --device vulkan" ;;
    runners)         echo "python3 bench/runners.py --device vulkan --jobs 2" ;;
    # the default pipeline baked cold in a fresh folder (wall and compiles per stage), then re-baked cached
    rebake)          echo "python3 bench/rebake.py --fresh" ;;
    scale)           echo "python3 bench/scale.py --device vulkan --gpus 1" ;;
    # the default pipeline baked twice locally (--verify-determinism) and once through Ray, byte for byte
    determinism)     echo "python3 bench/determinism.py --device vulkan --ray --out bench/out/determinism.json" ;;
    # one stage of it (texture, compress, shader_fit, mips, procedural, neural_material)
    determinism_*)   echo "python3 bench/determinism.py --device vulkan --ray --only ${1#determinism_}" \
                          "--out bench/out/determinism_${1#determinism_}.json" ;;
    # a 4096^2 six-map set in Unreal's naming and packing through ntc, mipmap, neural_material;
    # studio_library_STAGE[_SET] bakes one stage (and one set) over the sets an earlier item wrote
    studio_library)  echo "python3 bench/studio_library.py --device vulkan" ;;
    studio_library_*) rest=${1#studio_library_}; set=${rest##*_}
                     case "$set" in unreal|plain) rest=${rest%_*} ;; *) set="unreal plain" ;; esac
                     echo "python3 bench/studio_library.py --device vulkan --stages $rest --sets $set" ;;
    # a generated studio library (2048^2, every naming convention) through ntc, mipmap and
    # neural_material, cold then warm caches: materials per GPU-hour, GPU busy, phases
    library)         echo "python3 bench/library.py --device vulkan ${LIBRARY_ARGS:-}" ;;
    *)               return 1 ;;
  esac
}

for item in "$@"; do
  name=${item%%:*}
  limit=${item#*:}; [ "$limit" = "$item" ] && limit=300
  cmd=$(command_of "$name") || { echo "unknown benchmark $name" >&2; continue; }
  echo "=== $name ($cmd, at most ${limit} s) $(date +%T)"
  start=$(date +%s)
  timeout -k 5 "$limit" bash -c "$cmd" > "$dest/logs/$name.log" 2>&1
  rc=$?
  echo "=== $name: exit $rc in $(( $(date +%s) - start )) s"
  tail -n 40 "$dest/logs/$name.log"
  # the suite's failures so far, by name, even when the run was cut before pytest's summary
  [ "$name" = suite ] && { echo "=== suite: failed or errored"; grep -E " (FAILED|ERROR) " "$dest/logs/$name.log"; }
done
cp bench/out/*.json "$dest/logs/" 2>/dev/null
tar -czf "$dest/results.tar.gz" -C "$dest" logs && rm -rf "$dest/logs"
