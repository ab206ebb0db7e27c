#!/bin/bash
# Builds the REAL programs the conformance tests run, into .real/ at the repo
# root (`make deps-real`, called by `make test`):
#
#   .real/bin/kube-apiserver, kubectl   k8s.io/kubernetes ($KUBERNETES_VERSION)
#   .real/bin/etcd                      Debian's etcd-server, or etcd built from
#                                       go.etcd.io/etcd/server/v3 ($ETCD_SOURCE)
#   .real/bin/pulumi                    github.com/pulumi/pulumi/pkg/v3 ($PULUMI_VERSION)
#   .real/bin/pulumi-language-yaml      github.com/pulumi/pulumi-yaml ($PULUMI_YAML_VERSION),
#                                       its own stub module (tests/real/pulumi-yaml)
#   .real/provider/pulumi-resource-standin  tests/real/pulumi/standin (the test provider;
#                                       not in bin/: on PATH the CLI would use it as an
#                                       "ambient" plugin and warn on every run)
#   .real/bin/pulumi-language-nodejs    github.com/pulumi/pulumi/sdk/v3 ($PULUMI_NODEJS_HOST_VERSION),
#                                       stub tests/real/pulumi-nodejs
#   .real/bin/pulumi-resource-pulumi-nodejs  launcher of Node.js dynamic providers
#   .real/bin/pulumi-language-python    github.com/pulumi/pulumi/sdk/v3 ($PULUMI_PYTHON_HOST_VERSION),
#                                       stub tests/real/pulumi-python; with its exec shim
#                                       pulumi-language-python-exec from the same module
#   .real/python/venv                   a venv (/usr/bin/python3 -m venv) with pulumi
#                                       ($PULUMI_PYTHON_SDK_VERSION) from PyPI by pip
#   .real/bin/pulumi-language-go        github.com/pulumi/pulumi/sdk/v3 ($PULUMI_GO_HOST_VERSION),
#                                       stub tests/real/pulumi-go
#   .real/bin/semver-oracle             tests/real/semver: Masterminds/semver ($MASTERMINDS_SEMVER_VERSION)
#                                       and fluxcd/pkg/version ($FLUXCD_PKG_VERSION_VERSION), what
#                                       Flux's OCIRepository selects a tag with
#   .real/nodejs/node_modules           @pulumi/pulumi ($PULUMI_NODEJS_SDK_VERSION) by npm ci
#   .real/pulumi-home/plugins/...       a PULUMI_HOME with the provider installed,
#                                       so no plugin is downloaded at test time
#   .real/bin/source-controller         github.com/fluxcd/source-controller ($FLUX_SOURCE_CONTROLLER_VERSION),
#                                       wrapper tests/real/flux/source-controller
#   .real/bin/kustomize-controller      github.com/fluxcd/kustomize-controller ($FLUX_KUSTOMIZE_CONTROLLER_VERSION),
#                                       wrapper tests/real/flux/kustomize-controller
#   .real/bin/notification-controller   github.com/fluxcd/notification-controller
#                                       ($FLUX_NOTIFICATION_CONTROLLER_VERSION), wrapper
#                                       tests/real/flux/notification-controller
#   .real/bin/flux                      github.com/fluxcd/flux2/v2 ($FLUX_CLI_VERSION), built in a copy
#                                       of the module (.real/src/) with a placeholder manifest
#   .real/flux-crds/*.yaml              the Flux CRDs (config/crd/bases of the three controller
#                                       modules, from the module cache), applied by the tests
#   .real/bin/s3-server                 tests/real/s3: gofakes3 ($GOFAKES3_VERSION), for Bucket
#   .real/bin/cosign                    github.com/sigstore/cosign/v3 ($COSIGN_VERSION), built in its
#                                       module as downloaded (no replace lines there), the
#                                       independent party of the signature tests
#   .real/manifest.env                  what was built, read by tests/e2e/real_fixtures.py
#
# Versions live in tests/real/versions.env only; the stub Go modules under
# tests/real/{kube,etcd,pulumi,pulumi-yaml,pulumi-nodejs,pulumi-python,pulumi-go,semver,flux/*,s3}/ pin the same versions (checked below).  Each
# component has a stamp (a hash of the Go version, its pinned versions and its
# stub module / source files): a second run
# with nothing changed does no Go work and takes seconds.  The Go module and
# build caches are the user's usual ones, so a rebuild after a version bump
# reuses everything that did not change.
#
# Exit status: 0 when every component is built (or is declared blocked in
# versions.env with its reason, which the tests report as a skip); 1 when any
# component failed to build, with the reason and its log file named.
#
# Environment: GO (default: go), REAL_DIR (default: <repo>/.real),
# REAL_JOBS (go build -p, default 2), REAL_NICE (default 10), REAL_COMPONENTS
# (default: all; any of semver kube etcd pulumi pulumi-yaml pulumi-nodejs pulumi-python
# pulumi-go flux notification s3 cosign).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
SPEC=$ROOT/tests/real
REAL=${REAL_DIR:-$ROOT/.real}
BIN=$REAL/bin
PROVIDER=$REAL/provider/pulumi-resource-standin
NODE_PROGRAM=$SPEC/programs/nodefiles
PYTHON_PROGRAM=$SPEC/programs/pyfiles
PYTHON=${REAL_PYTHON:-/usr/bin/python3}
LOGS=$REAL/logs
STAMPS=$REAL/stamps
GO=${GO:-go}
JOBS=${REAL_JOBS:-2}
NICE=${REAL_NICE:-10}

