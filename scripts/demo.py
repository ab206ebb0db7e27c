#!/usr/bin/python3
"""The demo behind `make demo`: a local sandbox on loopback.

It plays source-controller with nginx: packs an embedded Pulumi YAML program
as a Flux artifact (tar.gz, sha256 digest), serves it, and has
pulumi-controller fetch it into an artifact store exactly as the controller
does for a GitRepository, then fetches it a second time to show the store
being reused without network access.  Everything lives in a temp directory
that is removed at the end (--keep keeps it).
"""
import argparse
import pathlib
import shutil
import subprocess
import sys
import tempfile
import os

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "e2e"))
from nginx_fixtures import Nginx  # noqa: E402
from artifacts import flux_tarball, sha256  # noqa: E402

PROGRAM = {
    "Pulumi.yaml": b"""name: demo
runtime: yaml
description: A bucket and its name, declared in Pulumi YAML
config:
  prefix:
    type: string
    default: demo
resources:
  bucket:
    type: standin:index:Bucket
    properties:
      name: ${prefix}-bucket
outputs:
  bucketName: ${bucket.name}
""",
    "README.md": b"The program a Stack in the demo points at.\n",
}


def step(msg):
    print(f"\n==> {msg}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=str(ROOT / "bin" / "pulumi-controller"))
    ap.add_argument("--keep", action="store_true", help="keep the sandbox directory")
    args = ap.parse_args()

    work = pathlib.Path(tempfile.mkdtemp(prefix="pc-demo-"))
    os.chmod(work, 0o755)
    (work / "nginx").mkdir()
    srv = Nginx(work / "nginx")
    try:
        step("packing the embedded program as a Flux artifact")
        data = flux_tarball(PROGRAM)
        rel = "gitrepository/flux-system/demo/0123456789abcdef.tar.gz"
        (srv.root / os.path.dirname(rel)).mkdir(parents=True)
        for d in ("gitrepository", "gitrepository/flux-system", "gitrepository/flux-system/demo"):
            os.chmod(srv.root / d, 0o755)
        srv.put(rel, data)
        digest = sha256(data)
        print(f"    {len(data)} bytes, digest {digest}")

        step("serving it with nginx, as source-controller would")
        srv.start()
        url = f"http://source-controller.flux-system.svc.cluster.local./artifacts/{rel}"
        override = f"127.0.0.1:{srv.port}"
        print(f"    status.artifact.url = {url}")
        print(f"    SOURCE_CONTROLLER_LOCALHOST = {override}")

        store = work / "store"
        cmd = [args.bin, "fetch", url, "--digest", digest, "--store", str(store),
               "--log-level", "info", "--log-format", "text"]
        env = dict(os.environ, SOURCE_CONTROLLER_LOCALHOST=override)
        step("fetch → verify → unpack into the artifact store")
        path = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout.strip()
        print(f"    {path}")
        for p in sorted(pathlib.Path(path).rglob("*")):
            print(f"      {p.relative_to(path)}")

        step("again: the store is reused, no download")
        subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
        downloads = [s for s, u in srv.requests(rel.split("/")[-1])]
        print(f"    downloads seen by the server: {len(downloads)}")

        step("a tampered digest is refused and leaves nothing behind")
        bad = digest[:-4] + "0000"
        r = subprocess.run([args.bin, "fetch", url, "--digest", bad, "--out", str(work / "bad")],
                           env=env, capture_output=True, text=True)
        print(f"    exit {r.returncode}: {r.stderr.strip()}")
        print(f"    {work / 'bad'} exists: {(work / 'bad').exists()}")
        if r.returncode == 0 or (work / "bad").exists():
            sys.exit("demo failed: tampered artifact accepted")
        print("\ndemo ok")
    finally:
        srv.stop()
        if args.keep:
            print(f"sandbox kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
