"""Registry auth: basic over TLS, the bearer-token flow, docker config.json
(auth, username/password, identitytoken, registrytoken, credHelpers,
credsStore), and that credentials stay out of output and off other hosts."""
import base64
import json
import os
import stat

import pytest

from registry_fixtures import (IDENTITY_TOKEN, PASSWORD, USER, make_tree, serve_artifact,
                               small_artifact, tree_snapshot, write_docker_config)

pytestmark = pytest.mark.usefixtures("isolated_docker_config")


def b64(s):
    return base64.b64encode(s.encode()).decode()


def push_tree(run_pc, reg, repo, tag, tmp_path, seed):
    src = make_tree(tmp_path / f"src-{seed}", seed=seed)
    r = run_pc("push", reg.ref(repo, tag), "--path", src, *reg.pc_args(), input=reg.pc_input())
    assert r.returncode == 0, r.stderr
    return src, r.stdout.strip()


def assert_no_secret(text):
    assert PASSWORD not in text
    assert b64(f"{USER}:{PASSWORD}") not in text
    assert IDENTITY_TOKEN not in text


def test_basic_auth_over_tls(run_pc, registry_basic, tmp_path):
    src, digest = push_tree(run_pc, registry_basic, "basic/app", "v1", tmp_path, "basic")
    r = run_pc("pull", registry_basic.ref("basic/app", "v1"), "--out", tmp_path / "out",
               *registry_basic.pc_args(), "--log-level", "debug", input=registry_basic.pc_input())
    assert r.returncode == 0, r.stderr
    assert tree_snapshot(tmp_path / "out") == tree_snapshot(src)
    assert_no_secret(r.stdout + r.stderr)
    # USER:PASS on the command line works too (documented as the weaker form).
    r = run_pc("pull", registry_basic.ref("basic/app", "v1"), "--out", tmp_path / "out2",
               "--ca-file", registry_basic.ca, "--creds", f"{USER}:{PASSWORD}")
    assert r.returncode == 0, r.stderr


def test_basic_auth_refused_is_clear_and_secret_free(run_pc, registry_basic, tmp_path):
    push_tree(run_pc, registry_basic, "basic/refused", "v1", tmp_path, "refused")
    wrong = "not-the-password-123"
    r = run_pc("pull", registry_basic.ref("basic/refused", "v1"), "--out", tmp_path / "o",
               "--ca-file", registry_basic.ca, "--creds", USER, "--password-stdin",
               "--log-level", "debug", input=wrong + "\n")
    assert r.returncode == 1
    assert "401" in r.stderr and "authentication failed" in r.stderr
    assert wrong not in r.stdout + r.stderr and b64(f"{USER}:{wrong}") not in r.stderr
    assert not (tmp_path / "o").exists()
    r = run_pc("pull", registry_basic.ref("basic/refused", "v1"), "--out", tmp_path / "o",
               "--ca-file", registry_basic.ca, "--docker-config", write_docker_config(
                   tmp_path / "empty.json", {}))
    assert r.returncode == 1 and "no credentials" in r.stderr


def test_tls_needs_the_ca(run_pc, registry_basic, tmp_path):
    r = run_pc("pull", registry_basic.ref("basic/app", "v1"), "--out", tmp_path / "o",
               "--creds", USER, "--password-stdin", "--retries", "0", input=PASSWORD + "\n")
    assert r.returncode == 1
    assert "TLS" in r.stderr or "certificate" in r.stderr, r.stderr
    # And plain HTTP is never tried unless asked for.
    assert "http://" not in r.stderr


def test_token_flow_caches_per_scope(run_pc, registry_token, tmp_path):
    issuer = registry_token.issuer
    before = len(issuer.requests)
    src, digest = push_tree(run_pc, registry_token, "tok/app", "v1", tmp_path, "token")
    push_reqs = issuer.requests[before:]
    # One token for the whole push (HEADs, uploads, manifest) under one scope.
    assert len(push_reqs) == 1, push_reqs
    assert push_reqs[0]["scopes"] == ["repository:tok/app:pull,push"] and push_reqs[0]["auth"]
    before = len(issuer.requests)
    r = run_pc("pull", registry_token.ref("tok/app", "v1"), "--out", tmp_path / "out",
               *registry_token.pc_args(), "--log-level", "debug", input=registry_token.pc_input())
    assert r.returncode == 0, r.stderr
    pull_reqs = issuer.requests[before:]
    assert len(pull_reqs) == 1 and pull_reqs[0]["scopes"] == ["repository:tok/app:pull"]
    assert tree_snapshot(tmp_path / "out") == tree_snapshot(src)
    assert_no_secret(r.stderr)
    assert "eyJ" not in r.stderr  # no JWT in the debug log


