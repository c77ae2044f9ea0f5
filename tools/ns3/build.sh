#!/usr/bin/env bash
# Builds tools/ns3/two_flow.cc against Debian's ns-3.37 (packages ns3 + libns3-dev).
#
#   tools/ns3/build.sh            # installs the packages if missing, then compiles
#   OUT=/some/dir tools/ns3/build.sh
#
# The binary goes to $OUT/two_flow (default: <repo>/target/ns3/two_flow; /target
# is gitignored). Prints the binary's path on the last line of stdout.
#
# The ns-3 libraries are linked by name rather than through pkg-config: the
# Debian .pc files pull in /usr/lib/<multiarch>/libgsl.so and
# libsqlite3.so by absolute path, which exist only with libgsl-dev and
# libsqlite3-dev installed (neither is needed by this program).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
out="${OUT:-$repo/target/ns3}"
src="$here/two_flow.cc"
bin="$out/two_flow"

need=()
for pkg in ns3 libns3-dev g++; do
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed'; then
        need+=("$pkg")
    fi
done
if ((${#need[@]})); then
    echo "build.sh: installing ${need[*]}" >&2
    sudo_=""
    if [ "$(id -u)" -ne 0 ]; then sudo_="sudo"; fi
    $sudo_ apt-get update >&2
    DEBIAN_FRONTEND=noninteractive $sudo_ apt-get install -y --no-install-recommends "${need[@]}" >&2
fi

if [ ! -f /usr/include/ns3/core-module.h ]; then
    echo "build.sh: /usr/include/ns3/core-module.h missing after install" >&2
    exit 1
fi

mkdir -p "$out"
if [ -x "$bin" ] && [ "$bin" -nt "$src" ] && [ "$bin" -nt "$here/build.sh" ]; then
    echo "build.sh: $bin is up to date" >&2
    echo "$bin"
    exit 0
fi

libs=(
    ns3-applications
    ns3-point-to-point
    ns3-internet
    ns3-traffic-control
    ns3-bridge
    ns3-stats
    ns3-network
    ns3-core
)
echo "build.sh: compiling $src" >&2
g++ -std=c++17 -O2 "$src" -o "$bin.tmp" "${libs[@]/#/-l}" -lpthread
mv "$bin.tmp" "$bin"
echo "$bin"
