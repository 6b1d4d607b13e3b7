# The libraries libdlock links and the backends this build has.
#
# Redis (with Sentinel, Cluster and Redlock) is always built: it needs only
# hiredis and OpenSSL. Each other backend has an option AUTO|ON|OFF, as
# curl's optional features do:
#   DLOCK_WITH_ZOOKEEPER  libzookeeper-mt (Debian: libzookeeper-mt-dev)
#   DLOCK_WITH_ETCD       libcurl and json-c through pkg-config (Debian:
#                         libcurl4-openssl-dev, libjson-c-dev)
#   DLOCK_WITH_POSTGRES   libpq through pkg-config (Debian: libpq-dev)
#   DLOCK_WITH_MYSQL      MariaDB Connector/C through pkg-config (Debian:
#                         libmariadb-dev)
# AUTO (the default) builds the backend when its libraries are found, ON
# fails here naming the packages when they are not, OFF never builds it.
#
# Sets, for the rest of the build (and in the cache, for scripts that read
# an existing build directory's CMakeCache.txt):
#   DLOCK_HAVE_ZOOKEEPER, DLOCK_HAVE_ETCD,
#   DLOCK_HAVE_POSTGRES, DLOCK_HAVE_MYSQL    TRUE or FALSE
#   DLOCK_BACKENDS                           the built backends' names
#                                            ("redis zookeeper etcd")
# and the imported targets the library links privately, named as the
# installed CMake package names them again for the static library's
# consumers (cmake/dlockConfig.cmake.in): dlock::hiredis, dlock::zookeeper_mt
# (with its headers and THREADED), dlock::curl, dlock::json_c, dlock::libpq,
# dlock::libmariadb.
# Adding a
# backend: its option and detection here, its sources in src/CMakeLists.txt,
# its line in src/core/registry.c (docs/BACKENDS.md).

