"""End-to-end tests of `pulumi-controller unpack` on the hostile corpus.

Each case of tests/hostile_corpus.py is written into a fresh work directory
beside a sentinel tree; the binary runs with that directory as its cwd (so a
relative escape would land inside what the test watches).  Refusals must
give a non-zero exit, exactly one stderr line naming the entry and the rule,
no output directory, no staging directory, and a bit-identical work tree.
Benign archives must come out exactly as the case describes.
"""
import hashlib
import os
import pathlib
import stat
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
import hostile_corpus  # noqa: E402

CASES = hostile_corpus.all_cases()
HOSTILE = [c for c in CASES if c.refuse]
BENIGN = [c for c in CASES if not c.refuse]
ABSOLUTE_TARGETS = ["/tmp/pc-evil"]


def snapshot(root):
    """path -> (type, mode, content digest or link target) for a whole tree."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            rel = os.path.relpath(p, root)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("l", os.readlink(p))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("d", stat.S_IMODE(st.st_mode))
            else:
                with open(p, "rb") as f:
                    out[rel] = ("f", stat.S_IMODE(st.st_mode), hashlib.sha256(f.read()).hexdigest())
    return out


def make_workspace(tmp_path, case):
    """tmp_path/work/{archive, sentinel tree}; returns (work, archive, out)."""
    work = tmp_path / "work"
    (work / "sentinel" / "deep").mkdir(parents=True)
    (work / "sentinel" / "keep.txt").write_text("do not touch\n")
    (work / "sentinel" / "deep" / "keep.bin").write_bytes(bytes(range(256)))
    (work / "evil").mkdir()      # an escape to ../evil would have to pass it
    archive = work / "archive.bin"
    archive.write_bytes(case.data)
    return work, archive, work / "out"


def one_line(stderr):
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, f"expected one stderr line, got {lines!r}"
    return lines[0]


def tree_of(root):
    """The extracted tree in the corpus' notation."""
    out = {}
    st = os.lstat(root)
    out[""] = ("d", stat.S_IMODE(st.st_mode))
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            rel = os.path.relpath(p, root)
            st = os.lstat(p)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("l", os.readlink(p))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("d", stat.S_IMODE(st.st_mode))
            elif stat.S_ISREG(st.st_mode):
                with open(p, "rb") as f:
                    out[rel] = ("f", f.read(), stat.S_IMODE(st.st_mode))
            else:
                out[rel] = ("special", st.st_mode)
    return out


@pytest.mark.parametrize("case", HOSTILE, ids=[c.name for c in HOSTILE])
def test_hostile_archive_is_refused(tmp_path, pc_bin, case):
    import subprocess
    work, archive, out = make_workspace(tmp_path, case)
    before = snapshot(tmp_path)
    for t in ABSOLUTE_TARGETS:
        assert not os.path.lexists(t), f"{t} exists before the test"
    r = subprocess.run([pc_bin, "unpack", str(archive), "--out", str(out), *case.args],
                       capture_output=True, text=True, cwd=work, timeout=120)
    assert r.returncode == 1, r.stderr
    line = one_line(r.stderr)
    assert line.startswith(f"unpack {archive}: "), line
    if case.entry is not None:
        assert f'archive entry "{case.entry}' in line, line
    if case.rule is not None:
        assert case.rule in line, line
    assert not os.path.lexists(out)
    assert sorted(os.listdir(work)) == ["archive.bin", "evil", "sentinel"], os.listdir(work)
    assert snapshot(tmp_path) == before
    for t in ABSOLUTE_TARGETS:
        assert not os.path.lexists(t), f"{t} was written"


@pytest.mark.parametrize("case", BENIGN, ids=[c.name for c in BENIGN])
def test_benign_archive_is_extracted_exactly(tmp_path, run_pc, case):
    work, archive, out = make_workspace(tmp_path, case)
    r = run_pc("unpack", archive, "--out", out, "--log-level", "error", *case.args)
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    got = tree_of(out)
    want = dict(case.tree)
    if "" not in want:
        got.pop("")
    assert got == want
    for a, b in case.links:
        assert os.lstat(out / a).st_ino == os.lstat(out / b).st_ino
    assert sorted(os.listdir(work)) == ["archive.bin", "evil", "out", "sentinel"]


def test_corpus_is_big_enough():
    assert len(HOSTILE) >= 30
    assert len(BENIGN) >= 8


def _benign(name):
    return next(c for c in BENIGN if c.name == name)


