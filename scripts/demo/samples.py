"""The demo's embedded default: a Pulumi YAML program and the manifests that deploy it.

The program's one resource is a file of the test provider (`standin:index:File`, written
under $PULUMI_STANDIN_CLOUD/files): the pulumi stand-in implements it, and the real pulumi
CLI runs it through the real provider pulumi-resource-standin that `make deps-real` builds
(.real/provider), so the same program runs on both tiers without a cloud account.  A new
revision changes the `greeting` default.

The manifests are what a platform engineer would write: a Secret with the passphrase, a
Flux GitRepository, and two Stacks, one on that GitRepository's artifact (fluxSource) and
one straight from the OCI registry (ociSource).
"""
import json

NAMESPACE = "demo"
FLUX_STACK = "hello-flux"
OCI_STACK = "hello-oci"
SOURCE = "hello"
OCI_REPO = "demo/hello"
OCI_TAG = "stable"
PASSPHRASE_SECRET = "demo-passphrase"
# A demo value, not a secret worth keeping: the sandbox and its state are deleted at the end.
PASSPHRASE = "demo-passphrase-not-for-production"
GIT_URL = "https://git.example.test/platform/hello.git"

PROGRAM = """\
name: hello
runtime: yaml
description: The pulumi-controller demo - one file in the sandbox's simulated cloud
config:
  greeting:
    type: string
    default: {greeting}
resources:
  note:
    type: standin:index:File
    properties:
      content: ${{greeting}}, world
outputs:
  message: ${{greeting}}, world
  path: ${{note.path}}
"""


def program_files(greeting):
    """{path: bytes} of the program whose greeting defaults to `greeting`."""
    return {"Pulumi.yaml": PROGRAM.format(greeting=greeting).encode(),
            "README.md": b"The program the demo's Stacks deploy (scripts/demo/samples.py).\n"}


def _stack(name, source, backend, cloud_dir):
    """A Stack of the demo: its own Pulumi stack in the sandbox's file:// backend, the
    passphrase from the Secret, the simulated cloud's directory for the provider."""
    return {"apiVersion": "pulumi.com/v1", "kind": "Stack",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": dict(source, **{
                "stack": name, "backend": backend, "secretsProvider": "passphrase",
                "envRefs": {
                    "PULUMI_CONFIG_PASSPHRASE": {"type": "Secret", "secret": {
                        "name": PASSPHRASE_SECRET, "key": "passphrase"}},
                    "PULUMI_STANDIN_CLOUD": {"type": "Literal",
                                             "literal": {"value": str(cloud_dir)}}}})}


def manifests(registry_host, backend, cloud_dir, git_url=GIT_URL, git_labels=None):
    """The sample objects as one multi-document YAML text (JSON documents, which YAML
    reads), for `kubectl apply -f`.  With the real source-controller the GitRepository
    points at the sandbox's Git server and carries the label its shard serves."""
    objs = [
        {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
         "metadata": {"name": PASSPHRASE_SECRET, "namespace": NAMESPACE},
         "stringData": {"passphrase": PASSPHRASE}},
        {"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
         "metadata": dict({"name": SOURCE, "namespace": NAMESPACE},
                          **({"labels": git_labels} if git_labels else {})),
         "spec": {"url": git_url, "interval": "1m", "ref": {"branch": "main"}}},
        _stack(FLUX_STACK, {"fluxSource": {"sourceRef": {
            "apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
            "name": SOURCE}}}, backend, cloud_dir),
        # interval 5s: the demo wants to see a moved tag soon; 5m or more in real life
        _stack(OCI_STACK, {"ociSource": {"url": f"oci://{registry_host}/{OCI_REPO}",
                                         "ref": {"tag": OCI_TAG}, "insecure": True,
                                         "interval": "5s"}}, backend, cloud_dir),
    ]
    return "".join("---\n" + json.dumps(o, indent=2) + "\n" for o in objs)


def pin_digest_patch(digest):
    """The merge patch that pins the ociSource Stack to one manifest digest."""
    return json.dumps({"spec": {"ociSource": {"ref": {"tag": None, "digest": digest}}}})
