#!/usr/bin/python3
"""Hostile and benign archives for the safe extractor, generated at test time.

Every case is built from Python's tarfile/gzip/bz2/lzma/zipfile modules,
the zstd CLI, or raw 512-byte tar headers crafted here when a library would
refuse (or silently fix) what an attacker can write.  tests/e2e/test_unpack.py
runs `pulumi-controller unpack` on each case; `hostile_corpus.py OUTDIR`
writes the files plus manifest.json for inspection or as fuzz seeds.

A case is either refused (`entry` is the entry name the one-line error must
quote, `rule` a fragment of the rule it must state) or benign (`tree` is the
exact expected result: path -> ("f", bytes, mode) | ("d", mode) | ("l", target),
"" being the output directory itself; `links` lists path pairs that must be
one inode).
"""
import bz2
import dataclasses
import gzip
import io
import json
import lzma
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile


@dataclasses.dataclass
class Case:
    name: str
    data: bytes
    refuse: bool
    entry: str = None          # entry name quoted in the error (refusals)
    rule: str = None           # fragment of the error message (refusals)
    args: list = dataclasses.field(default_factory=list)
    tree: dict = None          # expected result (benign)
    links: list = dataclasses.field(default_factory=list)


# ---- raw tar crafting -------------------------------------------------------

def _put(h, off, width, value):
    if isinstance(value, str):
        value = value.encode("utf-8", "surrogateescape")
    if len(value) > width:
        raise ValueError(f"field too long: {value!r}")
    h[off:off + len(value)] = value


def raw_header(name, size=0, typeflag=b"0", linkname="", mode=0o644, gnu=False,
               extra=None):
    """One ustar (or old-GNU) header block with a correct checksum."""
    h = bytearray(512)
    _put(h, 0, 100, name)
    _put(h, 100, 8, b"%07o\0" % mode)
    _put(h, 108, 8, b"0000000\0")
    _put(h, 116, 8, b"0000000\0")
    _put(h, 124, 12, b"%011o\0" % size)
    _put(h, 136, 12, b"00000000000\0")
    h[156:157] = typeflag
    _put(h, 157, 100, linkname)
    if gnu:
        _put(h, 257, 8, b"ustar  \0")
    else:
        _put(h, 257, 6, b"ustar\0")
        _put(h, 263, 2, b"00")
    for off, val in (extra or {}).items():
        _put(h, off, len(val), val)
    h[148:156] = b" " * 8
    _put(h, 148, 8, b"%06o\0 " % sum(h))
    return bytes(h)


def _pad(data):
    return data + b"\0" * (-len(data) % 512)


def raw_tar(*blocks, end=True):
    """Concatenates header/data pieces (each padded) and the end marker."""
    out = b"".join(_pad(b) for b in blocks)
    return out + (b"\0" * 1024 if end else b"")


def raw_file(name, data, mode=0o644, typeflag=b"0"):
    return [raw_header(name, len(data), typeflag, mode=mode), data]


def pax_record(key, value):
    body = f" {key}={value}\n".encode()
    n = len(body)
    while len(str(n).encode()) + len(body) != n:
        n = len(str(n).encode()) + len(body)
    return str(n).encode() + body


def raw_pax(records, name="PaxHeader"):
    data = b"".join(pax_record(k, v) for k, v in records.items())
    return [raw_header(name, len(data), b"x"), data]


# ---- tarfile-based building -------------------------------------------------

def F(name, data=b"", mode=0o644):
    return ("f", name, data, mode, {})


def D(name, mode=0o755):
    return ("d", name, None, mode, {})


def L(name, target):
    return ("l", name, target, 0o777, {})


def H(name, target):
    return ("h", name, target, 0o644, {})


def special(name, kind):
    return (kind, name, None, 0o644, {})


def tar_bytes(members, fmt=tarfile.PAX_FORMAT):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as t:
        for kind, name, payload, mode, pax in members:
            ti = tarfile.TarInfo(name)
            ti.mode = mode
            ti.mtime = 0
            ti.pax_headers = dict(pax)
            if kind == "f":
                ti.size = len(payload)
                t.addfile(ti, io.BytesIO(payload))
                continue
            ti.type = {"d": tarfile.DIRTYPE, "l": tarfile.SYMTYPE, "h": tarfile.LNKTYPE,
                       "chr": tarfile.CHRTYPE, "blk": tarfile.BLKTYPE,
                       "fifo": tarfile.FIFOTYPE}[kind]
            if kind in ("l", "h"):
                ti.linkname = payload
            t.addfile(ti)
    return buf.getvalue()