# shellcheck source=../tests/real/versions.env
. "$SPEC/versions.env"

# Never fetch a Go toolchain: the installed one must satisfy the modules.
export GOTOOLCHAIN=local
export GOFLAGS="${GOFLAGS:-} -mod=readonly -buildvcs=false"

mkdir -p "$BIN" "$LOGS" "$STAMPS"
failed=""

say() { printf 'deps-real: %s\n' "$*"; }

fail() { # component, reason, [log]
	say "FAILED: $1: $2"
	if [ -n "${3:-}" ] && [ -f "$3" ]; then
		say "last lines of $3:"
		tail -n 15 "$3" | sed 's/^/    /'
	fi
	failed="$failed $1"
}

# The hash of everything a component's build depends on: the Go version, the
# component's pinned versions (not the rest of versions.env) and its files.
inputs_key() { # "versions" files...
	{
		"$GO" version
		printf '%s\n' "$1"
		shift
		for f in "$@"; do
			# the path relative to the checkout: every worktree of the repo shares .real/
			printf '%s\n' "${f#"$ROOT"/}"
			cat "$f"
		done
	} | sha256sum | cut -d' ' -f1
}

up_to_date() { # component key outputs...
	local name=$1 key=$2
	shift 2
	[ -f "$STAMPS/$name" ] && [ "$(cat "$STAMPS/$name")" = "$key" ] || return 1
	for out in "$@"; do
		[ -x "$out" ] || return 1
	done
}

# Checks that a stub go.mod pins a module at the version versions.env names.
pin_matches() { # go.mod module version
	grep -Eq "^[[:space:]]*(require[[:space:]]+)?$2[[:space:]]+$3([[:space:]]|$)" "$1"
}

