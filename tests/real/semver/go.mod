// The semver oracle (tests/real/semver/main.go): the semver libraries Flux's
// source-controller selects OCIRepository tags with.  Masterminds/semver is
// at the version source-controller pins; fluxcd/pkg/version v0.17.0 is the
// newest on the Go module proxy that builds with this machine's Go 1.26
// (v0.18.0 and later need Go 1.27) and requires the same Masterminds release.
// Versions must agree with tests/real/versions.env (scripts/deps-real.sh checks).
module pulumi-controller.test/real/semver

go 1.26.0

require (
	github.com/Masterminds/semver/v3 v3.5.0
	github.com/fluxcd/pkg/version v0.17.0
)
