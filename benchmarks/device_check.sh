#!/usr/bin/env bash
# The device check (benchmarks/device_check.py) on a machine with a CUDA device, in under 10 minutes.
#
#   bash benchmarks/device_check.sh [OUT_DIR [ARGS]]  run it (OUT_DIR default: benchmarks/; ARGS go to
#                                                     device_check.py, e.g. --budget 400)
#   bash benchmarks/device_check.sh --pack        on THIS machine: prepare .devicecheck/ for a bare one
#
# A machine with the study's environment (`make setup`, CUDA torch) needs nothing more: the run mode
# uses .venv/bin/python when there is one. A bare GPU machine that reaches no package registry (a
# lent one, with its own python3 and CUDA torch) gets what it lacks from .devicecheck/, which
# --pack fills here (about 35 MB, git-ignored): wheels of the pinned packages it lacks (nnsight,
# transformers, datasets, gguf and their needs, for CPython 3.12 on manylinux x86-64), each embedded
# model's config and tokenizer files (no weights: the lens section times random draws of the same
# architecture) and WikiText-2 (for the ladder section). On a machine without CUDA the check says so
# in one line and writes nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
PACK=.devicecheck
WHEELS="nnsight==0.8.1 transformers==5.24.0 datasets==5.2.0 gguf==0.19.0
  greenlet==3.5.6 pydantic==2.14.4 pydantic_core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5
  websocket-client==1.9.2 zstandard==0.25.0 dill==0.4.1 multiprocess==0.70.19"

if [ "${1:-}" = "--pack" ]; then
  PY=${PY:-.venv/bin/python}
  rm -rf "$PACK.tmp" && mkdir -p "$PACK.tmp/wheels" "$PACK.tmp/cards" "$PACK.tmp/data"
  for w in $WHEELS; do
    $PY -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
      -d "$PACK.tmp/wheels" "$w"
  done
  HF_HUB_OFFLINE=1 $PY - "$PACK.tmp/cards" <<'EOF'
import shutil, sys
from pathlib import Path
from residshift.core.models import prepare_embedded
for name in ("smollm2-135m", "gemma3-270m"):
    src, dst = prepare_embedded(name), Path(sys.argv[1]) / name
    dst.mkdir(parents=True)
    for f in src.iterdir():
        if f.is_file() and f.suffix != ".safetensors" and f.stat().st_size < 40_000_000:
            shutil.copy(f, dst / f.name)
EOF
  data=$(HF_HUB_OFFLINE=1 $PY -c "from residshift.core.data import data_root; print(data_root() or "")" 2>/dev/null || true)
  data=${RESIDSHIFT_DATA:-$data}
  [ -f "$data/wikitext-2/wiki.train.tokens" ] || { echo "no WikiText-2 under '$data': set RESIDSHIFT_DATA or run make data" >&2; exit 2; }
  cp -r "$data/wikitext-2" "$PACK.tmp/data/"
  # compressed, so that what travels stays under a lent machine's 64 MiB
  tar -C "$PACK.tmp" -cJf "$PACK.tmp/payload.tar.xz" cards data && rm -rf "$PACK.tmp/cards" "$PACK.tmp/data"
  rm -rf "$PACK" && mv "$PACK.tmp" "$PACK"
  du -sh "$PACK"
  exit 0
fi

OUT=${1:-benchmarks}
[ $# -gt 0 ] && shift
if [ -f "$PACK/payload.tar.xz" ] && [ ! -d "$PACK/cards" ]; then tar -C "$PACK" -xJf "$PACK/payload.tar.xz"; fi
PY=python3
[ -x .venv/bin/python ] && PY=.venv/bin/python
if [ -d "$PACK/wheels" ] && [ "$PY" = python3 ]; then
  site=$(mktemp -d)
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" "$PACK"/wheels/*.whl
  export PYTHONPATH="$site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi
[ -d "$PACK/data/wikitext-2" ] && export RESIDSHIFT_DATA="$PWD/$PACK/data"
export HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
exec "$PY" benchmarks/device_check.py --out "$OUT" --cards "$PACK/cards" "$@"