def test_token_wrong_password(run_pc, registry_token, tmp_path):
    push_tree(run_pc, registry_token, "tok/wrong", "v1", tmp_path, "tokwrong")
    r = run_pc("pull", registry_token.ref("tok/wrong", "v1"), "--out", tmp_path / "o",
               "--ca-file", registry_token.ca, "--creds", USER, "--password-stdin",
               input="bad-password\n")
    assert r.returncode == 1
    assert "token request" in r.stderr and "401" in r.stderr
    assert "bad-password" not in r.stderr
    assert not (tmp_path / "o").exists()


def test_docker_config_forms(run_pc, registry_basic, registry_token, tmp_path):
    push_tree(run_pc, registry_basic, "cfg/app", "v1", tmp_path, "cfgb")
    push_tree(run_pc, registry_token, "cfg/app", "v1", tmp_path, "cfgt")
    host_b, host_t = registry_basic.host, registry_token.host
    configs = {
        "auth": (registry_basic, {"auths": {host_b: {"auth": b64(f"{USER}:{PASSWORD}")}}}),
        "url-key": (registry_basic, {"auths": {f"https://{host_b}/v2/": {"auth": b64(f"{USER}:{PASSWORD}")}}}),
        "userpass": (registry_basic, {"auths": {host_b: {"username": USER, "password": PASSWORD}}}),
        "identitytoken": (registry_token, {"auths": {host_t: {"identitytoken": IDENTITY_TOKEN}}}),
    }
    for name, (reg, cfg) in configs.items():
        before = len(registry_token.issuer.requests)
        path = write_docker_config(tmp_path / f"{name}.json", cfg)
        r = run_pc("pull", reg.ref("cfg/app", "v1"), "--out", tmp_path / f"o-{name}",
                   "--ca-file", reg.ca, "--docker-config", path, "--log-level", "debug")
        assert r.returncode == 0, (name, r.stderr)
        assert_no_secret(r.stderr)
        if name == "identitytoken":
            reqs = registry_token.issuer.requests[before:]
            assert [q["method"] for q in reqs] == ["POST"] and reqs[0]["grant"] == "refresh_token"
    # registrytoken: a bearer token used as is, no token request from us.
    st_scope = "repository:cfg/app:pull"
    token = registry_token.issuer.sign(USER, registry_token.issuer.access_for([st_scope]))
    before = len(registry_token.issuer.requests)
    path = write_docker_config(tmp_path / "rt.json", {"auths": {host_t: {"registrytoken": token}}})
    r = run_pc("pull", registry_token.ref("cfg/app", "v1"), "--out", tmp_path / "o-rt",
               "--ca-file", registry_token.ca, "--docker-config", path)
    assert r.returncode == 0, r.stderr
    assert len(registry_token.issuer.requests) == before
    assert token not in r.stderr


def _helper(tmp_path, log):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    script = bindir / "docker-credential-pctest"
    script.write_text(f"""#!/bin/sh
[ "$1" = get ] || exit 3
read server
echo "$server" >> {log}
case "$server" in
  *unknown*) echo "credentials not found in native keychain"; exit 1 ;;
esac
printf '{{"ServerURL":"%s","Username":"{USER}","Secret":"{PASSWORD}"}}' "$server"
""")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return bindir


def test_credential_helpers(run_pc, registry_basic, tmp_path):
    push_tree(run_pc, registry_basic, "helper/app", "v1", tmp_path, "helper")
    log = tmp_path / "helper.log"
    bindir = _helper(tmp_path, log)
    env = {"PATH": f"{bindir}:{os.environ['PATH']}"}
    for name, cfg in {"credHelpers": {"credHelpers": {registry_basic.host: "pctest"}},
                      "credsStore": {"credsStore": "pctest", "auths": {registry_basic.host: {}}}}.items():
        path = write_docker_config(tmp_path / f"{name}.json", cfg)
        r = run_pc("pull", registry_basic.ref("helper/app", "v1"), "--out", tmp_path / f"o-{name}",
                   "--ca-file", registry_basic.ca, "--docker-config", path, env=env)
        assert r.returncode == 0, (name, r.stderr)
        assert_no_secret(r.stderr)
    assert log.read_text().split() == [registry_basic.host, registry_basic.host]
    # A helper that is not installed is a clear error.
    path = write_docker_config(tmp_path / "missing.json", {"credsStore": "nosuchhelper"})
    r = run_pc("pull", registry_basic.ref("helper/app", "v1"), "--out", tmp_path / "o-missing",
               "--ca-file", registry_basic.ca, "--docker-config", path, env=env)
    assert r.returncode == 1 and "docker-credential-nosuchhelper" in r.stderr


