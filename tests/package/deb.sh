#!/usr/bin/env bash
# The Debian package end to end (README.md "Installing the package"; cmake/package.cmake,
# packaging/): builds the .deb from an existing build directory with CPack, installs it with
# dpkg on this machine, checks its files (binaries, engine libraries found through the relative
# RPATH, the unit, the environment file), the system user and /var/cache/lineage, verifies the unit
# with systemd-analyze where it exists, starts the server as the unit would (its ExecStart with its
# EnvironmentFile, as its User: this check does not need systemd as PID 1), serves a chat request on
# a tiny model made by the installed lineage-mkmodel, stops it with SIGTERM (the cache is written
# to /var/cache/lineage), then purges the package and checks that everything is gone.
#
#   tests/package/deb.sh [BUILD_DIR]     (default build/; needs root, or sudo)
#
# It refuses to run over an installed lineage-server package it did not install.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
say() { printf '\033[1m[package]\033[0m %s\n' "$*" >&2; }
fail() { say "FAIL: $*"; exit 1; }
sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo

if [[ "$(dpkg-query -W -f='${Status}' lineage-server 2>/dev/null)" == *"install ok installed"* ]]; then
  fail "a lineage-server package is already installed here; remove it first (dpkg --purge lineage-server)"
fi

say "building the package (cpack) from $build"
rm -rf "$build/package"
cpack --config "$build/CPackConfig.cmake" -B "$build/package" >/dev/null
deb=$(ls "$build"/package/lineage-server_*.deb)
[ -f "$deb" ] || fail "no .deb in $build/package"

