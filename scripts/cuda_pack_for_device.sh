#!/usr/bin/env bash
# Builds the CUDA targets here (the device machine has nvcc but none of the project's
# Debian libraries) and packs what scripts/cuda_device_run.sh needs into .devbin/
# (git-ignored through .git/info/exclude), which the device call names in `carry`:
#   binaries (stripped) and the shared libraries they load from Debian, xz-compressed
# (cuBLASLt stays behind: the device image has CUDA 13 and its own).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
TARGETS=(latentserve test_cuda)
for b in bench/bench_cuda_*.cpp; do TARGETS+=("$(basename "$b" .cpp)"); done
cmake --build "$BUILD_DIR" -j "${JOBS:-2}" --target "${TARGETS[@]}"
grep -qx '/.devbin/' .git/info/exclude 2>/dev/null || echo '/.devbin/' >> .git/info/exclude
rm -rf .devbin && mkdir -p .devbin/stage/bin .devbin/stage/lib
for t in "${TARGETS[@]}"; do strip -o ".devbin/stage/bin/$t" "$BUILD_DIR/$t"; done
# The Debian libraries the binaries load (not glibc, libstdc++ or the driver's).
ldd "$BUILD_DIR/latentserve" "$BUILD_DIR/test_cuda" | awk '/=> \//{print $3}' | sort -u |
  grep -Ev '/(libc|libm|libdl|librt|libpthread|libgcc_s|libstdc\+\+|libcublas|libcublasLt)\.so' |
  while read -r lib; do cp -L "$lib" .devbin/stage/lib/; done
tar -C .devbin/stage -cJf .devbin/payload.tar.xz bin lib
rm -rf .devbin/stage
du -h .devbin/payload.tar.xz
