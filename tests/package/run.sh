#!/usr/bin/env bash
# tests/package/run.sh - do the Debian packages build, install and serve a
# consumer?  Meant for a fresh Debian 12 root (CI runs it in one); as root.
#
#   tests/package/run.sh [--no-lintian] [--keep]
#
# 1. installs the tools (build-essential, dpkg-dev, cmake, pkg-config) and
#    the build dependencies of debian/control (apt-get build-dep);
# 2. builds the packages with `dpkg-buildpackage -us -uc -b` in a copy of
#    the repository (a checkout is never written to) and checks their
#    contents; runs lintian on them (no errors allowed) unless --no-lintian;
# 3. removes the build dependencies again, so that installing the .debs has
#    to bring in what a consumer needs (libdlock-dev's Depends), and installs
#    the .debs with `apt-get install ./*.deb`;
# 4. builds examples/critical_section.c and examples/fenced_counter.c out of
#    the tree, against the INSTALLED packages only: with
#    `pkg-config --cflags --libs`, with pkg-config --static against
#    libdlock.a, and as a small CMake project (find_package(dlock),
#    dlock::dlock); checks with ldd that the shared builds load libdlock.so.0
#    from /usr/lib/<multiarch>, and runs every build against a private
#    redis-server (tests/harness/with-redis.sh): each takes and releases its
#    lock, and the fenced counter counts every run once; with libuv1-dev
#    installed then (a consumer's choice, not a dependency), builds
#    examples/async_waiters.c on the installed libuv adapter
#    (dlock/adapters/libuv.h) and runs its 1000 waiters there too;
# 5. runs the installed command: `dlock --version`, a command under a lock on
#    that server, its manual page (`man -w dlock` when man-db is there).
#
# Prints one PASS/FAIL line per check and exits 1 if any failed (2 on bad
# usage or when it cannot run at all). Every package it installed is purged
# again when it exits (so it can run on a developer's machine too), unless
# --keep is given.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
lintian=yes
keep=no
for arg in "$@"; do
  case "$arg" in
    --no-lintian) lintian=no ;;
    --keep) keep=yes ;;
    *)
      echo "usage: tests/package/run.sh [--no-lintian] [--keep]" >&2
      exit 2
      ;;
  esac
done

pass=0
fail=0
ok() {
  echo "PASS: $*"
  pass=$((pass + 1))
}
bad() {
  echo "FAIL: $*"
  fail=$((fail + 1))
}
# check DESCRIPTION COMMAND...: PASS when COMMAND succeeds; its output is
# shown on failure.
check() {
  local what=$1 out
  shift
  if out=$("$@" 2>&1); then
    ok "$what"
  else
    bad "$what"
    printf '%s\n' "$out" | sed 's/^/    /' | tail -n 40
  fi
}
# a step's header, with the seconds since the start
phase() { echo "== $* (at ${SECONDS} s)"; }
finish() {
  echo "package test: $pass passed, $fail failed (${SECONDS} s)"
  [ "$fail" -eq 0 ] && exit 0
  exit 1
}
abort() {
  bad "$*"
  echo "package test: stopped early"
  finish
}

if [ "$(id -u)" -ne 0 ]; then
  echo "tests/package/run.sh: run as root (it installs packages)" >&2
  exit 2
fi
if ! command -v apt-get >/dev/null || ! [ -f "$repo/debian/control" ]; then
  echo "tests/package/run.sh: needs apt-get and the repository's debian/" >&2
  exit 2
fi
for p in libdlock0 libdlock-dev dlock; do
  if dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed"; then
    echo "tests/package/run.sh: $p is already installed; remove it first" >&2
    exit 2
  fi
done

export DEBIAN_FRONTEND=noninteractive
work=$(mktemp -d "${TMPDIR:-/tmp}/dlock-package-XXXXXX") || exit 2
installed() { dpkg-query -W -f='${db:Status-Abbrev} ${Package}\n' |
  awk '$1 == "ii" { print $2 }' | sort; }
