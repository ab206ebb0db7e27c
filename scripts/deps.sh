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
python3-pytest-xdist
python3-yaml
python3-cryptography
python3-pip
python3-venv
nginx-light
docker-registry
skopeo
apache2-utils
openssh-server
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

# kubectl: whatever the machine has (any kubectl package provides it); on a
# machine with none, Debian 12's own (kubernetes-client, 1.20), which the
# emulator serves as it serves every Debian kubectl.  `make deps-real` also
# builds kubectl at the real kube-apiserver's version into .real/bin.
if ! command -v kubectl >/dev/null 2>&1; then
	missing="$missing kubernetes-client"
fi

# The PyPI packages of tests/requirements.txt (pinned, hash-checked), for the
# Debian python3 the tests run with; after the Debian packages (pip is one).
python_requirements() {
	req="$(dirname "$0")/../tests/requirements.txt"
	if /usr/bin/python3 - "$req" <<'PY'
import re, sys
from importlib.metadata import version, PackageNotFoundError
for name, want in re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)", open(sys.argv[1]).read(), re.M):
    try:
        if version(name) != want:
            sys.exit(1)
    except PackageNotFoundError:
        sys.exit(1)
PY
	then
		echo "deps: python requirements present"
		return 0
	fi
	cmd="/usr/bin/python3 -m pip install --break-system-packages --no-deps --require-hashes -r $req"
	if [ "$(id -u)" != 0 ]; then
		echo "deps: run as root: $cmd" >&2
		exit 1
	fi
	echo "deps: installing python requirements"
	$cmd
}

if [ -z "$missing" ]; then
	echo "deps: all packages present"
	python_requirements
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
python_requirements