check_pins() {
	local ok=1 mod
	mod=$SPEC/kube/go.mod
	pin_matches "$mod" k8s.io/kubernetes "$KUBERNETES_VERSION" ||
		{ say "$mod does not require k8s.io/kubernetes $KUBERNETES_VERSION"; ok=0; }
	if grep -E '=> k8s\.io/' "$mod" | grep -vq " $KUBERNETES_STAGING_VERSION\$"; then
		say "$mod: a staging replace is not at $KUBERNETES_STAGING_VERSION"
		ok=0
	fi
	mod=$SPEC/pulumi/go.mod
	pin_matches "$mod" github.com/pulumi/pulumi/pkg/v3 "$PULUMI_VERSION" ||
		{ say "$mod does not require pkg/v3 $PULUMI_VERSION"; ok=0; }
	pin_matches "$mod" github.com/pulumi/pulumi/sdk/v3 "$PULUMI_VERSION" ||
		{ say "$mod does not require sdk/v3 $PULUMI_VERSION"; ok=0; }
	mod=$SPEC/pulumi-yaml/go.mod
	pin_matches "$mod" github.com/pulumi/pulumi-yaml "$PULUMI_YAML_VERSION" ||
		{ say "$mod does not require pulumi-yaml $PULUMI_YAML_VERSION"; ok=0; }
	mod=$SPEC/pulumi-nodejs/go.mod
	pin_matches "$mod" github.com/pulumi/pulumi/sdk/v3 "$PULUMI_NODEJS_HOST_VERSION" ||
		{ say "$mod does not require sdk/v3 $PULUMI_NODEJS_HOST_VERSION"; ok=0; }
	grep -q "\"@pulumi/pulumi\": \"$PULUMI_NODEJS_SDK_VERSION\"" "$NODE_PROGRAM/package.json" ||
		{ say "$NODE_PROGRAM/package.json does not pin @pulumi/pulumi $PULUMI_NODEJS_SDK_VERSION"; ok=0; }
	mod=$SPEC/pulumi-python/go.mod
	pin_matches "$mod" github.com/pulumi/pulumi/sdk/v3 "$PULUMI_PYTHON_HOST_VERSION" ||
		{ say "$mod does not require sdk/v3 $PULUMI_PYTHON_HOST_VERSION"; ok=0; }
	grep -qx "pulumi==$PULUMI_PYTHON_SDK_VERSION" "$PYTHON_PROGRAM/requirements.txt" ||
		{ say "$PYTHON_PROGRAM/requirements.txt does not pin pulumi==$PULUMI_PYTHON_SDK_VERSION"; ok=0; }
	mod=$SPEC/pulumi-go/go.mod
	pin_matches "$mod" github.com/pulumi/pulumi/sdk/v3 "$PULUMI_GO_HOST_VERSION" ||
		{ say "$mod does not require sdk/v3 $PULUMI_GO_HOST_VERSION"; ok=0; }
	mod=$SPEC/etcd/go.mod
	pin_matches "$mod" go.etcd.io/etcd/server/v3 "$ETCD_GO_VERSION" ||
		{ say "$mod does not require go.etcd.io/etcd/server/v3 $ETCD_GO_VERSION"; ok=0; }
	mod=$SPEC/semver/go.mod
	pin_matches "$mod" github.com/Masterminds/semver/v3 "$MASTERMINDS_SEMVER_VERSION" ||
		{ say "$mod does not require github.com/Masterminds/semver/v3 $MASTERMINDS_SEMVER_VERSION"; ok=0; }
	pin_matches "$mod" github.com/fluxcd/pkg/version "$FLUXCD_PKG_VERSION_VERSION" ||
		{ say "$mod does not require github.com/fluxcd/pkg/version $FLUXCD_PKG_VERSION_VERSION"; ok=0; }
	mod=$SPEC/flux/source-controller/go.mod
	pin_matches "$mod" github.com/fluxcd/source-controller "$FLUX_SOURCE_CONTROLLER_VERSION" ||
		{ say "$mod does not require source-controller $FLUX_SOURCE_CONTROLLER_VERSION"; ok=0; }
	pin_matches "$mod" github.com/fluxcd/source-controller/api "$FLUX_SOURCE_CONTROLLER_VERSION" ||
		{ say "$mod does not require source-controller/api $FLUX_SOURCE_CONTROLLER_VERSION"; ok=0; }
	mod=$SPEC/flux/kustomize-controller/go.mod
	pin_matches "$mod" github.com/fluxcd/kustomize-controller "$FLUX_KUSTOMIZE_CONTROLLER_VERSION" ||
		{ say "$mod does not require kustomize-controller $FLUX_KUSTOMIZE_CONTROLLER_VERSION"; ok=0; }
	pin_matches "$mod" github.com/fluxcd/kustomize-controller/api "$FLUX_KUSTOMIZE_CONTROLLER_VERSION" ||
		{ say "$mod does not require kustomize-controller/api $FLUX_KUSTOMIZE_CONTROLLER_VERSION"; ok=0; }
	mod=$SPEC/flux/notification-controller/go.mod
	pin_matches "$mod" github.com/fluxcd/notification-controller "$FLUX_NOTIFICATION_CONTROLLER_VERSION" ||
		{ say "$mod does not require notification-controller $FLUX_NOTIFICATION_CONTROLLER_VERSION"; ok=0; }
	pin_matches "$mod" github.com/fluxcd/notification-controller/api "$FLUX_NOTIFICATION_CONTROLLER_VERSION" ||
		{ say "$mod does not require notification-controller/api $FLUX_NOTIFICATION_CONTROLLER_VERSION"; ok=0; }
	mod=$SPEC/s3/go.mod
	pin_matches "$mod" github.com/johannesboyne/gofakes3 "$GOFAKES3_VERSION" ||
		{ say "$mod does not require gofakes3 $GOFAKES3_VERSION"; ok=0; }
	[ $ok = 1 ] || { say "tests/real/versions.env and the stub go.mod files disagree"; exit 1; }
}

go_build() { # log dir ldflags packages...
	local log=$1 dir=$2 ldflags=$3
	shift 3
	(cd "$dir" && nice -n "$NICE" "$GO" build -p "$JOBS" -trimpath -ldflags "$ldflags" \
		-o "$BIN/" "$@") >"$log" 2>&1
}