installed >"$work/before"
cleanup() {
  if [ "$keep" = no ]; then
    # purge exactly what this script added
    installed | comm -13 "$work/before" - >"$work/added"
    if [ -s "$work/added" ]; then
      xargs -a "$work/added" apt-get purge -y -qq >/dev/null 2>&1 ||
        echo "note: could not purge every package this test installed"
    fi
  fi
  rm -rf -- "$work"
}
trap cleanup EXIT

apt_get() { apt-get -y -qq -o=Dpkg::Use-Pty=0 "$@"; }

# ------------------------------------------------------------ 1. the tools
phase "installing the tools and build dependencies"
apt_get update >/dev/null || abort "apt-get update"
# Kept after the build (a consumer needs a compiler, pkg-config and cmake);
# redis-server runs the examples; man-db is not installed for this test.
apt_get install --no-install-recommends build-essential dpkg-dev cmake \
  pkg-config redis-server >"$work/apt.log" 2>&1 ||
  { tail -n 20 "$work/apt.log"; abort "install the tools"; }
installed >"$work/tools"
apt_get build-dep --no-install-recommends "$repo" >"$work/apt.log" 2>&1 ||
  { tail -n 20 "$work/apt.log"; abort "apt-get build-dep (debian/control)"; }
installed | comm -13 "$work/tools" - >"$work/builddeps"
ok "build dependencies installed ($(wc -l <"$work/builddeps") packages)"

# ------------------------------------------------------------ 2. the build
phase "dpkg-buildpackage -us -uc -b (in a copy of the repository)"
mkdir -p "$work/build/dlock"
if command -v git >/dev/null && git -C "$repo" rev-parse --git-dir >/dev/null 2>&1; then
  (cd "$repo" && git ls-files -co --exclude-standard -z |
    tar --null -cf - -T -) | tar -xf - -C "$work/build/dlock"
else
  tar -C "$repo" --exclude='./build*' --exclude=./.git -cf - . |
    tar -xf - -C "$work/build/dlock"
fi
if (cd "$work/build/dlock" && dpkg-buildpackage -us -uc -b) >"$work/build.log" 2>&1; then
  ok "dpkg-buildpackage -us -uc -b"
else
  tail -n 40 "$work/build.log" | sed 's/^/    /'
  abort "dpkg-buildpackage -us -uc -b"
fi
grep -E '^dpkg-deb: building' "$work/build.log" | sed 's/^/    /'
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
libdir=/usr/lib/$multiarch
debs=()
for p in libdlock0 libdlock-dev dlock; do
  f=$(ls "$work/build/${p}_"*.deb 2>/dev/null | head -n 1)
  if [ -n "$f" ]; then
    debs+=("$f")
  else
    bad "package $p built"
  fi