def gz(data):
    return gzip.compress(data, mtime=0)


def zstd(data):
    exe = shutil.which("zstd")
    if exe is None:
        raise RuntimeError("zstd is not installed; run 'make deps'")
    return subprocess.run([exe, "-q", "-c", "-3"], input=data, capture_output=True,
                          check=True).stdout


def cpio_newc(files):
    """A minimal SVR4 "newc" cpio archive (Python has no cpio writer)."""
    out = b""
    entries = list(files) + [("TRAILER!!!", b"")]
    for i, (name, data) in enumerate(entries):
        nm = name.encode() + b"\0"
        mode = 0o100644 if data or name != "TRAILER!!!" else 0
        fields = [i + 1, mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(nm), 0]
        hdr = b"070701" + b"".join(b"%08X" % f for f in fields) + nm
        out += hdr + b"\0" * (-len(hdr) % 4) + data + b"\0" * (-len(data) % 4)
    return out


def gzip_bomb(size):
    """A .tar.gz holding one file of `size` zero bytes, built in chunks."""
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", compresslevel=9, mtime=0) as g:
        g.write(raw_header("bomb.bin", size))
        chunk = b"\0" * (1 << 20)
        left = size
        while left > 0:
            n = min(left, len(chunk))
            g.write(chunk[:n])
            left -= n
        g.write(b"\0" * (-size % 512) + b"\0" * 1024)
    return buf.getvalue()


def gnu_sparse_liar(realsize, off=None):
    """An old-GNU sparse entry: 512 stored bytes claiming a huge real size
    (the stored block at `off`, by default the end: a leading hole)."""
    if off is None:
        off = realsize - 512
    extra = {
        386: b"%011o\0" % off, 398: b"%011o\0" % 512,   # sparse[0]: offset, numbytes
        483: b"%011o\0" % realsize,                     # realsize
    }
    h = raw_header("sparse.bin", 512, b"S", gnu=True, extra=extra)
    return raw_tar(h, b"S" * 512)


# ---- the cases --------------------------------------------------------------

def refused(name, data, entry, rule, args=()):
    return Case(name, data, True, entry=entry, rule=rule, args=list(args))


def benign(name, data, tree, links=(), args=()):
    return Case(name, data, False, tree=tree, links=list(links), args=list(args))


