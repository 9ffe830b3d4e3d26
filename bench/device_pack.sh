#!/usr/bin/env bash
# Packs binaries of a CUDA build for the GPU machine the `device` tool lends (a copy of this working
# tree is sent, 64 MiB in all, with the git-ignored folder .gpu/ carried): each binary stripped and
# xz-compressed (a CUDA binary of ~41 MB becomes ~11 MB), the Debian shared libraries they link that an
# Ubuntu 24.04 host with the CUDA 13 runtime lacks, and the shared fixtures the runs need (../shared does
# not travel). .gpu/unpack.sh, run first on that machine, restores the binaries (python3's lzma: no xz
# needed there) and prints the environment the tests want.
#
#   bench/device_pack.sh [-b BUILD] [-f "HF_FIXTURE ..."] [-g "GGUF_FIXTURE ..."] BIN [BIN...]
#     -b  the build folder (default build)
#     -f  folders of shared/fixtures/hf to carry (e.g. "qwen3_moe deepseek_v3")
#     -g  folders of shared/fixtures/gguf to carry
#   then on the device:  bash .gpu/unpack.sh && eval "$(bash .gpu/unpack.sh --env)" && .gpu/test_backend ...
#
# Prints the size of .gpu/ and of the tracked tree, and fails when they pass 64 MiB together.
set -euo pipefail
BUILD=build HF="" GG=""
while getopts "b:f:g:" o; do
  case $o in
    b) BUILD=$OPTARG ;; f) HF=$OPTARG ;; g) GG=$OPTARG ;;
    *) sed -n '2,15p' "$0"; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[ $# -ge 1 ] || { sed -n '2,15p' "$0"; exit 2; }
ROOT=$(git rev-parse --show-toplevel)
SHARED=${FT_SHARED_DIR:-$ROOT/../shared}
D=$ROOT/.gpu
rm -rf "$D"
mkdir -p "$D/lib"
for b in "$@"; do
  [ -x "$BUILD/$b" ] || { echo "no $BUILD/$b" >&2; exit 1; }
  strip -o "$D/$b" "$BUILD/$b"
  xz -6 -T2 "$D/$b"
  # Libraries outside the C runtime, the GPU driver and the CUDA toolkit (the device has those).
  ldd "$BUILD/$b" | awk '/=>/ {print $3}' | while read -r l; do
    case "$l" in
      */libc.so*|*/libm.so*|*/libdl.so*|*/libpthread.so*|*/librt.so*|*/ld-linux*|*/libcuda.so*|*/libstdc++*|\
      */libgcc_s*|/usr/local/cuda*|*/libcublas*|*/libcudart*|*/libnccl*) ;;
      *) cp -L -n "$l" "$D/lib/" ;;
    esac
  done
done
for f in $HF; do mkdir -p "$D/shared/fixtures/hf" && cp -r "$SHARED/fixtures/hf/$f" "$D/shared/fixtures/hf/"; done
for f in $GG; do mkdir -p "$D/shared/fixtures/gguf" && cp -r "$SHARED/fixtures/gguf/$f" "$D/shared/fixtures/gguf/"; done
cat > "$D/unpack.sh" <<'EOF'
#!/usr/bin/env bash
# Restores .gpu/*.xz (once) and, with --env, prints the exports the binaries and tests need.
cd "$(dirname "$0")/.."
if [ "${1:-}" = --env ]; then
  echo "export LD_LIBRARY_PATH=$PWD/.gpu/lib:\${LD_LIBRARY_PATH:-} FT_SOURCE_DIR=$PWD FT_SHARED_DIR=$PWD/.gpu/shared FT_REQUIRE_GPU=1"
  exit 0
fi
for x in .gpu/*.xz; do
  [ -e "$x" ] || continue
  python3 -c "import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], 'wb'))" "$x" "${x%.xz}"
  chmod +x "${x%.xz}" && rm -f "$x"
done
EOF
gpu=$(du -sb "$D" | cut -f1)
tree=$(git -C "$ROOT" ls-files -z | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
echo ".gpu: $((gpu / 1048576)) MiB, tracked tree: $((tree / 1048576)) MiB (limit 64 MiB together)"
[ $((gpu + tree)) -le $((64 * 1048576)) ] || { echo "too big for the device's carry" >&2; exit 1; }