done
[ ${#debs[@]} -eq 3 ] || abort "the three packages were built"
ok "libdlock0, libdlock-dev and dlock built"

# contents: PACKAGE then paths that must be in it
has() {
  local deb=$1 path missing=""
  shift
  for path in "$@"; do
    dpkg-deb -c "$deb" | awk '{ print $6 }' | grep -qx "\.$path" ||
      missing="$missing $path"
  done
  [ -z "$missing" ] || { echo "missing:$missing"; return 1; }
}
check "libdlock0 holds libdlock.so.0 and no development files" \
  bash -c "$(declare -f has); has '${debs[0]}' $libdir/libdlock.so.0 &&
    ! dpkg-deb -c '${debs[0]}' | grep -E 'include|\.a$|\.pc$|cmake'"
check "libdlock-dev holds the headers, .so, .a, dlock.pc and the CMake package" \
  has "${debs[1]}" /usr/include/dlock/dlock.h \
  /usr/include/dlock/adapters/libuv.h /usr/include/dlock/adapters/libevent.h \
  "$libdir/libdlock.so" \
  "$libdir/libdlock.a" "$libdir/pkgconfig/dlock.pc" \
  "$libdir/cmake/dlock/dlockConfig.cmake"
check "libdlock-dev holds the library manual pages, dlock(3) and its groups" \
  has "${debs[1]}" /usr/share/man/man3/dlock.3.gz \
  /usr/share/man/man3/dlock_client.3.gz /usr/share/man/man3/dlock_lock.3.gz
check "dlock holds the command, its manual page and bash completion" \
  has "${debs[2]}" /usr/bin/dlock /usr/share/man/man1/dlock.1.gz \
  /usr/share/bash-completion/completions/dlock
check "libdlock0 has a symbols file" \
  bash -c "dpkg-deb -I '${debs[0]}' symbols | grep -q '^ dlock_client_new@Base'"

if [ "$lintian" = yes ]; then
  phase "lintian"
  if apt_get install --no-install-recommends lintian >"$work/apt.log" 2>&1; then
    changes=$(ls "$work/build/"*.changes | head -n 1)
    lintian --display-info --pedantic "$changes" >"$work/lintian.log" 2>&1
    sed 's/^/    /' "$work/lintian.log"
    if grep -q '^E: ' "$work/lintian.log"; then
      bad "lintian: errors"
    else
      ok "lintian: no errors ($(grep -c '^W: ' "$work/lintian.log") warnings)"
    fi
  else
    tail -n 20 "$work/apt.log"
    bad "install lintian"
  fi
fi

# ------------------------------------------------------------ 3. install
phase "installing the packages without the build dependencies"
if [ -s "$work/builddeps" ]; then
  xargs -a "$work/builddeps" apt-get -y -qq purge >"$work/apt.log" 2>&1 ||
    { tail -n 20 "$work/apt.log"; abort "purge the build dependencies"; }
fi
if dpkg-query -W -f='${Status}' libhiredis-dev 2>/dev/null | grep -q "ok installed"; then
  echo "note: libhiredis-dev was installed before this test; libdlock-dev's"
  echo "      dependencies are not checked from scratch"
else
  ok "build dependencies removed (no libhiredis-dev before the .debs)"
fi
apt_get install --no-install-recommends "${debs[@]}" >"$work/apt.log" 2>&1 ||
  { tail -n 20 "$work/apt.log"; abort "apt-get install ./*.deb"; }
ok "apt-get install ${debs[*]##*/}"
check "the installed dlock.pc and CMake package name no build directory" \
  bash -c "! grep -rn -e '$work' -e obj- $libdir/pkgconfig/dlock.pc $libdir/cmake/dlock"

# ------------------------------------------------------------ 4. consumers
phase "building the examples against the installed packages"
cons=$work/consumer
mkdir -p "$cons"
cp "$repo/examples/critical_section.c" "$repo/examples/fenced_counter.c" \
  "$repo/examples/async_waiters.c" "$cons/"
cd "$cons" || abort "cd $cons"
check "pkg-config --modversion dlock is 0.1.0" \
  bash -c '[ "$(pkg-config --modversion dlock)" = 0.1.0 ]'

# pkg-config, shared
echo "    cc critical_section.c \$(pkg-config --cflags --libs dlock)"
echo "      = $(pkg-config --cflags --libs dlock 2>&1)"
check "pkg-config build of critical_section" \
  bash -c 'cc -o pc_critical_section critical_section.c $(pkg-config --cflags --libs dlock)'
check "pkg-config build of fenced_counter (dlock and hiredis)" \
  bash -c 'cc -o pc_fenced_counter fenced_counter.c $(pkg-config --cflags --libs dlock hiredis)'
# the async API through the installed libuv adapter (libuv1-dev is the
# consumer's own: libdlock-dev only suggests it)
if apt_get install --no-install-recommends libuv1-dev >"$work/apt.log" 2>&1; then
  check "pkg-config build of async_waiters (dlock/adapters/libuv.h, libuv)" \
    bash -c 'cc -o pc_async_waiters async_waiters.c $(pkg-config --cflags --libs dlock libuv)'
else
  tail -n 20 "$work/apt.log"
  bad "install libuv1-dev"
fi

# libdlock.a through pkg-config --static, the archive named explicitly
# (-ldlock would pick libdlock.so) and the rest linked as pkg-config says
static_libs=$(pkg-config --static --libs dlock 2>&1)
echo "    pkg-config --static --libs dlock"
echo "      = $static_libs"
check "static build of critical_section: libdlock.a and pkg-config --static" \
  bash -c 'libs=$(pkg-config --static --libs dlock) &&
    cc -o st_critical_section critical_section.c $(pkg-config --cflags dlock) \
      ${libs/-ldlock/-l:libdlock.a}'

# CMake: the shared library (dlock::dlock), and the static one (the
# package's component `static`, dlock::dlock_static) in a second project
mkdir -p cmake-shared cmake-static
cp critical_section.c fenced_counter.c cmake-shared/
cp critical_section.c cmake-static/
cat >cmake-shared/CMakeLists.txt <<'EOF'
cmake_minimum_required(VERSION 3.16)
project(dlock_consumer LANGUAGES C)
find_package(dlock 0.1 REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(HIREDIS REQUIRED IMPORTED_TARGET hiredis)
add_executable(critical_section critical_section.c)
target_link_libraries(critical_section PRIVATE dlock::dlock)
add_executable(fenced_counter fenced_counter.c)
target_link_libraries(fenced_counter PRIVATE dlock::dlock PkgConfig::HIREDIS)
EOF
cat >cmake-static/CMakeLists.txt <<'EOF'
cmake_minimum_required(VERSION 3.16)
project(dlock_static_consumer LANGUAGES C)
find_package(dlock 0.1 REQUIRED COMPONENTS static)
add_executable(critical_section critical_section.c)
target_link_libraries(critical_section PRIVATE dlock::dlock_static)
EOF
check "CMake project: find_package(dlock), dlock::dlock configures" \
  cmake -S cmake-shared -B cmake-shared/build
check "CMake build of critical_section and fenced_counter (dlock::dlock)" \
  cmake --build cmake-shared/build
[ -f cmake-shared/build/critical_section ] &&
  cp cmake-shared/build/critical_section cm_critical_section
[ -f cmake-shared/build/fenced_counter ] &&
  cp cmake-shared/build/fenced_counter cm_fenced_counter
check "CMake project: find_package(dlock COMPONENTS static) configures" \
  cmake -S cmake-static -B cmake-static/build
check "CMake build of critical_section (dlock::dlock_static)" \
  cmake --build cmake-static/build
[ -f cmake-static/build/critical_section ] &&
  cp cmake-static/build/critical_section cs_critical_section

# ldd: the shared builds load the packaged library (ldd may show it as
# /lib/<multiarch>/..., the same file on a merged-/usr system); the static
# builds do not load it at all
packaged=$(readlink -f "$libdir/libdlock.so.0")
echo "    $libdir/libdlock.so.0 -> $packaged ($(dpkg -S "$packaged" 2>&1))"
links_packaged() {
  local lib
  lib=$(ldd "$1" | awk '$1 == "libdlock.so.0" { print $3 }')
  echo "    $1: libdlock.so.0 => ${lib:-(none)}"
  [ -n "$lib" ] && [ "$(readlink -f "$lib")" = "$packaged" ] &&
    dpkg -S "$packaged" | grep -q '^libdlock0:'
}
for b in pc_critical_section pc_fenced_counter cm_critical_section cm_fenced_counter; do
  if [ -f "$b" ]; then
    if links_packaged "$b"; then
      ok "$b loads libdlock.so.0 from $libdir (package libdlock0)"
    else
      bad "$b loads libdlock.so.0 from $libdir (package libdlock0)"
    fi
  fi
done
for b in st_critical_section cs_critical_section; do
  if [ -f "$b" ]; then
    check "$b has libdlock linked in (no libdlock.so.0)" \
      bash -c "! ldd $b | grep -q libdlock"
  fi
done

# Run them, and the installed command, on a private redis-server.
phase "running the consumers and the command on a private redis-server"
cat >"$work/run-all.sh" <<'EOF'
#!/usr/bin/env bash
# Runs in tests/harness/with-redis.sh (DLOCK_URL is the private server).
# Each line printed is "PASS: ..." or "FAIL: ...".
n=0
for b in pc_critical_section st_critical_section cm_critical_section cs_critical_section; do
  [ -f "$b" ] || continue
  if out=$(./"$b" "$DLOCK_URL" pkgtest 2>&1) &&
     grep -q "^holding 'pkgtest'" <<<"$out" &&
     grep -q "^released 'pkgtest'" <<<"$out"; then
    echo "PASS: $b took and released the lock"
  else
    echo "FAIL: $b took and released the lock"
    sed 's/^/    /' <<<"$out"
  fi
done
for b in pc_fenced_counter cm_fenced_counter; do
  [ -f "$b" ] || continue
  n=$((n + 1))
  if out=$(./"$b" "$DLOCK_URL" pkgcount 2>&1) &&
     grep -q "counter is now $n\$" <<<"$out"; then
    echo "PASS: $b counted run $n ($out)"
  else
    echo "FAIL: $b counted run $n"
    sed 's/^/    /' <<<"$out"
  fi
done
if [ -f pc_async_waiters ]; then
  if out=$(./pc_async_waiters "$DLOCK_URL" 2>&1) &&
     grep -q "^waiters=1000 names=100 grants=1000 violations=0 " <<<"$out"; then
    echo "PASS: pc_async_waiters: 1000 async waiters granted, none overlapping"
  else
    echo "FAIL: pc_async_waiters: 1000 async waiters granted, none overlapping"
    sed 's/^/    /' <<<"$out"
  fi
fi
if out=$(dlock pkgcmd sh -c 'echo ran-under-lock' 2>&1) &&
   [ "$out" = ran-under-lock ]; then
  echo "PASS: dlock ran a command under a lock"
else
  echo "FAIL: dlock ran a command under a lock"
  sed 's/^/    /' <<<"$out"
fi
EOF
if out=$(bash "$repo/tests/harness/with-redis.sh" -- bash "$work/run-all.sh" 2>&1); then
  :
fi
printf '%s\n' "$out" | grep -v -E '^(PASS|FAIL): ' | sed 's/^/    /'
while IFS= read -r line; do
  case "$line" in
    PASS:*) ok "${line#PASS: }" ;;
    FAIL:*) bad "${line#FAIL: }" ;;
  esac
done <<<"$out"
grep -q '^PASS: dlock ran' <<<"$out" || grep -q '^FAIL: dlock ran' <<<"$out" ||
  bad "the consumers ran on a private redis-server"

# ------------------------------------------------------------ 5. command
phase "the installed command"
if v=$(dlock --version 2>&1) && grep -q '0\.1\.0' <<<"$v"; then
  ok "dlock --version: $v"
else
  bad "dlock --version: $v"
fi
check "dlock is /usr/bin/dlock from the dlock package" \
  bash -c '[ "$(command -v dlock)" = /usr/bin/dlock ] && dpkg -S /usr/bin/dlock | grep -q "^dlock:"'
echo "    ldd /usr/bin/dlock (libdlock is linked in statically):"
ldd /usr/bin/dlock | sed 's/^/    /'
check "dlock's shared libraries all resolve" \
  bash -c '! ldd /usr/bin/dlock | grep -q "not found"'
if v=$(dlock -V 2>&1) && grep -q '0\.1\.0' <<<"$v"; then
  ok "dlock -V: $v"
else
  bad "dlock -V: $v"
fi
if command -v man >/dev/null; then
  for page in "1 dlock" "3 dlock" "3 dlock_lock"; do
    # shellcheck disable=SC2086  # "SECTION NAME"
    if p=$(man -w $page 2>&1); then
      ok "man -w $page: $p"
    else
      bad "man -w $page: $p"
    fi
  done
else
  for f in man1/dlock.1.gz man3/dlock.3.gz man3/dlock_lock.3.gz; do
    check "man-db absent: /usr/share/man/$f installed" test -f "/usr/share/man/$f"
  done
fi
check "bash completion installed for dlock" \
  test -f /usr/share/bash-completion/completions/dlock

cd / || true
finish
