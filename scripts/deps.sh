#!/bin/sh
# Installs the Debian 12 packages that building, testing, fuzzing and the
# demo need, when any is missing.  As root it runs apt-get; otherwise it
# prints the exact command to run and fails.
#
# Keep one package per line, grouped by what needs it.
set -eu

PACKAGES="
build-essential
pkg-config
libcurl4-openssl-dev
libssl-dev
libarchive-dev
libcjson-dev
libyaml-dev
libmicrohttpd-dev
libcmocka-dev
clang
libclang-rt-14-dev
python3
python3-pytest
python3-yaml
python3-cryptography
nginx-light
docker-registry
skopeo
apache2-utils
openssl
zstd
gzip
tar
time
curl
procps
etcd-server
prometheus
"

missing=""
for p in $PACKAGES; do
	status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
	case "$status" in
	*"install ok installed"*) ;;
	*) missing="$missing $p" ;;
	esac
done

if [ -z "$missing" ]; then
	echo "deps: all packages present"
	exit 0
fi

cmd="apt-get install -y --no-install-recommends$missing"
if [ "$(id -u)" != 0 ]; then
	echo "deps: missing packages:$missing" >&2
	echo "deps: run as root: apt-get update && $cmd" >&2
	exit 1
fi
echo "deps: installing$missing"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# shellcheck disable=SC2086
apt-get install -y -qq --no-install-recommends $missing