build_kube() {
	local key log=$LOGS/kube.log
	key=$(inputs_key "$KUBERNETES_VERSION $KUBERNETES_STAGING_VERSION" "$SPEC/kube/go.mod" "$SPEC/kube/go.sum")
	if up_to_date kube "$key" "$BIN/kube-apiserver" "$BIN/kubectl"; then
		say "kube-apiserver, kubectl $KUBERNETES_VERSION: up to date"
		return
	fi
	# What hack/lib/version.sh stamps into a release build: the apiserver's
	# /version and kubectl's client version (kubectl dispatchers pick a
	# kubectl by the server's minor version, so it must be right).
	local v=${KUBERNETES_VERSION#v} flags="-s -w" pkg
	local major=${v%%.*} rest=${v#*.}
	local minor=${rest%%.*}
	for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		flags="$flags -X $pkg.gitVersion=$KUBERNETES_VERSION -X $pkg.gitMajor=$major"
		flags="$flags -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
		flags="$flags -X $pkg.buildDate=1970-01-01T00:00:00Z"
	done
	say "building kube-apiserver and kubectl $KUBERNETES_VERSION (log: $log; a cold build takes long)"
	if ! go_build "$log" "$SPEC/kube" "$flags" \
		k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kubectl; then
		fail kube "go build of k8s.io/kubernetes $KUBERNETES_VERSION failed" "$log"
		return
	fi
	echo "$key" >"$STAMPS/kube"
}

# Debian's etcd when ETCD_SOURCE=debian (checked to be the version that was
# tested with this kube-apiserver), else etcd built from its Go module.
build_etcd() {
	local key log=$LOGS/etcd.log
	if [ "$ETCD_SOURCE" = debian ]; then
		if ! [ -x /usr/bin/etcd ]; then
			fail etcd "/usr/bin/etcd is missing: install Debian's etcd-server (make deps)"
			return
		fi
		local have
		have=$(/usr/bin/etcd --version 2>/dev/null | sed -n 's/^etcd Version: //p')
		case "$have" in
		"$ETCD_DEBIAN_VERSION"*) ;;
		*)
			fail etcd "/usr/bin/etcd is version '$have', tests/real/versions.env expects $ETCD_DEBIAN_VERSION"
			return
			;;
		esac
		ln -sfn /usr/bin/etcd "$BIN/etcd"
		say "etcd $have: Debian's /usr/bin/etcd"
		return
	fi
	key=$(inputs_key "$ETCD_GO_VERSION" "$SPEC/etcd/go.mod" "$SPEC/etcd/go.sum")
	if up_to_date etcd "$key" "$BIN/etcd"; then
		say "etcd $ETCD_GO_VERSION: up to date"
		return
	fi
	rm -f "$BIN/etcd" "$BIN/v3"
	say "building etcd $ETCD_GO_VERSION (log: $log)"
	# The module root's main package is named after its last path element (v3).
	if ! (cd "$SPEC/etcd" && nice -n "$NICE" "$GO" build -p "$JOBS" -trimpath -ldflags "-s -w" \
		-o "$BIN/etcd" go.etcd.io/etcd/server/v3) >"$log" 2>&1; then
		fail etcd "go build of go.etcd.io/etcd/server/v3 $ETCD_GO_VERSION failed" "$log"
		return
	fi
	echo "$key" >"$STAMPS/etcd"
}

build_pulumi() {
	local key log=$LOGS/pulumi.log
	key=$(inputs_key "$PULUMI_VERSION $STANDIN_PROVIDER_VERSION" "$SPEC/pulumi/go.mod" "$SPEC/pulumi/go.sum" \
		"$SPEC/pulumi/standin/main.go")
	if up_to_date pulumi "$key" "$BIN/pulumi" "$PROVIDER"; then
		say "pulumi $PULUMI_VERSION and the standin provider: up to date"
	else
		local flags="-s -w"
		flags="$flags -X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=$PULUMI_VERSION"
		flags="$flags -X main.version=$STANDIN_PROVIDER_VERSION"
		say "building pulumi $PULUMI_VERSION and pulumi-resource-standin (log: $log; a cold build takes long)"
		if ! go_build "$log" "$SPEC/pulumi" "$flags" github.com/pulumi/pulumi/pkg/v3/cmd/pulumi ./standin; then
			fail pulumi "go build of the pulumi CLI / the standin provider failed" "$log"
			return
		fi
		mkdir -p "$(dirname "$PROVIDER")"
		mv -f "$BIN/standin" "$PROVIDER"
		echo "$key" >"$STAMPS/pulumi"
	fi
	prepare_pulumi_home
}

# The YAML language host, from its own stub module (see its go.mod for why).
build_pulumi_yaml() {
	local key log=$LOGS/pulumi-yaml.log
	key=$(inputs_key "$PULUMI_YAML_VERSION" "$SPEC/pulumi-yaml/go.mod" "$SPEC/pulumi-yaml/go.sum")
	if up_to_date pulumi-yaml "$key" "$BIN/pulumi-language-yaml"; then
		say "pulumi-language-yaml $PULUMI_YAML_VERSION: up to date"
		return
	fi
	say "building pulumi-language-yaml $PULUMI_YAML_VERSION (log: $log)"
	if ! go_build "$log" "$SPEC/pulumi-yaml" \
		"-s -w -X github.com/pulumi/pulumi-yaml/pkg/version.Version=$PULUMI_YAML_VERSION" \
		github.com/pulumi/pulumi-yaml/cmd/pulumi-language-yaml; then
		fail pulumi-yaml "go build of github.com/pulumi/pulumi-yaml $PULUMI_YAML_VERSION failed" "$log"
		return
	fi
	echo "$key" >"$STAMPS/pulumi-yaml"
}

