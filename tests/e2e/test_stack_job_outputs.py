"""status.outputs of a Job-mode Stack (docs/job-runner.md, Outputs), on both tiers with the
real `pulumi-controller run-update` in the test kubelet's pods: it is what local mode
shows for the same outputs, read from the masked copy the pod puts on the outputs Secret
(annotation pulumi.com/masked-outputs), never from the Secret's plain data.

Review 21: a secret nested in an object output is masked in place by `stack output
--json` ({"password": "[secret]"}), so the output was not in the Secret's list of secret
keys, and the controller decoded its plain value into status; a string output "42" came
back as the number 42.  The stand-in keeps a nested fn::secret nested, as the Node.js,
Python and Go SDKs do; real pulumi-yaml makes the whole object secret (FIDELITY.md), so
the nested case itself is shown on the emulator tier only, the rest on both."""
import json

from job_fixtures import job_controller
from stack_fixtures import wait_until

GIT = {"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository", "name": "app"}
NESTED_SECRET = "n3sted-s3cret-value"
TOP_SECRET = "t0p-s3cret-value"

PROGRAM = f"""name: stackdemo
runtime: yaml
resources:
  note:
    type: standin:index:File
    properties:
      content: hello
outputs:
  message: hello
  answer: "42"
  count: 42
  conn:
    user: admin
    password:
      fn::secret: {NESTED_SECRET}
  token:
    fn::secret: {TOP_SECRET}
""".encode()


def ready(w, name):
    def check():
        obj = w.stack(name)
        r = w.cond(obj, "Ready")
        return obj if r and r["status"] == "True" else None
    return wait_until(check, what=f"{name} Ready")


def test_job_mode_status_outputs_are_local_modes_and_hold_no_secret(job_world, request):
    w = job_world
    w.flux_source("GitRepository", "app", w.artifact({"Pulumi.yaml": PROGRAM}))
    w.apply_stack("local", stack="local", fluxSource={"sourceRef": GIT}, runner={"type": "Local"})
    w.apply_stack("job", stack="job", fluxSource={"sourceRef": GIT}, runner={"type": "Job"})
    job_controller(w, request)
    local, job = ready(w, "local"), ready(w, "job")

    assert job["status"]["outputs"] == local["status"]["outputs"], \
        (job["status"]["outputs"], local["status"]["outputs"])
    status = json.dumps(job["status"])
    assert NESTED_SECRET not in status and TOP_SECRET not in status, job["status"]["outputs"]
    out = job["status"]["outputs"]
    assert out["answer"] == "42" and out["count"] == 42 and out["message"] == "hello"
    assert out["token"] == "[secret]"
    if w.cli.kind == "standin":
        # The SDKs' nesting (the stand-in's); pulumi-yaml makes all of conn secret.
        assert out["conn"] == {"user": "admin", "password": "[secret]"}
    else:
        assert out["conn"] == "[secret]"
    # The Secret itself has the values (it is a Secret), as local mode writes them.
    sec = w.outputs_secret("job")
    assert json.loads(sec["decoded"]["conn"]) == {"user": "admin", "password": NESTED_SECRET}
    assert sec["decoded"]["token"] == TOP_SECRET and sec["decoded"]["answer"] == "42"
    assert json.loads(sec["metadata"]["annotations"]["pulumi.com/masked-outputs"]) == out
