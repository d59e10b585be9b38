#!/usr/bin/env bash
# Builds llama-server from the llama.cpp sources that node-llama-cpp carries (the
# peer of ../../../shared/peers/llamacpp), compiling only the server's own files and
# linking them against node-llama-cpp's prebuilt libllama, libllama-common and ggml
# (a full cmake build of llama.cpp takes hours on a loaded 2-core machine; this takes
# about 15 minutes). libmtmd is not among the prebuilt libraries: mtmd_stub.cpp stands
# in for it, text only (--mmproj is refused). Prints the binary's path.
# usage: build.sh [OUT_DIR]   (default /tmp/llamaserver; LLAMACPP_PEER_DIR as setup.sh)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-/tmp/llamaserver}
peer=$("$here/../../../shared/peers/llamacpp/setup.sh")
lib=$peer/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64
src=$out/src
mkdir -p "$out/obj" "$out/bin"
if [ ! -f "$src/tools/server/server.cpp" ]; then
  mkdir -p "$src"
  git -C "$src" init -q
  git -C "$src" fetch -q "$peer/node_modules/node-llama-cpp/llama/gitRelease.bundle"
  git -C "$src" checkout -q FETCH_HEAD
fi
# The web UI's embedded assets (ui.cpp, ui.h): cmake's configure step and one small target.
if [ ! -f "$src/build/tools/ui/libllama-ui.a" ]; then
  cmake -S "$src" -B "$src/build" -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF >/dev/null
  cmake --build "$src/build" --target llama-ui >/dev/null
fi
inc="-I$src/tools/server -I$src/tools/mtmd -I$src -I$src/common -I$src/vendor -I$src/include -I$src/ggml/include -I$src/build/tools/ui"
def="-DGGML_BACKEND_SHARED -DGGML_SHARED -DGGML_USE_CPU -DLLAMA_SHARED -DLLAMA_SUBPROCESS -DNDEBUG"
for f in "$src"/tools/server/*.cpp "$here/mtmd_stub.cpp"; do
  o=$out/obj/$(basename "$f" .cpp).o
  [ -f "$o" ] || echo "g++ -std=c++17 -O2 -fPIC $inc $def -c $f -o $o"
done | xargs -P 2 -I{} sh -c 'nice -n 10 {}'
for f in "$lib"/*.so; do ln -sf "$f" "$out/bin/"; done # ggml loads its CPU variants from the binary's folder
g++ -o "$out/bin/llama-server" "$out"/obj/*.o "$src/build/tools/ui/libllama-ui.a" -L"$lib" \
  -l:libllama-common.so -l:libllama.v0.5.0.so -l:libggml.v0.5.0.so -l:libggml-base.so -lpthread -Wl,-rpath,'$ORIGIN'
echo "$out/bin/llama-server"
