"""The operator's (PKO's) Git source (issue 23): a Stack with projectRepo, branch or commit,
repoDir and gitAuth / gitAuthSecret, as PKO users write it, is acted on through the
GitRepository <name>-program the controller owns, whose credentials the controller copies
into the Secret <name>-git-auth in source-controller's shape.  Both tiers:

    [real]      the real source-controller clones from the loopback Git server
                (flux_fixtures.GitServer), which asks for basic auth, or over SSH from
                sshd on loopback (flux_fixtures.GitSSHServer: skipped without
                openssh-server)
    [emulator]  the test writes the GitRepository's status as source-controller would
                (what it writes for a clone that worked, or for one refused 401)

No credential value may appear in a log line, an event or a Stack's status
(StackWorld.assert_no_secret)."""
import base64

from flux_fixtures import SHARD_LABEL, SOURCE_API

USER = "ci-bot"
PASSWORD = "git-Pass-9b1f-Secret"
WRONG = "not-the-Password-77"
SHA0 = "ab" * 20     # the emulator tier's commit


def pko_stack(w, name, **spec):
    """Server-side applies a Stack in PKO's Git shape.  On the real tier it carries the
    shard label of the session's source-controller, which the controller copies to the
    GitRepository it makes (else the real source-controller would not serve it)."""
    obj = w.stack_object(name, **spec)
    if w.tier == "real":
        obj["metadata"]["labels"] = {SHARD_LABEL[0]: SHARD_LABEL[1]}
    return w._call(lambda c: c.apply(obj, "stacks", field_manager="stack-test"))


def repo_of(w, name):
    return f"{w.namespace}/{name}"


def publish(w, name, files):
    """Commits files (under infra/) to the Git server's repository `name`; returns the
    commit sha (the emulator tier: a made-up one, nothing clones)."""
    if w.tier != "real":
        return SHA0
    return w.git_server.commit(repo_of(w, name), {f"infra/{k}": v for k, v in files.items()})


def url_of(w, name):
    if w.tier != "real":
        return f"https://git.example.test/{name}.git"
    return w.git_server.url(repo_of(w, name))


def git_repository(w, stack):
    return w._wait(stack, lambda: _get(w, "gitrepositories", f"{stack}-program"), 120,
                   f"GitRepository {stack}-program")


def _get(w, plural, name):
    try:
        api = SOURCE_API if plural == "gitrepositories" else "v1"
        return w._call(lambda c: c.get(api, plural, name, w.namespace))
    except Exception as e:      # noqa: BLE001 - KubeError 404 until it exists
        if getattr(e, "code", None) == 404:
            return None
        raise


def secret_data(w, name):
    obj = _get(w, "secrets", name)
    return obj, {k: base64.b64decode(v).decode() for k, v in (obj.get("data") or {}).items()}


def source_fetched(w, stack, files, sha, ref="main"):
    """What the GitRepository's status says after a clone that worked: on the real tier
    source-controller's own (waited for); on the emulator tier written as it would."""
    if w.tier == "real":
        return None
    return w.flux_source("GitRepository", f"{stack}-program", w.artifact(files, under="infra"),
                         revision=f"{ref}@sha1:{sha}", create=False)


def source_refused(w, stack):
    """The emulator tier: the status source-controller writes when the server answers 401
    (no artifact, Ready=False); the real tier gets it from the real one."""
    if w.tier == "real":
        return
    gen = git_repository(w, stack)["metadata"].get("generation", 1)
    msg = (f"failed to checkout and determine revision: unable to clone "
           f"'{url_of(w, stack)}': authentication required")
    w._patch_source_status("gitrepositories", f"{stack}-program", {
        "observedGeneration": gen, "conditions": [
            {"type": "Ready", "status": "False", "reason": "GitOperationFailed", "message": msg,
             "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": gen}]})


def ref(secret, key):
    return {"type": "Secret", "secret": {"name": secret, "key": key}}