def hostile_cases():
    long_evil = "a" * 120 + "/../../evil.txt"
    cases = [
        # path rules
        refused("absolute-name", tar_bytes([F("/tmp/pc-evil", b"x")]), "/tmp/pc-evil", "absolute"),
        refused("dotdot-leading", tar_bytes([F("../evil", b"x")]), "../evil", '".."'),
        refused("dotdot-middle", tar_bytes([F("a/../../evil", b"x")]), "a/../../evil", '".."'),
        refused("dotdot-trailing", tar_bytes([D("a"), F("a/..", b"x")]), "a/..", '".."'),
        refused("dotdot-after-dot", raw_tar(*raw_file("./../evil", b"x")), "./../evil", '".."'),
        refused("empty-name", raw_tar(*raw_file("", b"x")), "", "empty path"),
        refused("name-longer-than-path-max",
                tar_bytes([F("d/" * 2100 + "f", b"x")]), "d/d/d/d/d", "PATH_MAX"),
        # under PATH_MAX, but no room left for the store's directories above it (fuzz_untar)
        refused("name-near-path-max",
                tar_bytes([F("d/" * 1800 + "f", b"x")]), "d/d/d/d/d", "3072 bytes"),
        refused("root-replaced-by-file", raw_tar(*raw_file(".", b"x")), ".",
                "replaces the root directory"),
        # special files
        refused("char-device", tar_bytes([special("dev/null2", "chr")]), "dev/null2", "device"),
        refused("block-device", tar_bytes([special("sda", "blk")]), "sda", "device"),
        refused("fifo", tar_bytes([F("ok.txt", b"ok"), special("pipe", "fifo")]), "pipe", "FIFO"),
        # symlinks
        refused("symlink-absolute", tar_bytes([L("passwd", "/etc/passwd")]), "passwd", "absolute symlink"),
        refused("symlink-escape", tar_bytes([L("up", "../outside")]), "up", "outside the root"),
        refused("symlink-escape-deep", tar_bytes([D("a"), D("a/b"), L("a/b/l", "../../../x")]),
                "a/b/l", "outside the root"),
        refused("symlink-chain-two-steps",
                tar_bytes([D("d"), L("d/up", ".."), L("e", "d/up/..")]), "e", "outside the root"),
        refused("symlink-chain-via-root-link",
                tar_bytes([L("x", "."), L("y", "x/../z")]), "y", "outside the root"),
        refused("symlink-dotdot-through-missing",
                tar_bytes([L("a", "later/../../x")]), "a", '".."'),
        refused("write-through-symlink-dir",
                tar_bytes([D("sub"), L("link", "sub"), F("link/file", b"x")]), "link/file",
                "through a symlink"),
        refused("file-over-symlink",
                tar_bytes([F("target", b"t"), L("l", "target"), F("l", b"x")]), "l",
                "overwrite a symlink"),
        refused("file-replaced-by-symlink",
                tar_bytes([F("f", b"data"), L("f", "other")]), "f", "replaces a regular file"),
        refused("dir-replaced-by-file", tar_bytes([D("d"), F("d", b"x")]), "d", "replaces a directory"),
        refused("dir-replaced-by-symlink", tar_bytes([D("d"), L("d", ".")]), "d", "replaces a directory"),
        refused("file-under-file", tar_bytes([F("f", b"x"), F("f/g", b"y")]), "f/g", "not a directory"),
        # hardlinks
        refused("hardlink-nonexistent", tar_bytes([H("h", "nothere")]), "h", "not an earlier regular file"),
        refused("hardlink-to-later", tar_bytes([H("h", "later"), F("later", b"x")]), "h",
                "not an earlier regular file"),
        refused("hardlink-outside", tar_bytes([H("h", "../etc/passwd")]), "h", '".."'),
        refused("hardlink-absolute", tar_bytes([H("h", "/etc/passwd")]), "h", "absolute"),
        refused("hardlink-to-dir", tar_bytes([D("d"), H("h", "d")]), "h", "not an earlier regular file"),
        refused("hardlink-to-symlink", tar_bytes([F("a", b"a"), L("l", "a"), H("h", "l")]), "h",
                "not an earlier regular file"),
        refused("hardlink-through-symlinked-dir",
                tar_bytes([D("d"), F("d/f", b"x"), L("l", "d"), H("h", "l/f")]), "h",
                "not an earlier regular file"),
        refused("symlink-loop", tar_bytes([L("l1", "l2"), L("l2", "l1"), L("l3", "l1/x")]), "l3",
                "more than 40 symlinks"),
        refused("hardlink-carrying-data-counts",
                _hardlink_with_data(), "hl", "limit of 3000 bytes in total", args=["--max-size", "3000"]),
        # pax and GNU long-name tricks
        refused("pax-path-overrides-benign-name",
                raw_tar(*raw_pax({"path": "../pax-evil.txt"}), *raw_file("benign.txt", b"x")),
                "../pax-evil.txt", '".."'),
        refused("pax-linkpath-overrides-target",
                raw_tar(*raw_pax({"linkpath": "../../etc"}),
                        raw_header("l", 0, b"2", linkname="ok")),
                "l", "outside the root"),
        refused("pax-long-name-with-dotdot",
                tar_bytes([F("x" * 150 + "/../../../evil", b"x")]), "x" * 20, '".."'),
        refused("gnu-longname-dotdot", tar_bytes([F(long_evil, b"x")], tarfile.GNU_FORMAT),
                "a" * 20, '".."'),
        refused("gnu-longlink-symlink-target",
                tar_bytes([L("l", "../" * 50 + "etc/passwd")], tarfile.GNU_FORMAT), "l",
                "outside the root"),
        refused("gnu-longlink-absolute-target",
                tar_bytes([L("l", "/" + "x" * 150)], tarfile.GNU_FORMAT), "l", "absolute symlink"),
        # sizes and limits
        refused("gzip-bomb", gzip_bomb(110 << 20), "bomb.bin", "limit of 104857600 bytes"),
        refused("gnu-sparse-lying-size", gnu_sparse_liar(1 << 30), "sparse.bin", "limit of"),
        refused("gnu-sparse-trailing-hole", gnu_sparse_liar(1 << 30, off=0), "sparse.bin", "limit of"),
        refused("pax-size-larger-than-data",
                raw_tar(*raw_pax({"size": str(200 << 20)}), raw_header("big", 10), b"y" * 10),
                "big", None),
        refused("header-size-smaller-than-data",
                raw_tar(raw_header("small", 10), b"z" * 4096), "small", "damaged"),
        refused("entries-limit", tar_bytes([F(f"f{i}", b"x") for i in range(50)]), "f10",
                "limit of 10 entries", args=["--max-entries", "10"]),
        refused("file-size-limit", tar_bytes([F("small", b"s"), F("big", b"B" * 5000)]), "big",
                "limit of 1000 bytes for one file", args=["--max-file-size", "1000"]),
        refused("total-size-limit", tar_bytes([F(f"f{i}", b"T" * 3000) for i in range(5)]), "f3",
                "limit of 10000 bytes in total", args=["--max-size", "10000"]),
        # damaged and foreign input
        refused("truncated-header", tar_bytes([F("a", b"a" * 600), F("b", b"b")])[:1100], None, None),
        refused("truncated-data", tar_bytes([F("a", b"a" * 5000)])[:2048], "a", None),
        refused("truncated-gzip", gz(tar_bytes([F("a", os.urandom(20000))]))[:6000], None, None),
        refused("not-an-archive", b"this is not an archive at all\n" * 40, None, "not a valid tar"),
        refused("empty-input", b"", None, "empty"),
        refused("zip-input", _zip(), None, "zip"),
        refused("cpio-input", cpio_newc([("hello.txt", b"hello\n")]), None, "cpio"),
        refused("7z-magic", b"7z\xbc\xaf\x27\x1c" + b"\0" * 600, None, "7z"),
        refused("ar-input", b"!<arch>\n" + b"x" * 600, None, "ar"),
        refused("bzip2-tar", bz2.compress(tar_bytes([F("a", b"a")])), None, "bzip2"),
        refused("xz-tar", lzma.compress(tar_bytes([F("a", b"a")])), None, "xz"),
        refused("gzip-of-gzip-tar", gz(gz(tar_bytes([F("a", b"a")]))), None, "nested"),
        refused("gzip-zip", gz(_zip()), None, "not a valid tar"),
    ]
    return cases


