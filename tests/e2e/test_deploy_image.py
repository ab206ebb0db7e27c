"""The Dockerfile, which cannot be built here (no container engine): it is parsed with
the official BuildKit parser (PyPI `dockerfile`), linted with hadolint, and checked for
the properties docs/install.md and docs/security.md promise -- Debian 12 multi-stage,
the -dev packages of scripts/deps.sh in the build stage and only the shared libraries
the binary links in the runtime one, the pulumi CLI of tests/real/versions.env verified
against a sha256 before it is unpacked (the very RUN script is executed against a
stand-in download: without the right checksum nothing is unpacked), Node.js and Python,
a numeric non-root user, the store as a volume, and the same files `make install`
installs.  The Deployment (deploy/manager) must agree with the image it runs."""
import hashlib
import io
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import tarfile

import pytest
import yaml

try:
    import dockerfile
except ImportError:       # a test that cannot run fails: CI installs it with `make deps`
    pytest.fail("the PyPI package `dockerfile` is missing: run `make deps` (tests/requirements.txt)",
                pytrace=False)

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"


def versions():
    out = {}
    for line in (ROOT / "tests" / "real" / "versions.env").read_text().splitlines():
        m = re.match(r"^([A-Z_]+)=(.*)$", line)
        if m:
            out[m.group(1)] = m.group(2).strip('"')
    return out


def stages():
    """[(name or None, base image, [commands])] of the Dockerfile, in order."""
    out = []
    for cmd in dockerfile.parse_file(str(DOCKERFILE)):
        if cmd.cmd == "FROM":
            v = cmd.value
            name = v[2] if len(v) >= 3 and v[1].upper() == "AS" else None
            out.append((name, v[0], []))
        elif out:
            out[-1][2].append(cmd)
    return out


def stage(name):
    return next(s for s in stages() if s[0] == name)


def runtime():
    return stages()[-1]


def runs(stage_):
    return [c.value[0] for c in stage_[2] if c.cmd == "RUN"]


def apt_packages(stage_):
    """Every package an `apt-get install` of the stage names."""
    pkgs = set()
    for run in runs(stage_):
        for part in re.split(r"&&", run):
            words = shlex.split(part.replace("\\\n", " "))
            if words[:2] == ["apt-get", "install"]:
                pkgs |= {w for w in words[2:] if not w.startswith("-")}
    return pkgs


def only(stage_, cmd):
    found = [c for c in stage_[2] if c.cmd == cmd]
    assert len(found) == 1, f"{cmd} in stage {stage_[0]}: {found}"
    return found[0]


def deps_packages():
    text = (ROOT / "scripts" / "deps.sh").read_text()
    return set(re.search(r'PACKAGES="(.*?)"', text, re.S).group(1).split())