def test_basic_auth_branch_and_repo_dir_reach_ready(stack_world):
    w = stack_world
    files = w.program_files("stack-basic")
    sha = publish(w, "net", files)
    if w.tier == "real":
        w.git_server.require_auth(repo_of(w, "net"), USER, PASSWORD)
    w.secret("git-creds", {"user": USER, "pw": PASSWORD})
    pko_stack(w, "net", projectRepo=url_of(w, "net"), branch="main", repoDir="infra", shallow=True,
              gitAuth={"basicAuth": {"userName": ref("git-creds", "user"),
                                     "password": ref("git-creds", "pw")}})
    w.controller()

    repo = git_repository(w, "net")
    stack = w.stack("net")
    assert repo["spec"]["url"] == url_of(w, "net")
    assert repo["spec"]["ref"] == {"branch": "main"}
    assert repo["spec"]["secretRef"] == {"name": "net-git-auth"}
    owner, = repo["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("Stack", "net", stack["metadata"]["uid"])

    # The credentials, in source-controller's keys, in a Secret the Stack owns.
    sec, data = secret_data(w, "net-git-auth")
    assert data == {"username": USER, "password": PASSWORD}
    owner, = sec["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["controller"]) == ("Stack", "net", True)
    assert sec["metadata"]["labels"]["pulumi.com/stack-name"] == "net"

    source_fetched(w, "net", files, sha)
    obj = w.wait_ready("net", revision=f"main@sha1:{sha}")
    assert obj["status"]["outputs"]["message"] == "hello"
    msg = w.cond(obj, "Ready")["message"]
    assert "Git credentials: basicAuth from Secret git-creds" in msg, msg

    # <name>-git-auth deleted by hand: written again (the Stack is queued by its deletion).
    w._call(lambda c: c.delete("v1", "secrets", "net-git-auth", w.namespace))
    w._wait("net", lambda: (_get(w, "secrets", "net-git-auth") or {}).get("data"), 60,
            "net-git-auth written again")
    assert secret_data(w, "net-git-auth")[1] == {"username": USER, "password": PASSWORD}
    w.assert_no_secret(PASSWORD)


def test_auth_secret_and_commit_pin(stack_world):
    """The deprecated gitAuthSecret (username, password) and a pinned commit: a newer
    commit on the branch changes nothing."""
    w = stack_world
    first = w.revision_files(greeting="pinned")
    sha = publish(w, "pin", first)
    if w.tier == "real":
        w.git_server.require_auth(repo_of(w, "pin"), USER, PASSWORD)
        publish(w, "pin", w.revision_files(greeting="later"))     # main moves on
    w.secret("git-credentials", {"username": USER, "password": PASSWORD})
    pko_stack(w, "pin", projectRepo=url_of(w, "pin"), commit=sha.upper(), repoDir="infra",
              gitAuthSecret="git-credentials")
    w.controller()

    repo = git_repository(w, "pin")
    assert repo["spec"]["ref"] == {"commit": sha}
    _, data = secret_data(w, "pin-git-auth")
    assert data == {"username": USER, "password": PASSWORD}
    source_fetched(w, "pin", first, sha, ref="HEAD")
    obj = w.wait_ready("pin")
    assert sha in obj["status"]["lastAppliedRevision"]
    assert obj["status"]["outputs"]["message"] == "pinned"
    assert list(w.cloud_files().values()) == ["pinned"]
    assert "basic auth (username, password) from Secret git-credentials" in \
        w.cond(obj, "Ready")["message"]
    w.assert_no_secret(PASSWORD)


def test_wrong_password_then_put_right(stack_world):
    """A wrong password: not Ready, the message says the clone failed, and no value is
    anywhere.  The password put right in the user's Secret: the owned Secret is
    rewritten and source-controller asked to fetch again (requestedAt), so the Stack
    gets Ready without waiting for the GitRepository's interval."""
    w = stack_world
    files = w.program_files("stack-basic")
    sha = publish(w, "wrong", files)
    if w.tier == "real":
        w.git_server.require_auth(repo_of(w, "wrong"), USER, PASSWORD)
    w.secret("creds", {"user": USER, "pw": WRONG})
    pko_stack(w, "wrong", projectRepo=url_of(w, "wrong"), branch="main", repoDir="infra",
              gitAuth={"basicAuth": {"userName": ref("creds", "user"), "password": ref("creds", "pw")}})
    w.controller()
    git_repository(w, "wrong")
    source_refused(w, "wrong")

    def failing():
        obj = w.stack("wrong")
        c = w.cond(obj, "Ready")
        return obj if c and c["status"] == "False" and c["reason"] == "ArtifactNotReady" and \
            "authentication" in c["message"] else None
    obj = w._wait("wrong", failing, 180, "Stack wrong not Ready for the clone's authentication")
    assert "GitRepository" in w.cond(obj, "Ready")["message"]
    if w.tier == "real":     # the server did refuse it: the credentials went and were wrong
        assert any(f"/{repo_of(w, 'wrong')}.git/" in r for r in w.git_server.refused)
    assert obj["status"].get("lastAppliedRevision") is None
    w.assert_no_secret(PASSWORD, WRONG)
    before = git_repository(w, "wrong")["metadata"]["annotations"]["reconcile.fluxcd.io/requestedAt"]

    w.secret("creds", {"user": USER, "pw": PASSWORD})
    w._wait("wrong", lambda: secret_data(w, "wrong-git-auth")[1].get("password") == PASSWORD, 120,
            "wrong-git-auth rewritten")
    # the same pass applies the GitRepository after the Secret
    w._wait("wrong", lambda: git_repository(w, "wrong")["metadata"]["annotations"][
        "reconcile.fluxcd.io/requestedAt"] != before, 60, "a new reconcile request")
    source_fetched(w, "wrong", files, sha)
    obj = w.wait_ready("wrong", revision=f"main@sha1:{sha}")
    assert obj["status"]["outputs"]["message"] == "hello"
    w.assert_no_secret(PASSWORD, WRONG)


def test_missing_secret_key_and_foreign_secret(stack_world):
    """A missing Secret, then a missing key: the Stack waits naming both; an SSH key
    without known_hosts waits for it; a Secret <name>-git-auth the controller did not
    make is left alone (Stalled)."""
    w = stack_world
    pko_stack(w, "tok", projectRepo="https://git.example.test/acme/tok.git", branch="main",
              gitAuth={"accessToken": ref("git-token", "token")})
    pko_stack(w, "ssh", projectRepo="git@git.example.test:acme/ssh.git", branch="main",
              gitAuth={"sshAuth": {"sshPrivateKey": ref("deploy-key", "id_ed25519")}})
    w.secret("taken-git-auth", {"note": "mine"})
    pko_stack(w, "taken", projectRepo="https://git.example.test/acme/taken.git", branch="main",
              gitAuthSecret="taken-creds")
    w.secret("taken-creds", {"username": USER, "password": PASSWORD})
    w.controller()

    obj = w.wait_condition("tok", "Reconciling", "True", "GitCredentialsNotFound")
    assert f"Secret {w.namespace}/git-token (spec.gitAuth.accessToken) not found" in \
        w.cond(obj, "Ready")["message"]
    w.secret("git-token", {"other": "x"})
    w._wait("tok", lambda: 'no key "token"' in w.cond(w.stack("tok"), "Ready")["message"], 120,
            "the missing key named")
    w.secret("git-token", {"token": PASSWORD})
    repo = git_repository(w, "tok")
    assert repo["spec"]["secretRef"] == {"name": "tok-git-auth"}
    _, data = secret_data(w, "tok-git-auth")
    assert data == {"username": "git", "password": PASSWORD}     # a token is basic auth as git

    w.wait_condition("ssh", "Reconciling", "True", "GitCredentialsNotFound")
    w.secret("deploy-key", {"id_ed25519": "-----BEGIN OPENSSH PRIVATE KEY-----\nnot-a-key\n"})
    obj = w._wait("ssh", lambda: "known_hosts" in w.cond(w.stack("ssh"), "Ready")["message"] and
                  w.stack("ssh"), 120, "known_hosts asked for")
    assert w.cond(obj, "Ready")["reason"] == "GitCredentialsNotFound"
    msg = w.cond(obj, "Ready")["message"]
    assert 'deploy-key has no key "known_hosts"' in msg and "host keys" in msg, msg
    w.secret("deploy-key", {"id_ed25519": "-----BEGIN OPENSSH PRIVATE KEY-----\nnot-a-key\n",
                            "known_hosts": "git.example.test ssh-ed25519 AAAAC3Nza"})
    repo = git_repository(w, "ssh")
    assert repo["spec"]["url"] == "ssh://git@git.example.test/acme/ssh.git"
    _, data = secret_data(w, "ssh-git-auth")
    assert sorted(data) == ["identity", "known_hosts"]

    # A GitHub App: source-controller's githubApp* keys and provider github; a
    # gitAuthSecret with accessToken: basic auth as git, as the operator sends it.
    w.secret("app", {"id": "123456", "pem": "-----BEGIN RSA PRIVATE KEY-----\nnot-a-key\n"})
    w.secret("tok-creds", {"accessToken": PASSWORD, "username": "ignored"})
    pko_stack(w, "app", projectRepo="https://github.com/acme/app", branch="main",
              gitAuth={"githubApp": {"appID": ref("app", "id"),
                                     "installationID": {"type": "Literal", "literal": {"value": "7890"}},
                                     "privateKey": ref("app", "pem")}})
    pko_stack(w, "toksec", projectRepo="https://git.example.test/acme/toksec.git", branch="main",
              gitAuthSecret="tok-creds")
    repo = git_repository(w, "app")
    assert repo["spec"]["provider"] == "github" and repo["spec"]["secretRef"] == {"name": "app-git-auth"}
    _, data = secret_data(w, "app-git-auth")
    assert data == {"githubAppID": "123456", "githubAppInstallationID": "7890",
                    "githubAppPrivateKey": "-----BEGIN RSA PRIVATE KEY-----\nnot-a-key\n"}
    git_repository(w, "toksec")
    _, data = secret_data(w, "toksec-git-auth")
    assert data == {"username": "git", "password": PASSWORD}
    assert "provider" not in git_repository(w, "toksec")["spec"]

    obj = w.wait_condition("taken", "Stalled", "True", "GitCredentialsConflict")
    assert "not overwritten" in w.cond(obj, "Ready")["message"]
    _, data = secret_data(w, "taken-git-auth")
    assert data == {"note": "mine"}
    assert _get(w, "gitrepositories", "taken-program") is None
    w.assert_no_secret(PASSWORD)


def test_ssh_key_with_known_hosts_reaches_ready(stack_world, request):
    """gitAuth.sshAuth: the private key and, in the same Secret, the server's known_hosts
    (source-controller checks the host key against it).  Real tier: cloned over SSH from
    sshd on loopback (flux_fixtures.GitSSHServer)."""
    w = stack_world
    files = w.program_files("stack-basic")
    if w.tier == "real":
        ssh = request.getfixturevalue("git_ssh_server")
        sha = w.git_server.commit(repo_of(w, "sshrepo"), {f"infra/{k}": v for k, v in files.items()})
        url, identity, known_hosts = ssh.url(repo_of(w, "sshrepo")), ssh.identity, ssh.known_hosts
    else:
        sha, url = SHA0, "ssh://git@git.example.test/acme/sshrepo.git"
        identity = "-----BEGIN OPENSSH PRIVATE KEY-----\nemulator-tier-key\n-----END OPENSSH PRIVATE KEY-----\n"
        known_hosts = "git.example.test ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEmulatorTierHostKey\n"
    w.secret("deploy-key", {"id_ed25519": identity, "known_hosts": known_hosts})
    pko_stack(w, "viassh", projectRepo=url, branch="main", repoDir="infra",
              gitAuth={"sshAuth": {"sshPrivateKey": ref("deploy-key", "id_ed25519")}})
    w.controller()

    repo = git_repository(w, "viassh")
    assert repo["spec"]["url"] == url
    assert repo["spec"]["secretRef"] == {"name": "viassh-git-auth"}
    _, data = secret_data(w, "viassh-git-auth")
    assert data == {"identity": identity, "known_hosts": known_hosts}
    source_fetched(w, "viassh", files, sha)
    try:
        obj = w.wait_ready("viassh", revision=f"main@sha1:{sha}")
    except AssertionError as e:
        extra = f"\nsshd log:\n{ssh.tail()}{w.flux.explain()}" if w.tier == "real" else ""
        raise AssertionError(f"{e}{extra}") from None
    assert obj["status"]["outputs"]["message"] == "hello"
    assert "Git credentials: sshAuth from Secret deploy-key" in w.cond(obj, "Ready")["message"]
    w.assert_no_secret(identity.strip().splitlines()[1])

    # An encrypted key and its passphrase (sshAuth.password), from another Secret.
    if w.tier == "real":
        locked, phrase = ssh.locked_identity, ssh.passphrase
    else:
        locked, phrase = identity.replace("emulator", "locked"), "emulator-Passphrase-31"
    w.secret("locked-key", {"key": locked, "known_hosts": known_hosts})
    w.secret("key-phrase", {"phrase": phrase})
    pko_stack(w, "locked", projectRepo=url, branch="main", repoDir="infra",
              gitAuth={"sshAuth": {"sshPrivateKey": ref("locked-key", "key"),
                                   "password": ref("key-phrase", "phrase")}})
    git_repository(w, "locked")
    w._wait("locked", lambda: _get(w, "secrets", "locked-git-auth"), 60, "locked-git-auth")
    _, data = secret_data(w, "locked-git-auth")
    assert data == {"identity": locked, "known_hosts": known_hosts, "password": phrase}
    source_fetched(w, "locked", files, sha)
    obj = w.wait_ready("locked", revision=f"main@sha1:{sha}")
    assert "sshAuth from Secret locked-key, Secret key-phrase" in w.cond(obj, "Ready")["message"]
    w.assert_no_secret(phrase, locked.strip().splitlines()[1])