def test_digest_sha256_matches(tmp_path, run_pc):
    case = _benign("gzip-tar")
    work, archive, out = make_workspace(tmp_path, case)
    d = "sha256:" + hashlib.sha256(case.data).hexdigest()
    r = run_pc("unpack", archive, "--out", out, "--digest", d)
    assert r.returncode == 0, r.stderr
    assert tree_of(out)["src/main.py"][1] == b"print('hi')\n"


@pytest.mark.parametrize("form", ["bare", "sha512", "upper"])
def test_digest_other_forms(tmp_path, run_pc, form):
    case = _benign("zstd-tar")
    work, archive, out = make_workspace(tmp_path, case)
    d = {"bare": hashlib.sha256(case.data).hexdigest(),
         "sha512": "sha512:" + hashlib.sha512(case.data).hexdigest(),
         "upper": "sha256:" + hashlib.sha256(case.data).hexdigest().upper()}[form]
    r = run_pc("unpack", archive, "--out", out, "--digest", d)
    assert r.returncode == 0, r.stderr
    assert os.path.isdir(out)


def test_digest_mismatch_leaves_nothing(tmp_path, run_pc):
    case = _benign("flux-style")
    work, archive, out = make_workspace(tmp_path, case)
    wrong = "sha256:" + hashlib.sha256(case.data + b"x").hexdigest()
    r = run_pc("unpack", archive, "--out", out, "--digest", wrong)
    assert r.returncode == 1
    line = one_line(r.stderr)
    assert "digest mismatch" in line and wrong in line
    assert hashlib.sha256(case.data).hexdigest() in line
    assert sorted(os.listdir(work)) == ["archive.bin", "evil", "sentinel"]


def test_digest_mismatch_wins_over_refusal(tmp_path, run_pc):
    case = next(c for c in HOSTILE if c.name == "dotdot-leading")
    work, archive, out = make_workspace(tmp_path, case)
    r = run_pc("unpack", archive, "--out", out, "--digest", "sha256:" + "0" * 64)
    assert r.returncode == 1
    assert "digest mismatch" in one_line(r.stderr)
    assert not os.path.lexists(out)


def test_digest_of_hostile_archive_still_refused(tmp_path, run_pc):
    case = next(c for c in HOSTILE if c.name == "symlink-escape")
    work, archive, out = make_workspace(tmp_path, case)
    r = run_pc("unpack", archive, "--out", out, "--digest",
               "sha256:" + hashlib.sha256(case.data).hexdigest())
    assert r.returncode == 1
    assert 'archive entry "up": refused' in one_line(r.stderr)
    assert not os.path.lexists(out)


@pytest.mark.parametrize("bad", ["md5:" + "0" * 32, "sha256:abc", "blake3:" + "0" * 64, "zz" * 32, ""])
def test_bad_digest_is_usage_error(tmp_path, run_pc, bad):
    case = _benign("plain-tar")
    work, archive, out = make_workspace(tmp_path, case)
    r = run_pc("unpack", archive, "--out", out, "--digest", bad)
    assert r.returncode == 2
    assert "digest" in one_line(r.stderr)
    assert not os.path.lexists(out)


def test_existing_output_is_refused_and_untouched(tmp_path, run_pc):
    case = _benign("plain-tar")
    work, archive, out = make_workspace(tmp_path, case)
    out.mkdir()
    (out / "mine").write_text("keep")
    r = run_pc("unpack", archive, "--out", out)
    assert r.returncode == 1
    assert "already exists" in one_line(r.stderr)
    assert os.listdir(out) == ["mine"]


def test_existing_empty_output_is_refused_too(tmp_path, run_pc):
    case = _benign("plain-tar")
    work, archive, out = make_workspace(tmp_path, case)
    out.mkdir()
    r = run_pc("unpack", archive, "--out", out)
    assert r.returncode == 1
    assert os.listdir(out) == []


def test_missing_parent_is_an_error_and_creates_nothing(tmp_path, run_pc):
    case = _benign("plain-tar")
    work, archive, _ = make_workspace(tmp_path, case)
    r = run_pc("unpack", archive, "--out", work / "no" / "such" / "out")
    assert r.returncode == 1
    assert "does not exist" in one_line(r.stderr)
    assert not os.path.lexists(work / "no")


def test_missing_archive(tmp_path, run_pc):
    r = run_pc("unpack", tmp_path / "nope.tar", "--out", tmp_path / "out")
    assert r.returncode == 1
    assert "nope.tar" in one_line(r.stderr)
    assert not os.path.lexists(tmp_path / "out")
    assert os.listdir(tmp_path) == []