work=$(mktemp -d)
pid=""
server_pid=""
cleanup() {
  [ -n "$server_pid" ] && $sudo kill "$server_pid" 2>/dev/null || true
  if [[ "$(dpkg-query -W -f='${Status}' lineage-server 2>/dev/null)" == *installed* ]]; then
    $sudo dpkg --purge lineage-server >/dev/null 2>&1 || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

say "installing $(basename "$deb") with dpkg"
$sudo dpkg -i "$deb" >/dev/null

say "checking the installed files"
for f in /usr/bin/lineage-server /usr/bin/lineage-mkmodel; do
  [ -x "$f" ] || fail "$f is missing or not executable"
  runpath=$(readelf -d "$f" | sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p')
  [ "$runpath" = '$ORIGIN/../lib/lineage' ] || fail "$f: RUNPATH '$runpath', expected \$ORIGIN/../lib/lineage"
  # Every shared library resolves, the engine's from /usr/lib/lineage (not the build tree).
  deps=$(ldd "$f")
  ! grep -q "not found" <<<"$deps" || fail "$f: $(grep 'not found' <<<"$deps")"
  for lib in libllama.so.0 libggml.so.0 libggml-base.so.0; do
    grep -q "$lib => /usr/bin/../lib/lineage/$lib " <<<"$deps" || fail "$f: $lib not loaded from /usr/lib/lineage: $deps"
  done
  # The CPU backend: linked in, or (an engine with loadable backends: the CUDA build) a module
  # beside libggml, which the binaries load from there at startup.
  if [ -e /usr/lib/lineage/libggml-cpu.so ]; then
    ! grep -q "libggml-cpu.so.0 =>" <<<"$deps" || fail "$f: links libggml-cpu.so.0 although the backends are modules"
  else
    grep -q "libggml-cpu.so.0 => /usr/bin/../lib/lineage/libggml-cpu.so.0 " <<<"$deps" ||
      fail "$f: libggml-cpu.so.0 not loaded from /usr/lib/lineage: $deps"
  fi
done
for lib in libllama-common.so.0 libmtmd.so.0; do
  grep -q "$lib => /usr/bin/../lib/lineage/$lib " <<<"$(ldd /usr/bin/lineage-server)" || fail "$lib not from /usr/lib/lineage"
done
unit=/lib/systemd/system/lineage-server.service
[ -f "$unit" ] || fail "$unit is missing"
[ -f /etc/default/lineage-server ] || fail "/etc/default/lineage-server is missing"
grep -qx '/etc/default/lineage-server' /var/lib/dpkg/info/lineage-server.conffiles || fail "the environment file is not a conffile"
getent passwd lineage >/dev/null || fail "the system user lineage was not created"
uid=$(id -u lineage)
[ "$uid" -lt 1000 ] || fail "user lineage has uid $uid: not a system user"
[ "$(getent passwd lineage | cut -d: -f7)" = /usr/sbin/nologin ] || fail "user lineage has a login shell"
[ "$(stat -c %U:%G:%a /var/cache/lineage)" = lineage:lineage:750 ] || fail "/var/cache/lineage: $(stat -c %U:%G:%a /var/cache/lineage)"
# The help text is read whole first: `--help | grep -q` under pipefail fails when grep exits on the
# first match while the server is still writing (SIGPIPE, exit 141), as CI saw once.
help=$(/usr/bin/lineage-server --help) || fail "the installed lineage-server --help exited $?"
grep -q -- '--cache-page' <<<"$help" || fail "the installed lineage-server --help does not list --cache-page"

if command -v systemd-analyze >/dev/null; then
  say "systemd-analyze verify $unit"
  out=$(systemd-analyze verify "$unit" 2>&1) || fail "systemd-analyze verify: $out"
  [ -z "$out" ] || fail "systemd-analyze verify warned: $out"
else
  say "systemd-analyze is not installed: the unit is not verified"
fi

# The unit's own settings, read from the installed file.
key() { sed -n "s/^$1=//p" "$unit" | head -n 1; }
exec_start=$(key ExecStart); user=$(key User); envfile=$(key EnvironmentFile); cachedir=$(key CacheDirectory)
[ "$exec_start" = /usr/bin/lineage-server ] || fail "ExecStart is '$exec_start'"
[ "$user" = lineage ] && [ "$envfile" = /etc/default/lineage-server ] && [ "$cachedir" = lineage ] ||
  fail "unit: User=$user EnvironmentFile=$envfile CacheDirectory=$cachedir"

say "making a tiny model with the installed lineage-mkmodel"
model_dir=/var/lib/lineage
$sudo runuser -u lineage -- /usr/bin/lineage-mkmodel --arch qwen3 --preset tiny --seed 1 -o "$model_dir/model.gguf" >/dev/null
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')

say "starting $exec_start as $user with $envfile (port $port)"
# EnvironmentFile: KEY=VALUE lines, '#' comments (systemd.exec); the port is this test's own.
mapfile -t vars < <(grep -Ev '^[[:space:]]*(#|$)' "$envfile")
grep -qx 'LINEAGE_MODEL=/var/lib/lineage/model.gguf' <<<"$(printf '%s\n' "${vars[@]}")" ||
  fail "$envfile does not name /var/lib/lineage/model.gguf"
$sudo runuser -u "$user" -- env -i PATH=/usr/bin:/bin "${vars[@]}" LINEAGE_PORT="$port" \
  sh -c "echo \"server pid \$\$\"; cd /var/cache/lineage && exec $exec_start" >"$work/server.log" 2>&1 &
pid=$!  # runuser's; the server is its child, whose pid the first log line gives
for _ in $(seq 600); do
  grep -q "listening on http://" "$work/server.log" && break
  kill -0 "$pid" 2>/dev/null || { cat "$work/server.log" >&2; fail "the server exited at startup"; }
  sleep 0.1
done
grep -q "listening on http://" "$work/server.log" || { cat "$work/server.log" >&2; fail "the server did not start"; }
server_pid=$(sed -n 's/^server pid \([0-9]*\)$/\1/p' "$work/server.log" | head -n 1)
[ -n "$server_pid" ] || fail "no server pid in the log"
[ "$(ps -o comm= -p "$server_pid")" = lineage-server ] || fail "pid $server_pid is not lineage-server"
server_user=$(ps -o user= -p "$server_pid" | tr -d ' ')
[ "$server_user" = lineage ] || fail "the server runs as '$server_user'"

say "serving a chat request"
body='{"model":"tiny","messages":[{"role":"user","content":"Say hello from the package."}],"max_tokens":4,"temperature":0}'
reply=$(curl -sS -H 'Content-Type: application/json' -d "$body" "http://127.0.0.1:$port/v1/chat/completions")
python3 - "$reply" <<'PY' || fail "bad chat reply: $reply"
import json, sys
r = json.loads(sys.argv[1])
assert r["object"] == "chat.completion", r
assert r["usage"]["completion_tokens"] == 4 and r["choices"][0]["finish_reason"] == "length", r
PY
[ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/cache")" = 200 ] || fail "GET /cache is not 200"
dir=$(curl -sS "http://127.0.0.1:$port/v1/cache/stats" | python3 -c 'import json,sys; print(json.load(sys.stdin)["disk"]["dir"])')
[ "$dir" = /var/cache/lineage ] || fail "the disk tier is in '$dir', not /var/cache/lineage"

say "stopping it with SIGTERM (the unit's KillSignal): the cache is written to /var/cache/lineage"
$sudo kill -TERM "$server_pid"
wait "$pid" || fail "the server did not exit 0 on SIGTERM: $(tail -5 "$work/server.log")"
pid=""
server_pid=""
files=$(find /var/cache/lineage -type f -user lineage | wc -l)
[ "$files" -ge 2 ] || fail "no cache files owned by lineage in /var/cache/lineage ($files)"

say "purging the package"
$sudo dpkg --purge lineage-server >/dev/null
for p in /usr/bin/lineage-server /usr/bin/lineage-mkmodel /usr/lib/lineage "$unit" /etc/default/lineage-server \
         /var/cache/lineage /var/lib/lineage; do
  [ ! -e "$p" ] || fail "$p is still there after dpkg --purge"
done
! getent passwd lineage >/dev/null || fail "user lineage is still there after dpkg --purge"
! dpkg-query -W lineage-server >/dev/null 2>&1 || fail "dpkg still knows lineage-server"
say "package test passed"