def _hardlink_with_data():
    """pax lets a hardlink entry carry data: it is skipped, never written
    through the link, but counted against the limits."""
    return raw_tar(*raw_file("f", b"x"), *raw_pax({"size": "5000"}),
                   raw_header("hl", 5000, b"1", linkname="f"), b"H" * 5000)


def _zip():
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("hello.txt", "hello\n")
        z.writestr("../evil.txt", "evil\n")
    return buf.getvalue()


def flux_style():
    """As source-controller writes: root ".", no trailing slashes, 0750/0600/0700."""
    blocks = [raw_header(".", 0, b"5", mode=0o750),
              raw_header("deploy", 0, b"5", mode=0o750),
              *raw_file("deploy/app.yaml", b"kind: App\n", 0o600),
              *raw_file("Pulumi.yaml", b"name: demo\nruntime: yaml\n", 0o600),
              *raw_file("run.sh", b"#!/bin/sh\necho hi\n", 0o700)]
    tree = {"": ("d", 0o750), "deploy": ("d", 0o750),
            "deploy/app.yaml": ("f", b"kind: App\n", 0o600),
            "Pulumi.yaml": ("f", b"name: demo\nruntime: yaml\n", 0o600),
            "run.sh": ("f", b"#!/bin/sh\necho hi\n", 0o700)}
    return raw_tar(*blocks), tree


