#!/usr/bin/env bash
# The wheels the GPU machine's image lacks, for its Python (3.12, x86-64 manylinux), into .whl/.
#
# That image has torch, numpy, pandas, click, rich, tqdm, protobuf, narwhals and packaging, but not
# msgspec, isal, perfetto or plotly, and it reaches no package registry. Run this where pip works
# (here), carry `.whl` with the device call, and scripts/gpu_acceptance.py installs them there with
# `pip install --no-index --no-deps --target` before anything imports them (docs/gpu.md).
# The versions are this project's tested ones (pip show here); one version of each, since two
# copies of one package stop pip's whole install.
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=${GPU_WHEELS_DIR:-.whl}
PY=${GPU_WHEELS_PYTHON:-3.12}
WHEELS=(msgspec==0.22.0 isal==1.9.1 perfetto==0.59.1 plotly==7.1.0)
mkdir -p "$DEST"
platforms=()
for p in manylinux_2_39_x86_64 manylinux_2_35_x86_64 manylinux_2_34_x86_64 manylinux_2_31_x86_64 \
         manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64 \
         manylinux2014_x86_64 manylinux1_x86_64 any; do
    platforms+=(--platform "$p")
done
for spec in "${WHEELS[@]}"; do
    name=${spec%%==*}
    # A wheel of another version of the same package left from an earlier run would make two.
    find "$DEST" -maxdepth 1 -iname "${name}-*.whl" ! -iname "${name}-${spec##*==}-*" -delete
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$PY" \
        --implementation cp --abi "cp${PY/./}" --abi abi3 --abi none "${platforms[@]}" \
        -d "$DEST" "$spec"
done
ls -1 "$DEST"/*.whl
du -ch "$DEST"/*.whl | tail -1