def test_hadolint_finds_nothing():
    """hadolint at its default rules; an ignore must sit on the instruction, with its
    reason in the comment above it."""
    hadolint = shutil.which("hadolint")
    if hadolint is None:
        pytest.fail("hadolint is not installed; run `make deps` (tests/requirements.txt)")
    proc = subprocess.run([hadolint, "--no-color", str(DOCKERFILE)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = DOCKERFILE.read_text().splitlines()
    for i, line in enumerate(lines):
        if line.startswith("# hadolint ignore="):
            assert lines[i - 1].startswith("#") and "hadolint" not in lines[i - 1], \
                f"line {i + 1}: an ignore without a reason above it"


def test_multi_stage_on_debian_12():
    all_stages = stages()
    assert len(all_stages) >= 2
    for name, base, _ in all_stages:
        assert re.fullmatch(r"debian:(12|bookworm)(-slim)?", base), (name, base)
    names = [s[0] for s in all_stages]
    assert "build" in names and all_stages[-1][1].endswith("-slim")
    copies = [c for c in runtime()[2] if c.cmd == "COPY"]
    assert copies and all(any(f.startswith("--from=") for f in c.flags) for c in copies), \
        "the runtime stage copies only from earlier stages, never the source tree"


def test_build_stage_has_the_dev_packages_and_runs_make():
    build = stage("build")
    wanted = {p for p in deps_packages() if p.endswith("-dev")} - {
        "libcmocka-dev",          # the unit tests' framework, not linked by the binary
        "libclang-rt-14-dev"}     # the fuzzers' runtime
    assert wanted <= apt_packages(build), wanted - apt_packages(build)
    assert {"build-essential", "pkg-config"} <= apt_packages(build)
    script = " ".join(runs(build))
    assert re.search(r"\bmake\b[^&]*\ball\b", script) and re.search(r"\bmake\b[^&]*\binstall\b", script)


def make_install_files(prefix, destdir):
    """The files `make install PREFIX=prefix DESTDIR=destdir` installs, from the
    Makefile's own recipe (make -n prints it without building)."""
    proc = subprocess.run(["make", "-n", "-W", "bin/pulumi-controller", "install",
                           f"PREFIX={prefix}", f"DESTDIR={destdir}"],
                          cwd=ROOT, capture_output=True, text=True, check=True)
    files = []
    for line in proc.stdout.splitlines():
        words = shlex.split(line)
        if words and words[0] == "install" and "-d" not in words:
            files.append(words[-1])
    assert files, proc.stdout
    return files


def test_image_holds_what_make_install_installs():
    build = stage("build")
    script = " ".join(runs(build))
    m = re.search(r"make\b[^&]*\binstall\b([^&]*)", script)
    args = dict(re.findall(r"\b(PREFIX|DESTDIR)=(\S+)", m.group(0)))
    assert set(args) == {"PREFIX", "DESTDIR"}, m.group(0)
    installed = [f[len(args["DESTDIR"]):] for f in make_install_files(args["PREFIX"], args["DESTDIR"])]
    copy = [c for c in runtime()[2] if c.cmd == "COPY" and "--from=build" in c.flags]
    assert [c.value for c in copy] == [(args["DESTDIR"] + "/", "/")], \
        "the runtime stage takes the DESTDIR tree whole, so it holds what make install installs"
    entry = only(runtime(), "ENTRYPOINT")
    assert entry.json and entry.value[0] in installed, (entry.value, installed)


def test_runtime_has_the_shared_libraries_the_binary_links(pc_bin):
    """Each library the binary links directly (readelf NEEDED, less the sanitizer
    runtimes of the test build and libc's own), mapped to its Debian package on this
    Debian 12 machine, is installed in the runtime stage -- and no -dev package is."""
    dyn = subprocess.run(["readelf", "-d", pc_bin], capture_output=True, text=True, check=True).stdout
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", dyn)
    skip = re.compile(r"^(libasan|libubsan|libc|libm|libgcc_s|libpthread|libdl|ld-linux)[.-]")
    pkgs = set()
    for lib in needed:
        if skip.match(lib):
            continue
        owner = subprocess.run(["dpkg", "-S", f"*/{lib}"], capture_output=True, text=True)
        assert owner.returncode == 0, f"no package owns {lib}"
        pkgs.add(owner.stdout.split(":")[0])
    have = apt_packages(runtime())
    assert pkgs and pkgs <= have, pkgs - have
    assert not [p for p in have if p.endswith("-dev")]
    assert "ca-certificates" in have


def test_runtime_has_node_and_python_for_programs():
    have = apt_packages(runtime())
    assert {"nodejs", "npm", "python3", "python3-venv", "python3-pip"} <= have


def test_non_root_numeric_user_and_volumes():
    rt = runtime()
    user = only(rt, "USER").value[0]
    assert re.fullmatch(r"[1-9][0-9]*:[1-9][0-9]*", user), user
    uid, gid = user.split(":")
    script = " ".join(runs(rt))
    assert f"--uid {uid}" in script and f"--gid {gid}" in script
    vols = only(rt, "VOLUME")
    assert vols.json and "/var/lib/pulumi-controller" in vols.value
    for v in vols.value:      # owned by the user, so a fresh volume is writable
        assert re.search(rf"install -d -o {uid} -g {gid}\b[^&]*{re.escape(v)}", script), v


def test_deployment_agrees_with_the_image():
    """The Deployment runs as the image's user, mounts a volume on each of its VOLUMEs
    and on $HOME, and passes the storage paths the image's CMD names."""
    dep = yaml.safe_load((ROOT / "deploy" / "manager" / "deployment.yaml").read_text())
    pod = dep["spec"]["template"]["spec"]
    ctr = pod["containers"][0]
    rt = runtime()
    uid, gid = only(rt, "USER").value[0].split(":")
    assert (pod["securityContext"]["runAsUser"], pod["securityContext"]["runAsGroup"]) == \
        (int(uid), int(gid))
    mounts = {m["mountPath"] for m in ctr["volumeMounts"]}
    assert set(only(rt, "VOLUME").value) <= mounts
    env = {e["name"]: e.get("value") for e in ctr["env"]}
    image_env = dict(zip(only(rt, "ENV").value[0::2], only(rt, "ENV").value[1::2]))
    assert env["HOME"] == image_env["HOME"] and env["HOME"] in mounts
    assert "/tmp" in mounts
    cmd = only(rt, "CMD").value
    for flag in cmd[1:]:
        assert flag in ctr["args"], flag


# -- the pulumi CLI: pinned and verified --------------------------------------------

def pulumi_fetch_script():
    """The RUN of the pulumi stage that downloads the release."""
    run, = [r for r in runs(stage("pulumi")) if "sha256sum" in r]
    return run


def test_pulumi_version_is_the_tested_one():
    pins = [c.value[0] for c in dockerfile.parse_file(str(DOCKERFILE))
            if c.cmd == "ARG" and c.value[0].startswith("PULUMI_VERSION=")]
    assert pins == ["PULUMI_VERSION=" + versions()["PULUMI_VERSION"].lstrip("v")], pins
    script = pulumi_fetch_script()
    assert "sha256sum --check --strict" in script
    assert "|| true" not in script and "set +e" not in script


FAKE_CURL = """#!/bin/sh
# Stands in for curl in the fetch test: logs its arguments, writes the fixture tarball.
printf '%s\\n' "$@" > "{log}"
while [ $# -gt 0 ]; do
  if [ "$1" = "--output" ]; then cp "{tarball}" "$2"; fi
  shift
done
"""


def release_tarball(path):
    """A tarball shaped like the release's: pulumi/pulumi (which prints its version)
    and a language host."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, body in (("pulumi/pulumi", "#!/bin/sh\necho v-test\n"),
                           ("pulumi/pulumi-language-nodejs", "#!/bin/sh\n")):
            data = body.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o755
            tar.addfile(info, io.BytesIO(data))
    path.write_bytes(buf.getvalue())
    return hashlib.sha256(buf.getvalue()).hexdigest()


def run_fetch(tmp_path, **args):
    """Runs the pulumi stage's RUN script with bash (its SHELL), with `args` as the
    build arguments, /tmp and /opt moved under tmp_path and curl replaced."""
    box = tmp_path / "box"
    (box / "tmp").mkdir(parents=True, exist_ok=True)
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    tarball = tmp_path / "release.tar.gz"
    digest = release_tarball(tarball)
    log = tmp_path / "curl.log"
    if log.exists():
        log.unlink()
    curl = bindir / "curl"
    curl.write_text(FAKE_CURL.format(log=log, tarball=tarball))
    curl.chmod(0o755)
    script = pulumi_fetch_script().replace("/tmp/", f"{box}/tmp/").replace("/opt", f"{box}/opt")
    env = {"PATH": f"{bindir}:/usr/bin:/bin", "PULUMI_VERSION": versions()["PULUMI_VERSION"].lstrip("v"),
           "TARGETARCH": "amd64", "PULUMI_SHA256_AMD64": "", "PULUMI_SHA256_ARM64": ""}
    env.update({k: (v(digest) if callable(v) else v) for k, v in args.items()})
    proc = subprocess.run(["/bin/bash", "-o", "pipefail", "-c", script], env=env,
                          capture_output=True, text=True)
    return proc, box / "opt" / "pulumi", log


def test_fetch_without_a_checksum_fails_before_downloading(tmp_path):
    proc, out, log = run_fetch(tmp_path)
    assert proc.returncode != 0
    assert "PULUMI_SHA256_AMD64 must be the sha256" in proc.stderr
    assert not log.exists() and not out.exists()


def test_fetch_with_a_wrong_checksum_unpacks_nothing(tmp_path):
    proc, out, log = run_fetch(tmp_path, PULUMI_SHA256_AMD64="0" * 64)
    assert proc.returncode != 0 and "FAILED" in proc.stdout + proc.stderr
    assert log.exists() and not out.exists()


def test_fetch_with_the_right_checksum_installs_the_release(tmp_path):
    proc, out, log = run_fetch(tmp_path, PULUMI_SHA256_AMD64=lambda d: d)
    assert proc.returncode == 0, proc.stderr
    assert (out / "pulumi").is_file() and "v-test" in proc.stdout
    version = versions()["PULUMI_VERSION"]
    args = log.read_text().splitlines()
    assert f"https://github.com/pulumi/pulumi/releases/download/{version}/" \
           f"pulumi-{version}-linux-x64.tar.gz" in args
    for opt in ("--proto", "--proto-redir"):      # https only, redirects included
        assert opt in args and args[args.index(opt) + 1] == "=https", opt


def test_fetch_refuses_an_unknown_architecture(tmp_path):
    proc, out, _ = run_fetch(tmp_path, TARGETARCH="s390x", PULUMI_SHA256_AMD64=lambda d: d)
    assert proc.returncode != 0 and not out.exists()


def test_dockerignore_keeps_local_state_out_of_the_context():
    ignored = set((ROOT / ".dockerignore").read_text().split())
    assert {".git", ".real", "build", "bin"} <= ignored
    assert os.path.exists(ROOT / "Makefile")     # what the build stage needs is not ignored
    assert "Makefile" not in ignored and "src" not in ignored
