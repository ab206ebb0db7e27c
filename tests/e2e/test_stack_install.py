"""`pulumi install` runs when a program's dependencies change, not on every revision
(issue 11's CLI-call goal): a new revision that changes only the program (a YAML
program's resources or defaults) updates without an install; one that adds or changes a
dependency declaration (here a package.json beside the program, or the runtime's
options) installs again.  What the install left in the workspace moves to the new
revision's copy (the unit test test_stack_workspace.c checks the files; here the CLI
calls are counted by the --pulumi-bin wrapper).  Both tiers (stack_fixtures.stack_world)."""
GIT = {"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository", "name": "app"}


def commands_since(w, mark):
    return [r["command"] for r in w.cli_invocations(mark)]


def new_revision(w, files):
    mark = w.mark()
    src = w.flux_source("GitRepository", "app", w.artifact(files))
    w.wait_ready("demo", revision=src["revision"])
    w.settle("demo")
    return commands_since(w, mark)


def test_install_runs_only_when_dependencies_change(stack_world):
    w = stack_world
    mark = w.mark()
    src = w.flux_source("GitRepository", "app", w.artifact())
    w.apply_stack("demo", fluxSource={"sourceRef": GIT})
    w.controller()
    w.wait_ready("demo", revision=src["revision"])
    assert commands_since(w, mark).count("install") == 1

    # The program alone changed: the update runs, the install does not.
    calls = new_revision(w, w.revision_files(greeting="second"))
    assert "up" in calls and "install" not in calls, calls
    assert list(w.cloud_files().values()) == ["second"]

    # A dependency declaration appears: installed again, once.
    files = w.revision_files(greeting="third")
    files["package.json"] = b'{"name": "demo", "dependencies": {}}\n'
    calls = new_revision(w, files)
    assert calls.count("install") == 1 and "up" in calls, calls

    # The same dependencies, another program change: no install.
    files = w.revision_files(greeting="fourth")
    files["package.json"] = b'{"name": "demo", "dependencies": {}}\n'
    calls = new_revision(w, files)
    assert "up" in calls and "install" not in calls, calls
    assert list(w.cloud_files().values()) == ["fourth"]

    # The runtime's declaration changes (an option): installed again.
    files = w.revision_files(greeting="fifth")
    files["package.json"] = b'{"name": "demo", "dependencies": {}}\n'
    text = files["Pulumi.yaml"].decode()
    assert "\nruntime: yaml\n" in text
    files["Pulumi.yaml"] = text.replace("\nruntime: yaml\n", "\nruntime:\n  name: yaml\n", 1).encode()
    calls = new_revision(w, files)
    assert calls.count("install") == 1, calls
    assert list(w.cloud_files().values()) == ["fifth"]
