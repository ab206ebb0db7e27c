"""The operator's Program kind (issue 23): a Stack with spec.programRef {name} runs the
Pulumi YAML program a Program (pulumi.com/v1) of its own namespace holds.  The controller
renders the Program into Pulumi.yaml, keeps it in the artifact store as a revision named
by the rendering's digest ("<program>/<generation>@sha256:<hex>"), and runs it as any other
source's revision.  Both tiers: the emulator with the pulumi stand-in, and the real
kube-apiserver with the real pulumi CLI and pulumi-language-yaml running the program.

    - a Program Stack gets Ready with the program's outputs, and its resource exists;
    - a Stack naming a Program not there yet waits (ProgramMissing) and runs when the
      Program is created: the Program informer queues it, not a timer;
    - an edited Program is a new revision of every Stack using it, and an update runs;
    - a Program of another namespace, of the same name, is never read;
    - a Program that renders to more than 1 MiB is refused (Stalled ProgramInvalid)
      until it is edited;
    - on a server without the Program CRD the Stack says so (SourceKindNotServed), and
      runs once the CRD is installed and the controller's discovery finds it.

The classic programRef {repo, ref} is test_stack_classic.py's, unchanged."""
import hashlib
import json
import pathlib

from kube_fixtures import wait_for

PROGRAM_CRD = pathlib.Path(__file__).resolve().parents[2] / "deploy" / "crds" / "pulumi.com_programs.yaml"

PROGRAM_API = "pulumi.com/v1"
SECTIONS = ("configuration", "resources", "variables", "outputs", "packages")


def program_object(w, name, greeting="hello", namespace=None, extra_variables=None):
    """A Program like tests/e2e/programs/stack-basic: one File of the test provider
    whose content is the greeting; outputs message and path."""
    body = {
        "configuration": {"greeting": {"type": "String", "default": greeting}},
        "resources": {"note": {"type": "standin:index:File",
                               "properties": {"content": "${greeting}"}}},
        "outputs": {"message": "${greeting}", "path": "${note.path}"},
    }
    if extra_variables:
        body["variables"] = extra_variables
    return {"apiVersion": PROGRAM_API, "kind": "Program",
            "metadata": {"name": name, "namespace": namespace or w.namespace},
            "program": body}


def apply_program(w, name, **kw):
    obj = program_object(w, name, **kw)
    return w._call(lambda c: c.apply(obj, "programs", field_manager="stack-test"))


def get_program(w, name, namespace=None):
    return w._call(lambda c: c.get(PROGRAM_API, "programs", name, namespace or w.namespace))


def rendering(program):
    """The Pulumi.yaml the controller writes for the Program as the server stores it:
    name, runtime yaml, then the sections in a fixed order, each as stored (compact JSON,
    which is YAML)."""
    out = {"name": program["metadata"]["name"], "runtime": "yaml"}
    for s in SECTIONS:
        if program["program"].get(s) is not None:
            out[s] = program["program"][s]
    return json.dumps(out, separators=(",", ":")).encode()


def revision_of(program):
    digest = hashlib.sha256(rendering(program)).hexdigest()
    return f"{program['metadata']['name']}/{program['metadata']['generation']}@sha256:{digest}"


def program_stack(w, name, program, **spec):
    return w.apply_stack(name, programRef={"name": program}, **spec)


def store_entry(w, program):
    digest = hashlib.sha256(rendering(program)).hexdigest()
    return w.storage / "artifacts" / "sha256" / digest


def test_program_stack_is_ready_then_an_edit_is_a_new_update(stack_world):
    w = stack_world
    w.controller()
    prog = apply_program(w, "greeter")
    program_stack(w, "web", "greeter")
    program_stack(w, "twin", "greeter", stack="twin")

    prog = get_program(w, "greeter")
    rev = revision_of(prog)
    obj = w.wait_ready("web", revision=rev)
    assert obj["status"]["outputs"]["message"] == "hello"
    assert obj["status"]["artifact"] == {"revision": rev,
                                         "digest": rev.split("@", 1)[1]}
    twin = w.wait_ready("twin", revision=rev)
    assert sorted(w.cloud_files().values()) == ["hello", "hello"]
    # One store entry for the one rendering both Stacks use: Pulumi.yaml alone.
    entry = store_entry(w, prog)
    assert sorted(p.name for p in entry.iterdir()) == ["Pulumi.yaml"]
    assert (entry / "Pulumi.yaml").read_bytes() == rendering(prog)
    assert twin["status"]["artifact"]["digest"] == obj["status"]["artifact"]["digest"]

    # The Program edited: a new revision of both Stacks, and an update of each.
    mark = w.mark()
    apply_program(w, "greeter", greeting="bonjour")
    edited = get_program(w, "greeter")
    assert edited["metadata"]["generation"] == prog["metadata"]["generation"] + 1
    rev2 = revision_of(edited)
    assert rev2 != rev
    obj = w.wait_ready("web", revision=rev2)
    w.wait_ready("twin", revision=rev2)
    assert obj["status"]["outputs"]["message"] == "bonjour"
    assert sorted(w.cloud_files().values()) == ["bonjour", "bonjour"]
    assert {r["stack"] for r in w.updates(since=mark)} == {"dev", "twin"}
    assert store_entry(w, edited).is_dir()

    # A metadata-only change renders the same bytes: nothing runs.
    mark = w.mark()
    w._call(lambda c: c.patch(PROGRAM_API, "programs", "greeter",
                              {"metadata": {"labels": {"team": "web"}}}, w.namespace))
    w.settle("web")
    assert w.updates(since=mark) == []
    assert w.stack("web")["status"]["lastAppliedRevision"] == rev2