find_package(Threads REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(HIREDIS REQUIRED IMPORTED_TARGET hiredis)
find_package(OpenSSL 1.1.1 REQUIRED)
add_library(dlock::hiredis INTERFACE IMPORTED)
target_link_libraries(dlock::hiredis INTERFACE PkgConfig::HIREDIS)

# dlock_backend_option(VAR DOC): the cache entry VAR (AUTO|ON|OFF, default
# AUTO), its value normalised to upper case in VAR.
function(dlock_backend_option var doc)
  set(${var} AUTO CACHE STRING "${doc}: AUTO (when its libraries are found), ON or OFF")
  set_property(CACHE ${var} PROPERTY STRINGS AUTO ON OFF)
  string(TOUPPER "${${var}}" v)
  if(v MATCHES "^(ON|YES|TRUE|Y|1)$")
    set(v ON)
  elseif(v MATCHES "^(OFF|NO|FALSE|N|0)$")
    set(v OFF)
  elseif(NOT v STREQUAL "AUTO")
    message(FATAL_ERROR "${var}=${${var}}: expected AUTO, ON or OFF")
  endif()
  set(${var} ${v} PARENT_SCOPE)
endfunction()

dlock_backend_option(DLOCK_WITH_ZOOKEEPER "Build the ZooKeeper backend")
dlock_backend_option(DLOCK_WITH_ETCD "Build the etcd backend")
dlock_backend_option(DLOCK_WITH_POSTGRES "Build the PostgreSQL backend")
dlock_backend_option(DLOCK_WITH_MYSQL "Build the MySQL/MariaDB backend")

set(_summary "redis (sentinel, cluster, redlock)")

# ------------------------------------------------------------- ZooKeeper
# libzookeeper-mt has no .pc file: headers in /usr/include/zookeeper, the
# multithreaded library is zookeeper_mt and wants THREADED defined.
set(DLOCK_HAVE_ZOOKEEPER FALSE)
if(DLOCK_WITH_ZOOKEEPER STREQUAL "OFF")
  string(APPEND _summary "; zookeeper: off (DLOCK_WITH_ZOOKEEPER=OFF)")
else()
  find_path(DLOCK_ZOOKEEPER_INCLUDE zookeeper/zookeeper.h)
  find_library(DLOCK_ZOOKEEPER_LIB zookeeper_mt)
  if(DLOCK_ZOOKEEPER_INCLUDE AND DLOCK_ZOOKEEPER_LIB)
    set(DLOCK_HAVE_ZOOKEEPER TRUE)
    add_library(dlock::zookeeper_mt UNKNOWN IMPORTED)
    set_target_properties(dlock::zookeeper_mt PROPERTIES
      IMPORTED_LOCATION ${DLOCK_ZOOKEEPER_LIB}
      INTERFACE_INCLUDE_DIRECTORIES ${DLOCK_ZOOKEEPER_INCLUDE}
      INTERFACE_COMPILE_DEFINITIONS THREADED)
    string(APPEND _summary " zookeeper")
  elseif(DLOCK_WITH_ZOOKEEPER STREQUAL "ON")
    message(FATAL_ERROR "DLOCK_WITH_ZOOKEEPER=ON but libzookeeper-mt was not "
      "found (zookeeper/zookeeper.h and libzookeeper_mt): install "
      "libzookeeper-mt-dev, or configure with -DDLOCK_WITH_ZOOKEEPER=OFF")
  else()
    string(APPEND _summary "; zookeeper: off (no libzookeeper-mt-dev)")
  endif()
endif()

# ------------------------------------------------------------------ etcd
# the gRPC gateway through libcurl, JSON through json-c
set(DLOCK_HAVE_ETCD FALSE)
if(DLOCK_WITH_ETCD STREQUAL "OFF")
  string(APPEND _summary "; etcd: off (DLOCK_WITH_ETCD=OFF)")
else()
  pkg_check_modules(CURL QUIET IMPORTED_TARGET libcurl)
  pkg_check_modules(JSONC QUIET IMPORTED_TARGET json-c)
  set(_missing "")
  if(NOT CURL_FOUND)
    list(APPEND _missing libcurl4-openssl-dev)
  endif()
  if(NOT JSONC_FOUND)
    list(APPEND _missing libjson-c-dev)
  endif()
  if(NOT _missing)
    set(DLOCK_HAVE_ETCD TRUE)
    add_library(dlock::curl INTERFACE IMPORTED)
    target_link_libraries(dlock::curl INTERFACE PkgConfig::CURL)
    add_library(dlock::json_c INTERFACE IMPORTED)
    target_link_libraries(dlock::json_c INTERFACE PkgConfig::JSONC)
    string(APPEND _summary " etcd")
  else()
    string(REPLACE ";" ", " _missing "${_missing}")
    if(DLOCK_WITH_ETCD STREQUAL "ON")
      message(FATAL_ERROR "DLOCK_WITH_ETCD=ON but libcurl or json-c was not "
        "found through pkg-config: install ${_missing}, or configure with "
        "-DDLOCK_WITH_ETCD=OFF")
    endif()
    string(APPEND _summary "; etcd: off (no ${_missing})")
  endif()
endif()

# -------------------------------------------------------------- PostgreSQL
# libpq (advisory locks, src/postgres/)
set(DLOCK_HAVE_POSTGRES FALSE)
if(DLOCK_WITH_POSTGRES STREQUAL "OFF")
  string(APPEND _summary "; postgres: off (DLOCK_WITH_POSTGRES=OFF)")
else()
  pkg_check_modules(LIBPQ QUIET IMPORTED_TARGET libpq)
  if(LIBPQ_FOUND)
    set(DLOCK_HAVE_POSTGRES TRUE)
    add_library(dlock::libpq INTERFACE IMPORTED)
    target_link_libraries(dlock::libpq INTERFACE PkgConfig::LIBPQ)
    string(APPEND _summary " postgres")
  elseif(DLOCK_WITH_POSTGRES STREQUAL "ON")
    message(FATAL_ERROR "DLOCK_WITH_POSTGRES=ON but libpq was not found "
      "through pkg-config: install libpq-dev, or configure with "
      "-DDLOCK_WITH_POSTGRES=OFF")
  else()
    string(APPEND _summary "; postgres: off (no libpq-dev)")
  endif()
endif()

# ------------------------------------------------------------ MySQL/MariaDB
# MariaDB Connector/C (user-level locks, src/mysql/)
set(DLOCK_HAVE_MYSQL FALSE)
if(DLOCK_WITH_MYSQL STREQUAL "OFF")
  string(APPEND _summary "; mysql: off (DLOCK_WITH_MYSQL=OFF)")
else()
  pkg_check_modules(LIBMARIADB QUIET IMPORTED_TARGET libmariadb)
  if(LIBMARIADB_FOUND)
    set(DLOCK_HAVE_MYSQL TRUE)
    add_library(dlock::libmariadb INTERFACE IMPORTED)
    target_link_libraries(dlock::libmariadb INTERFACE PkgConfig::LIBMARIADB)
    string(APPEND _summary " mysql")
  elseif(DLOCK_WITH_MYSQL STREQUAL "ON")
    message(FATAL_ERROR "DLOCK_WITH_MYSQL=ON but libmariadb was not found "
      "through pkg-config: install libmariadb-dev, or configure with "
      "-DDLOCK_WITH_MYSQL=OFF")
  else()
    string(APPEND _summary "; mysql: off (no libmariadb-dev)")
  endif()
endif()

set(DLOCK_BACKENDS redis)
if(DLOCK_HAVE_ZOOKEEPER)
  list(APPEND DLOCK_BACKENDS zookeeper)
endif()
if(DLOCK_HAVE_ETCD)
  list(APPEND DLOCK_BACKENDS etcd)
endif()
if(DLOCK_HAVE_POSTGRES)
  list(APPEND DLOCK_BACKENDS postgres)
endif()
if(DLOCK_HAVE_MYSQL)
  list(APPEND DLOCK_BACKENDS mysql)
endif()
string(REPLACE ";" " " DLOCK_BACKENDS "${DLOCK_BACKENDS}")
set(DLOCK_HAVE_ZOOKEEPER ${DLOCK_HAVE_ZOOKEEPER} CACHE INTERNAL
  "the ZooKeeper backend is built")
set(DLOCK_HAVE_ETCD ${DLOCK_HAVE_ETCD} CACHE INTERNAL
  "the etcd backend is built")
set(DLOCK_HAVE_POSTGRES ${DLOCK_HAVE_POSTGRES} CACHE INTERNAL
  "the PostgreSQL backend is built")
set(DLOCK_HAVE_MYSQL ${DLOCK_HAVE_MYSQL} CACHE INTERNAL
  "the MySQL/MariaDB backend is built")
set(DLOCK_BACKENDS ${DLOCK_BACKENDS} CACHE INTERNAL
  "the backends built, as dlock_backends() lists them")
message(STATUS "dlock backends: ${_summary}")
unset(_summary)
unset(_missing)