def test_authorization_not_forwarded_on_blob_redirect(run_pc, fake_registry, tmp_path):
    manifest, mdigest, blobs = small_artifact()
    front = fake_registry("127.0.0.1")
    storage = fake_registry("127.0.0.1")
    expected = "Basic " + b64(f"{USER}:{PASSWORD}")

    def check_auth(h):
        if h.headers.get("Authorization") != expected:
            return 401, {"WWW-Authenticate": 'Basic realm="scripted"'}, b""
        return None
    serve_artifact(front, "redir/app", "v1", manifest, mdigest, {}, check_auth)
    for dg, data in blobs.items():
        # Another host name and port: object storage with a signed URL.
        target = f"http://localhost:{storage.port}/signed/{dg.split(':')[1]}?sig=abc"
        front.routes[f"/v2/redir/app/blobs/{dg}"] = \
            lambda h, target=target: (check_auth(h) or (307, {"Location": target}, b""))
        storage.routes[f"/signed/{dg.split(':')[1]}"] = lambda h, data=data: (200, {}, data)
    r = run_pc("pull", f"oci://{front.host}/redir/app:v1", "--out", tmp_path / "out", "--plain-http",
               "--creds", USER, "--password-stdin", input=PASSWORD + "\n")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "out" / "hello.txt").read_bytes() == b"hello from a scripted registry\n"
    got = [h for (_, _, h) in storage.requests]
    assert got, "the blob was not fetched from the redirect target"
    assert all("Authorization" not in h for h in got)
    assert any(h.get("Authorization") == expected for (_, _, h) in front.requests)


def token_registry(fake_registry, repo, accepts):
    """A scripted registry serving one artifact at <repo>:v1 behind a bearer-token
    service that hands out tok-1, tok-2, ... in turn; accepts(handler, authorization)
    says whether a request may pass.  Returns (registry, paths the token service
    was asked)."""
    manifest, mdigest, blobs = small_artifact()
    reg = fake_registry()
    issued = []

    def token(h):
        issued.append(h.path)
        return 200, {"Content-Type": "application/json"}, json.dumps(
            {"token": f"tok-{len(issued)}", "expires_in": 300}).encode()
    reg.routes["/token"] = token
    challenge = (f'Bearer realm="http://{reg.host}/token",service="scripted",'
                 f'scope="repository:{repo}:pull",error="invalid_token"')

    def check_auth(h):
        if not accepts(h, h.headers.get("Authorization")):
            return 401, {"WWW-Authenticate": challenge}, b""
        return None
    serve_artifact(reg, repo, "v1", manifest, mdigest, blobs, check_auth)
    return reg, issued


def test_bearer_token_renewed_on_401(run_pc, fake_registry, tmp_path):
    # The first token is "revoked": only the second one is accepted.
    reg, issued = token_registry(fake_registry, "renew/app",
                                 lambda h, auth: auth == "Bearer tok-2")
    r = run_pc("pull", f"oci://{reg.host}/renew/app:v1", "--out", tmp_path / "out", "--plain-http")
    assert r.returncode == 0, r.stderr
    assert len(issued) == 2
    assert "scope=repository%3Arenew%2Fapp%3Apull" in issued[0]


def test_blob_stream_refused_learns_the_challenge_from_its_own_401(run_pc, fake_registry,
                                                                  tmp_path):
    """A 401 on a blob (after the manifest was fetched with the first token) is
    answered from that response's challenge: a new token, the blob asked again,
    and no extra request to learn the challenge."""
    def accepts(h, auth):
        if "/blobs/sha256:" in h.path:
            return auth == "Bearer tok-2"
        return auth in ("Bearer tok-1", "Bearer tok-2")
    reg, issued = token_registry(fake_registry, "stream/app", accepts)
    r = run_pc("pull", f"oci://{reg.host}/stream/app:v1", "--out", tmp_path / "out", "--plain-http")
    assert r.returncode == 0, r.stderr
    assert len(issued) == 2
    blob_requests = [(m, p) for (m, p, _) in reg.requests if "/blobs/sha256:" in p]
    assert [m for (m, _) in blob_requests] == ["GET", "GET"], blob_requests


def test_default_docker_config_location(run_pc, registry_basic, isolated_docker_config, tmp_path):
    push_tree(run_pc, registry_basic, "cfg/default", "v1", tmp_path, "cfgdefault")
    write_docker_config(isolated_docker_config / "config.json",
                        {"auths": {registry_basic.host: {"auth": b64(f"{USER}:{PASSWORD}")}}})
    r = run_pc("pull", registry_basic.ref("cfg/default", "v1"), "--out", tmp_path / "o",
               "--ca-file", registry_basic.ca)
    assert r.returncode == 0, r.stderr