def test_a_missing_program_is_waited_for_and_its_creation_queues_the_stack(stack_world):
    w = stack_world
    # No timer would look again within the test: only the Program informer can.
    w.controller(requeue_dependency="600s")
    program_stack(w, "late", "later")
    obj = w.wait_condition("late", "Ready", "False", "ProgramMissing")
    msg = w.cond(obj, "Ready")["message"]
    assert f"Program {w.namespace}/later not found" in msg and "spec.programRef.name" in msg
    assert w.cond(obj, "Reconciling")["reason"] == "ProgramMissing"
    assert w.cond(obj, "Stalled") is None

    apply_program(w, "later", greeting="at last")
    obj = w.wait_ready("late", revision=revision_of(get_program(w, "later")), timeout=120)
    assert obj["status"]["outputs"]["message"] == "at last"


def test_a_program_of_another_namespace_is_never_read(stack_world):
    w = stack_world
    other = f"{w.namespace}-other"
    w.kubectl("create", "namespace", other)
    apply_program(w, "shared", greeting="not yours", namespace=other)
    w.controller()
    program_stack(w, "nosy", "shared")
    obj = w.wait_condition("nosy", "Ready", "False", "ProgramMissing")
    assert f"Program {w.namespace}/shared not found" in w.cond(obj, "Ready")["message"]
    assert w.updates() == [] and w.cloud_files() == {}

    # Its own namespace's Program of that name is the one it runs.
    apply_program(w, "shared", greeting="mine")
    obj = w.wait_ready("nosy", revision=revision_of(get_program(w, "shared")))
    assert obj["status"]["outputs"]["message"] == "mine"


def test_a_program_too_large_is_refused_until_edited(stack_world):
    w = stack_world
    w.controller()
    big = {"padding": "x" * (1100 * 1024)}      # renders past the 1 MiB limit
    apply_program(w, "huge", extra_variables=big)
    program_stack(w, "big", "huge")
    obj = w.wait_condition("big", "Ready", "False", "ProgramInvalid")
    msg = w.cond(obj, "Ready")["message"]
    assert "Program huge" in msg and "program" in msg and "1 MiB" in msg, msg
    assert w.cond(obj, "Stalled")["reason"] == "ProgramInvalid"
    assert w.updates() == []

    # Edited to a sensible size (the variable dropped): it runs.
    w._call(lambda c: c.patch(PROGRAM_API, "programs", "huge",
                              {"program": {"variables": None}}, w.namespace))
    obj = w.wait_ready("big", revision=revision_of(get_program(w, "huge")))
    assert obj["status"]["outputs"]["message"] == "hello"


def test_the_program_kind_installed_later_is_found(bare_stack_world):
    w = bare_stack_world
    w.controller(discovery_interval="1s")
    program_stack(w, "early", "greeter")
    obj = w.wait_condition("early", "Ready", "False", "SourceKindNotServed")
    assert "pulumi.com_programs.yaml" in w.cond(obj, "Ready")["message"]
    assert w.cond(obj, "Stalled")["reason"] == "SourceKindNotServed"

    w.api.apply_file(PROGRAM_CRD)

    def created():      # once the new CRD is established and served
        try:
            return apply_program(w, "greeter", greeting="found")
        except Exception:       # noqa: BLE001 - not served yet
            return None
    wait_for(created, 60, what="Programs to be served")
    obj = w.wait_ready("early", revision=revision_of(get_program(w, "greeter")))
    assert obj["status"]["outputs"]["message"] == "found"