def benign_cases():
    simple = [D("src"), F("src/main.py", b"print('hi')\n", 0o644), F("README", b"readme\n", 0o640),
              F("bin/tool", b"\x7fELF" + bytes(range(256)) * 20, 0o755)]
    simple_tree = {"src": ("d", 0o755), "src/main.py": ("f", b"print('hi')\n", 0o644),
                   "README": ("f", b"readme\n", 0o640), "bin": ("d", 0o750),
                   "bin/tool": ("f", b"\x7fELF" + bytes(range(256)) * 20, 0o755)}
    flux_data, flux_tree = flux_style()
    long_dir = "very-long-directory-name-" * 6
    nonascii = "donn\u00e9es/\u00fcber.txt"
    cases = [
        benign("plain-tar", tar_bytes(simple, tarfile.USTAR_FORMAT), simple_tree),
        benign("gzip-tar", gz(tar_bytes(simple)), simple_tree),
        benign("zstd-tar", zstd(tar_bytes(simple)), simple_tree),
        benign("flux-style", gz(flux_data), flux_tree),
        benign("pax-long-and-non-ascii-names",
               tar_bytes([F(long_dir + "/f.txt", b"long"), F(nonascii, b"utf8", 0o600)]),
               {long_dir: ("d", 0o750), long_dir + "/f.txt": ("f", b"long", 0o644),
                "donn\u00e9es": ("d", 0o750), nonascii: ("f", b"utf8", 0o600)}),
        benign("gnu-long-name-and-link",
               tar_bytes([F(long_dir + "/g.txt", b"gnu"), L("short", long_dir + "/g.txt")],
                         tarfile.GNU_FORMAT),
               {long_dir: ("d", 0o750), long_dir + "/g.txt": ("f", b"gnu", 0o644),
                "short": ("l", long_dir + "/g.txt")}),
        benign("hardlink", tar_bytes([F("a", b"shared", 0o640), D("d"), H("d/b", "a")]),
               {"a": ("f", b"shared", 0o640), "d": ("d", 0o755), "d/b": ("f", b"shared", 0o640)},
               links=[("a", "d/b")]),
        benign("in-root-symlinks",
               tar_bytes([D("d"), F("d/x", b"x"), L("d/up", ".."), L("d/self", "."),
                          L("top", "d/x"), L("via", "d/up/d/x"), L("dangling", "d/not-yet"),
                          L("d/sib", "../d/x")]),
               {"d": ("d", 0o755), "d/x": ("f", b"x", 0o644), "d/up": ("l", ".."),
                "d/self": ("l", "."), "top": ("l", "d/x"), "via": ("l", "d/up/d/x"),
                "dangling": ("l", "d/not-yet"), "d/sib": ("l", "../d/x")}),
        benign("setuid-setgid-sticky-dropped",
               tar_bytes([F("suid", b"s", 0o4755), F("sgid", b"g", 0o2750), D("tmp", 0o1777),
                          D("locked", 0o000), F("locked-file", b"l", 0o000)]),
               {"suid": ("f", b"s", 0o755), "sgid": ("f", b"g", 0o750), "tmp": ("d", 0o777),
                "locked": ("d", 0o700), "locked-file": ("f", b"l", 0o000)}),
        benign("dot-slash-names",
               raw_tar(raw_header("./", 0, b"5", mode=0o755), raw_header("./a/", 0, b"5", mode=0o755),
                       *raw_file("./a/b", b"b"), *raw_file("a//c", b"c"), *raw_file("./a/./d", b"d")),
               {"": ("d", 0o755), "a": ("d", 0o755), "a/b": ("f", b"b", 0o644),
                "a/c": ("f", b"c", 0o644), "a/d": ("f", b"d", 0o644)}),
        benign("later-file-replaces-earlier",
               tar_bytes([F("f", b"first version", 0o600), F("f", b"second", 0o644)]),
               {"f": ("f", b"second", 0o644)}),
        benign("replace-hardlinked-file-keeps-other-name",
               tar_bytes([F("a", b"original"), H("b", "a"), F("b", b"replaced")]),
               {"a": ("f", b"original", 0o644), "b": ("f", b"replaced", 0o644)}),
        benign("directory-listed-twice", tar_bytes([D("d", 0o755), F("d/f", b"f"), D("d", 0o750)]),
               {"d": ("d", 0o750), "d/f": ("f", b"f", 0o644)}),
        benign("empty-tar", b"\0" * 10240, {}),
        benign("hardlink-carrying-data", _hardlink_with_data(),
               {"f": ("f", b"x", 0o644), "hl": ("f", b"x", 0o644)}, links=[("f", "hl")]),
        benign("at-the-limits", tar_bytes([F("a", b"A" * 6000), F("b", b"B" * 4000)]),
               {"a": ("f", b"A" * 6000, 0o644), "b": ("f", b"B" * 4000, 0o644)},
               args=["--max-size", "10000", "--max-entries", "2", "--max-file-size", "6000"]),
    ]
    return cases


def all_cases():
    return hostile_cases() + benign_cases()


def main(argv):
    if len(argv) != 2:
        print(f"usage: {argv[0]} OUTDIR", file=sys.stderr)
        return 2
    out = argv[1]
    os.makedirs(out, exist_ok=True)
    manifest = []
    for c in all_cases():
        with open(os.path.join(out, c.name), "wb") as f:
            f.write(c.data)
        manifest.append({"name": c.name, "refuse": c.refuse, "entry": c.entry, "rule": c.rule,
                         "args": c.args})
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    print(f"{len(manifest)} cases written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
