"""The real pulumi CLI running a Node.js program (tests/real/programs/nodefiles)
on the Node.js language host built by deps-real: a dynamic provider whose
resources are files under $PULUMI_STANDIN_CLOUD/files, secret config, masked
outputs, drift seen by `preview --refresh` and repaired by `up --refresh`.
(The stand-in runs Pulumi YAML only, so this is real-only.)"""
import json

PASSPHRASE = "node-Passphrase-23"
SECRET = "n0de-Secret-58"


def test_nodejs_dynamic_provider_and_drift(real_pulumi):
    p = real_pulumi
    work = p.program("nodefiles")
    p.env.update({"PULUMI_CONFIG_PASSPHRASE": PASSPHRASE, "PULUMI_BACKEND_URL": p.backend_url})
    p.run("stack", "init", "dev", cwd=work, check=True)
    p.run("config", "set", "--secret", "password", cwd=work, input=SECRET, check=True)
    log = p.workdir / "events.jsonl"
    out = p.run("up", "--yes", "--skip-preview", "--event-log", str(log), cwd=work,
                env={"PULUMI_DEBUG_COMMANDS": "1"})
    assert out.returncode == 0, out.stdout + out.stderr
    assert "+ 3 created" in out.stdout
    assert SECRET not in out.stdout + out.stderr + log.read_text()
    kinds = [next(k for k in json.loads(line) if k not in ("sequence", "timestamp"))
             for line in log.read_text().splitlines()]
    assert kinds[0] == "preludeEvent" and kinds[-1] == "cancelEvent"
    assert kinds.count("summaryEvent") == 1

    files = p.cloud_dir / "files"
    assert (files / "note").read_text() == "fixed note"
    assert (files / "motd").read_text() == "hello"
    masked = json.loads(p.run("stack", "output", "--json", cwd=work, check=True).stdout)
    assert masked == {"notePath": str(files / "note"), "motdContent": "hello",
                      "secretOut": "[secret]"}
    plain = json.loads(p.run("stack", "output", "--json", "--show-secrets", cwd=work,
                             check=True).stdout)
    assert plain["secretOut"] == SECRET

    (files / "note").write_text("drifted")
    out = p.run("preview", "--expect-no-changes", cwd=work)
    assert out.returncode == 0, out.stdout + out.stderr
    out = p.run("preview", "--refresh", "--expect-no-changes", cwd=work)
    assert out.returncode == 7, out.stdout + out.stderr
    assert out.stderr == "error: no changes were expected for preview but changes were proposed\n"
    out = p.run("up", "--yes", "--skip-preview", "--refresh", cwd=work)
    assert out.returncode == 0, out.stdout + out.stderr
    assert (files / "note").read_text() == "fixed note"

    out = p.run("destroy", "--yes", cwd=work)
    assert out.returncode == 0, out.stdout + out.stderr
    assert sorted(x.name for x in files.iterdir()) == []