# A PULUMI_HOME whose plugin directory already holds the test provider, laid
# out as `pulumi plugin install` would (resource-<name>-v<version>/).  Tests
# link their own PULUMI_HOME's plugins/ to it.
prepare_pulumi_home() {
	local dir=$REAL/pulumi-home/plugins/resource-standin-v${STANDIN_PROVIDER_VERSION#v}
	mkdir -p "$dir"
	cp -f "$PROVIDER" "$dir/pulumi-resource-standin"
	rm -f "$dir.partial"
	local out
	if ! out=$(PULUMI_HOME=$REAL/pulumi-home PULUMI_SKIP_UPDATE_CHECK=true \
		"$BIN/pulumi" plugin ls --json 2>&1) || ! printf '%s' "$out" | grep -q '"name": *"standin"'; then
		fail pulumi "the prepared PULUMI_HOME does not list the standin plugin: $out"
	fi
}

# The Node.js language host (built from sdk/v3, see its stub's go.mod), the
# launcher of Node.js dynamic providers, and the program's node_modules
# (npm ci from the committed lock file into .real/nodejs; the fixture links it
# into each copy of the program).
# A language host built from github.com/pulumi/pulumi/sdk/v3 at version (its
# own module is not on the Go module proxy), with the stub module
# tests/real/pulumi-<lang>: .real/bin/pulumi-language-<lang>.  Extra outputs
# (more files the host needs beside it) count for "up to date" too.  Sets
# SDK_HOST_BUILT=1 when it built.  1 when the build failed (reported).
sdk_host() { # lang version package [extra outputs...]
	local lang=$1 version=$2 pkg=$3 key log=$LOGS/pulumi-$1.log
	shift 3
	SDK_HOST_BUILT=0
	key=$(inputs_key "$version" "$SPEC/pulumi-$lang/go.mod" "$SPEC/pulumi-$lang/go.sum")
	if up_to_date "pulumi-$lang" "$key" "$BIN/pulumi-language-$lang" "$@"; then
		say "pulumi-language-$lang $version: up to date"
		return 0
	fi
	say "building pulumi-language-$lang $version (log: $log)"
	if ! go_build "$log" "$SPEC/pulumi-$lang" \
		"-s -w -X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=$version" "$pkg"; then
		fail "pulumi-$lang" "go build of pulumi-language-$lang from sdk/v3 $version failed" "$log"
		return 1
	fi
	echo "$key" >"$STAMPS/pulumi-$lang"
	SDK_HOST_BUILT=1
}

build_pulumi_nodejs() {
	local key
	sdk_host nodejs "$PULUMI_NODEJS_HOST_VERSION" github.com/pulumi/pulumi/sdk/v3/nodejs/cmd/pulumi-language-nodejs ||
		return 0   # reported; the others still build
	install -m 0755 "$SPEC/pulumi-nodejs/pulumi-resource-pulumi-nodejs" "$BIN/pulumi-resource-pulumi-nodejs"

	local npmlog=$LOGS/npm.log dir=$REAL/nodejs
	key=$(inputs_key "$PULUMI_NODEJS_SDK_VERSION" "$NODE_PROGRAM/package.json" "$NODE_PROGRAM/package-lock.json")
	if [ -f "$STAMPS/npm" ] && [ "$(cat "$STAMPS/npm")" = "$key" ] &&
		[ -f "$dir/node_modules/@pulumi/pulumi/package.json" ]; then
		say "@pulumi/pulumi $PULUMI_NODEJS_SDK_VERSION (npm): up to date"
		return
	fi
	command -v npm >/dev/null || { fail npm "npm is not installed (Node.js 20 and npm are expected)"; return; }
	say "installing @pulumi/pulumi $PULUMI_NODEJS_SDK_VERSION with npm ci (log: $npmlog)"
	mkdir -p "$dir"
	cp "$NODE_PROGRAM/package.json" "$NODE_PROGRAM/package-lock.json" "$dir/"
	if ! (cd "$dir" && nice -n "$NICE" npm ci --no-audit --no-fund --ignore-scripts) >"$npmlog" 2>&1; then
		fail npm "npm ci of @pulumi/pulumi $PULUMI_NODEJS_SDK_VERSION failed" "$npmlog"
		return
	fi
	echo "$key" >"$STAMPS/npm"
}

# The Python language host (built from sdk/v3, see its stub's go.mod) with
# the exec shim it runs programs through (pulumi-language-python-exec, looked
# up next to the host's own executable), and a venv holding the pulumi
# package from PyPI at the version the test program's requirements.txt pins.
# The host predates runtime options sent over RPC, so it never sees a
# program's `virtualenv` option: the tests put this venv first on PATH
# (VIRTUAL_ENV set) instead, see tests/e2e/FIDELITY.md.
build_pulumi_python() {
	local key src log=$LOGS/pulumi-python.log exec=$BIN/pulumi-language-python-exec
	sdk_host python "$PULUMI_PYTHON_HOST_VERSION" github.com/pulumi/pulumi/sdk/v3/python/cmd/pulumi-language-python \
		"$exec" || return 0
	if [ "$SDK_HOST_BUILT" = 1 ]; then
		# The host runs this script beside it; it is in the same sdk/v3 directory.
		if ! src=$(cd "$SPEC/pulumi-python" &&
			"$GO" list -m -f '{{.Dir}}' github.com/pulumi/pulumi/sdk/v3 2>>"$log") ||
			! [ -f "$src/python/cmd/pulumi-language-python-exec" ]; then
			rm -f "$STAMPS/pulumi-python"
			fail pulumi-python "no python/cmd/pulumi-language-python-exec in sdk/v3 $PULUMI_PYTHON_HOST_VERSION" "$log"
			return
		fi
		install -m 0755 "$src/python/cmd/pulumi-language-python-exec" "$exec"
	fi

	local piplog=$LOGS/pip.log venv=$REAL/python/venv
	key=$(inputs_key "$PULUMI_PYTHON_SDK_VERSION $("$PYTHON" --version 2>&1)" "$PYTHON_PROGRAM/requirements.txt")
	if [ -f "$STAMPS/pip" ] && [ "$(cat "$STAMPS/pip")" = "$key" ] && [ -x "$venv/bin/python" ]; then
		say "pulumi $PULUMI_PYTHON_SDK_VERSION (pip, $venv): up to date"
		return
	fi
	say "installing pulumi $PULUMI_PYTHON_SDK_VERSION into $venv with pip (log: $piplog)"
	rm -rf "$venv"
	if ! "$PYTHON" -m venv "$venv" >"$piplog" 2>&1 ||
		! nice -n "$NICE" "$venv/bin/python" -m pip install --disable-pip-version-check --no-input \
			-r "$PYTHON_PROGRAM/requirements.txt" >>"$piplog" 2>&1; then
		fail pip "a venv with pulumi $PULUMI_PYTHON_SDK_VERSION ($PYTHON -m venv, pip install) failed" "$piplog"
		return
	fi
	# What pip resolved, for the log and for whoever compares two machines.
	"$venv/bin/python" -m pip freeze --disable-pip-version-check >>"$piplog" 2>&1 || true
	echo "$key" >"$STAMPS/pip"
}

# The Go language host.  It left the sdk/v3 module after v3.66.0 (v3.67.0 no
# longer has go/pulumi-language-go) and its own module is not on the proxy,
# so it is built from there.  It runs `go` from PATH to build the program.
build_pulumi_go() {
	sdk_host go "$PULUMI_GO_HOST_VERSION" github.com/pulumi/pulumi/sdk/v3/go/pulumi-language-go || return 0
}

# The semver oracle: a small program of our own (tests/real/semver/main.go)
# over the libraries Flux selects OCIRepository tags with; seconds to build.
build_semver_oracle() {
	local key log=$LOGS/semver.log
	key=$(inputs_key "$MASTERMINDS_SEMVER_VERSION $FLUXCD_PKG_VERSION_VERSION" \
		"$SPEC/semver/go.mod" "$SPEC/semver/go.sum" "$SPEC/semver/main.go")
	if up_to_date semver "$key" "$BIN/semver-oracle"; then
		say "semver-oracle (Masterminds/semver $MASTERMINDS_SEMVER_VERSION): up to date"
		return
	fi
	say "building semver-oracle (Masterminds/semver $MASTERMINDS_SEMVER_VERSION, fluxcd/pkg/version $FLUXCD_PKG_VERSION_VERSION; log: $log)"
	if ! (cd "$SPEC/semver" && nice -n "$NICE" "$GO" build -p "$JOBS" -trimpath -ldflags "-s -w" \
		-o "$BIN/semver-oracle" .) >"$log" 2>&1; then
		fail semver "go build of the semver oracle (tests/real/semver) failed" "$log"
		return
	fi
	echo "$key" >"$STAMPS/semver"
}

# A Flux controller (the root main package of its module) from its wrapper
# module, then its CRDs copied out of the module cache into .real/flux-crds/.
build_flux_controller() { # name version
	local name=$1 version=$2 key log=$LOGS/$1.log dir=$SPEC/flux/$1
	key=$(inputs_key "$version" "$dir/go.mod" "$dir/go.sum")
	if up_to_date "$name" "$key" "$BIN/$name"; then
		say "$name $version: up to date"
	else
		say "building $name $version (log: $log; a cold build takes minutes)"
		rm -f "$BIN/$name"
		if ! (cd "$dir" && nice -n "$NICE" "$GO" build -p "$JOBS" -trimpath -ldflags "-s -w" \
			-o "$BIN/$name" "github.com/fluxcd/$name") >"$log" 2>&1; then
			fail "$name" "go build of github.com/fluxcd/$name $version failed" "$log"
			return
		fi
		echo "$key" >"$STAMPS/$name"
	fi
	local src
	if ! src=$(cd "$dir" && "$GO" list -m -f '{{.Dir}}' "github.com/fluxcd/$name" 2>>"$log") ||
		! [ -d "$src/config/crd/bases" ]; then
		fail "$name" "no config/crd/bases in the module github.com/fluxcd/$name $version" "$log"
		return
	fi
	mkdir -p "$REAL/flux-crds"
	install -m 0644 "$src"/config/crd/bases/*.yaml "$REAL/flux-crds/"
}

# The flux CLI.  Its module embeds cmd/flux/manifests/*.yaml, generated at
# release time and absent from the module zip, so it is built in a writable
# copy of the module with a placeholder manifest there (`flux install` is then
# unusable; the tests never run it).  The copy is its own main module, so its
# replace lines and go.sum apply as upstream wrote them.
build_flux_cli() {
	local key log=$LOGS/flux.log src copy=$REAL/src/flux2-$FLUX_CLI_VERSION
	key=$(inputs_key "$FLUX_CLI_VERSION")
	if up_to_date flux "$key" "$BIN/flux"; then
		say "flux CLI $FLUX_CLI_VERSION: up to date"
		return
	fi
	say "building the flux CLI $FLUX_CLI_VERSION (log: $log)"
	mkdir -p "$REAL/src"
	# Downloaded outside any module, so no go.mod or go.sum of ours changes.
	if ! src=$(cd "$REAL/src" &&
		GOFLAGS=-buildvcs=false "$GO" mod download -json "github.com/fluxcd/flux2/v2@$FLUX_CLI_VERSION" 2>"$log" |
		sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p') || [ -z "$src" ]; then
		fail flux "go mod download of github.com/fluxcd/flux2/v2 $FLUX_CLI_VERSION failed" "$log"
		return
	fi
	rm -rf "$copy"
	mkdir -p "$(dirname "$copy")"
	cp -r "$src" "$copy"
	chmod -R u+w "$copy"
	mkdir -p "$copy/cmd/flux/manifests"
	printf '# placeholder: the release manifests are not part of the Go module\n' \
		>"$copy/cmd/flux/manifests/placeholder.yaml"
	if ! (cd "$copy" && nice -n "$NICE" "$GO" build -p "$JOBS" -trimpath \
		-ldflags "-s -w -X main.VERSION=${FLUX_CLI_VERSION#v}" -o "$BIN/flux" ./cmd/flux) >>"$log" 2>&1; then
		fail flux "go build of the flux CLI $FLUX_CLI_VERSION failed" "$log"
		return
	fi
	echo "$key" >"$STAMPS/flux"
}

# The S3-compatible server for Bucket sources: a small main of our own over
# gofakes3 (tests/real/s3); seconds to build.
build_s3_server() {
	local key log=$LOGS/s3.log
	key=$(inputs_key "$GOFAKES3_VERSION" "$SPEC/s3/go.mod" "$SPEC/s3/go.sum" "$SPEC/s3/main.go")
	if up_to_date s3 "$key" "$BIN/s3-server"; then
		say "s3-server (gofakes3 $GOFAKES3_VERSION): up to date"
		return
	fi
	say "building s3-server (gofakes3 $GOFAKES3_VERSION; log: $log)"
	if ! (cd "$SPEC/s3" && nice -n "$NICE" "$GO" build -p "$JOBS" -trimpath -ldflags "-s -w" \
		-o "$BIN/s3-server" .) >"$log" 2>&1; then
		fail s3 "go build of the S3 server (tests/real/s3) failed" "$log"
		return
	fi
	echo "$key" >"$STAMPS/s3"
}

# cosign, for tests/e2e/test_oci_sign.py: its main package built inside the
# module as `go mod download` stores it (read-only, but a build writes
# nothing there), so its own go.mod and go.sum apply and nothing of ours
# changes.  A cold build takes minutes (~17 min with the machine busy, most
# of it compiling dependencies, which the Go build cache keeps); the stamp
# makes a second run instant.
build_cosign() {
	local key log=$LOGS/cosign.log src
	key=$(inputs_key "$COSIGN_VERSION")
	if up_to_date cosign "$key" "$BIN/cosign"; then
		say "cosign $COSIGN_VERSION: up to date"
		return
	fi
	say "building cosign $COSIGN_VERSION (log: $log; a cold build takes minutes)"
	mkdir -p "$REAL/src"
	if ! src=$(cd "$REAL/src" &&
		GOFLAGS=-buildvcs=false "$GO" mod download -json "github.com/sigstore/cosign/v3@$COSIGN_VERSION" 2>"$log" |
		sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p') || [ -z "$src" ]; then
		fail cosign "go mod download of github.com/sigstore/cosign/v3 $COSIGN_VERSION failed" "$log"
		return
	fi
	# Built to a temporary name and moved: a failed build never leaves a
	# half-written cosign for the tests to run.
	if ! (cd "$src" && nice -n "$NICE" "$GO" build -p "$JOBS" -trimpath \
		-ldflags "-s -w -X sigs.k8s.io/release-utils/version.gitVersion=$COSIGN_VERSION" \
		-o "$BIN/cosign.tmp" ./cmd/cosign) >>"$log" 2>&1; then
		rm -f "$BIN/cosign.tmp"
		fail cosign "go build of cosign $COSIGN_VERSION failed" "$log"
		return
	fi
	mv -f "$BIN/cosign.tmp" "$BIN/cosign"
	echo "$key" >"$STAMPS/cosign"
}

write_manifest() {
	local tmp=$REAL/manifest.env.tmp
	{
		echo "# Written by scripts/deps-real.sh; read by tests/e2e/real_fixtures.py."
		echo "KUBERNETES_VERSION=$KUBERNETES_VERSION"
		echo "ETCD_SOURCE=$ETCD_SOURCE"
		echo "PULUMI_VERSION=$PULUMI_VERSION"
		echo "PULUMI_YAML_VERSION=$PULUMI_YAML_VERSION"
		echo "PULUMI_NODEJS_HOST_VERSION=$PULUMI_NODEJS_HOST_VERSION"
		echo "PULUMI_NODEJS_SDK_VERSION=$PULUMI_NODEJS_SDK_VERSION"
		echo "PULUMI_PYTHON_HOST_VERSION=$PULUMI_PYTHON_HOST_VERSION"
		echo "PULUMI_PYTHON_SDK_VERSION=$PULUMI_PYTHON_SDK_VERSION"
		echo "PULUMI_GO_HOST_VERSION=$PULUMI_GO_HOST_VERSION"
		echo "STANDIN_PROVIDER_VERSION=$STANDIN_PROVIDER_VERSION"
		echo "MASTERMINDS_SEMVER_VERSION=$MASTERMINDS_SEMVER_VERSION"
		echo "FLUXCD_PKG_VERSION_VERSION=$FLUXCD_PKG_VERSION_VERSION"
		echo "FLUX_SOURCE_CONTROLLER_VERSION=$FLUX_SOURCE_CONTROLLER_VERSION"
		echo "FLUX_KUSTOMIZE_CONTROLLER_VERSION=$FLUX_KUSTOMIZE_CONTROLLER_VERSION"
		echo "FLUX_CLI_VERSION=$FLUX_CLI_VERSION"
		echo "FLUX_NOTIFICATION_CONTROLLER_VERSION=$FLUX_NOTIFICATION_CONTROLLER_VERSION"
		echo "GOFAKES3_VERSION=$GOFAKES3_VERSION"
		echo "COSIGN_VERSION=$COSIGN_VERSION"
		echo "FAILED=${failed# }"
	} >"$tmp"
	mv -f "$tmp" "$REAL/manifest.env"
}

# REAL_COMPONENTS (default: all) limits a run to some components, e.g.
# REAL_COMPONENTS="flux s3" after adding those to a .real/ built before them.
wanted() {
	[ -z "${REAL_COMPONENTS:-}" ] && return 0
	case " $REAL_COMPONENTS " in *" $1 "*) return 0 ;; esac
	return 1
}

command -v "$GO" >/dev/null || { say "FAILED: no Go toolchain ('$GO') on PATH"; exit 1; }
check_pins
wanted semver && build_semver_oracle
wanted kube && build_kube
wanted etcd && build_etcd
wanted pulumi && build_pulumi
wanted pulumi-yaml && build_pulumi_yaml
wanted pulumi-nodejs && build_pulumi_nodejs
wanted pulumi-python && build_pulumi_python
wanted pulumi-go && build_pulumi_go
if wanted flux; then
	build_flux_controller source-controller "$FLUX_SOURCE_CONTROLLER_VERSION"
	build_flux_controller kustomize-controller "$FLUX_KUSTOMIZE_CONTROLLER_VERSION"
	build_flux_cli
fi
# notification-controller is its own component, so a .real/ built before it
# gets it alone (REAL_COMPONENTS=notification).
wanted notification && build_flux_controller notification-controller "$FLUX_NOTIFICATION_CONTROLLER_VERSION"
wanted s3 && build_s3_server
wanted cosign && build_cosign
write_manifest

for blocked in $(compgen -v BLOCKED_ || true); do
	say "blocked, not built (see docs/conformance.md): ${!blocked}"
done
if [ -n "$failed" ]; then
	say "components that failed to build:$failed (logs in $LOGS)"
	exit 1
fi
say "all real components ready in $BIN"