def test_unlimited_size_accepts_what_the_default_refuses(tmp_path, run_pc):
    case = hostile_corpus.Case("big", hostile_corpus.gzip_bomb(101 << 20), False)
    work, archive, out = make_workspace(tmp_path, case)
    r = run_pc("unpack", archive, "--out", out, "--max-size", "-1")
    assert r.returncode == 0, r.stderr
    assert os.path.getsize(out / "bomb.bin") == 101 << 20


def test_size_suffixes(tmp_path, run_pc):
    case = _benign("at-the-limits")
    work, archive, out = make_workspace(tmp_path, case)
    r = run_pc("unpack", archive, "--out", out, "--max-size", "9Ki")
    assert r.returncode == 1
    assert "limit of 9216 bytes in total" in one_line(r.stderr)


@pytest.mark.parametrize("args", [[], ["a.tar"], ["--out", "x"], ["a.tar", "b.tar", "--out", "x"],
                                  ["a.tar", "--out", "x", "--max-size", "lots"],
                                  ["a.tar", "--out", "x", "--max-entries", "-5"],
                                  ["a.tar", "--out", "x", "--bogus"]])
def test_usage_errors(tmp_path, run_pc, args):
    r = run_pc("unpack", *args)
    assert r.returncode == 2
    assert r.stderr.strip()


def test_help_documents_every_flag(run_pc):
    r = run_pc("unpack", "--help")
    assert r.returncode == 0
    for flag in ("--out", "--max-size", "--max-entries", "--max-file-size", "--digest",
                 "--log-level", "--log-format", "--help"):
        assert flag in r.stdout
    top = run_pc("--help")
    assert "unpack" in top.stdout


def test_success_logs_one_json_record(tmp_path, run_pc):
    import json
    case = _benign("hardlink")
    work, archive, out = make_workspace(tmp_path, case)
    r = run_pc("unpack", archive, "--out", out, "--log-level", "info", "--log-format", "json")
    assert r.returncode == 0
    rec = json.loads(one_line(r.stderr))
    assert rec["msg"] == "unpacked" and rec["entries"] == "3" and rec["files"] == "2"
    assert rec["bytes"] == str(len(b"shared"))


def test_success_is_quiet_by_default(tmp_path, run_pc):
    case = _benign("hardlink")
    work, archive, out = make_workspace(tmp_path, case)
    r = run_pc("unpack", archive, "--out", out)
    assert r.returncode == 0
    assert r.stderr == "" and r.stdout == ""


def test_archive_from_a_pipe(tmp_path, pc_bin):
    import subprocess
    case = _benign("flux-style")
    out = tmp_path / "out"
    d = "sha256:" + hashlib.sha256(case.data).hexdigest()
    r = subprocess.run([pc_bin, "unpack", "/dev/stdin", "--out", str(out), "--digest", d],
                       input=case.data, capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert tree_of(out) == case.tree


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
def test_signal_mid_extraction_leaves_no_staging(pc_bin, tmp_path, sig):
    """Reading from a pipe that stalls halfway: the signal ends the
    extraction, the staging directory goes, the process dies by the signal."""
    import gzip
    import io
    import signal
    import subprocess
    import tarfile
    from nginx_fixtures import partial_staging, staging_names, wait_until
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for i in range(4):
            data = os.urandom(64 << 10)
            ti = tarfile.TarInfo(f"f{i}.bin")
            ti.size = len(data)
            tar.addfile(ti, io.BytesIO(data))
    archive = gzip.compress(raw.getvalue(), compresslevel=0)
    fifo = tmp_path / "in.fifo"
    os.mkfifo(fifo)
    out = tmp_path / "out"
    p = subprocess.Popen([pc_bin, "unpack", str(fifo), "--out", str(out)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    with open(fifo, "wb") as w:
        w.write(archive[: len(archive) // 2])
        w.flush()
        wait_until(lambda: partial_staging(tmp_path), "no partial staging appeared")
        p.send_signal(getattr(signal, sig))
        _, err = p.communicate(timeout=20)
    assert p.returncode == -getattr(signal, sig), err
    assert staging_names(tmp_path) == []
    assert not out.exists()


def test_digest_with_newline_is_one_escaped_line(run_pc, tmp_path):
    arch = tmp_path / "a.tar"
    arch.write_bytes(b"\0" * 1024)
    r = run_pc("unpack", arch, "--out", tmp_path / "o", "--digest", "sha256:ab\nfake: second line")
    assert r.returncode == 2
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_archive_path_with_newline_is_one_escaped_line(run_pc, tmp_path):
    arch = tmp_path / "a\nfake: line.tar"
    arch.write_bytes(b"not an archive at all" * 50)
    r = run_pc("unpack", arch, "--out", tmp_path / "o")
    assert r.returncode == 1
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "a\\nfake" in r.stderr
