"""Builds Flux-style artifacts for tests: a gzip tarball whose entries are
relative to the root, with a "." root entry, zeroed owners and times, as
source-controller writes them (reference/flux-oci.md §2.1)."""
import gzip
import hashlib
import io
import os
import tarfile


def flux_tarball(files, dirs=(), level=6):
    """files: {relative path: bytes or (bytes, mode)}; returns the .tar.gz bytes."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        def add_dir(name):
            ti = tarfile.TarInfo(name)
            ti.type = tarfile.DIRTYPE
            ti.mode = 0o750
            tar.addfile(ti)
        add_dir(".")
        seen = set()
        for d in dirs:
            add_dir(d)
            seen.add(d)
        for name in sorted(files):
            parent = os.path.dirname(name)
            parts = []
            while parent and parent not in seen:
                parts.append(parent)
                seen.add(parent)
                parent = os.path.dirname(parent)
            for p in reversed(parts):
                add_dir(p)
            content = files[name]
            mode = 0o600
            if isinstance(content, tuple):
                content, mode = content
            ti = tarfile.TarInfo(name)
            ti.size = len(content)
            ti.mode = mode
            tar.addfile(ti, io.BytesIO(content))
    return gzip.compress(raw.getvalue(), compresslevel=level, mtime=0)


def sha256(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


def tree(root):
    """{relative path: (bytes or None for dirs, mode)} of a directory, not following links."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            rel = os.path.relpath(p, root)
            st = os.lstat(p)
            if os.path.islink(p):
                out[rel] = ("link:" + os.readlink(p), 0)
            elif os.path.isdir(p):
                out[rel] = (None, st.st_mode & 0o7777)
            else:
                with open(p, "rb") as f:
                    out[rel] = (f.read(), st.st_mode & 0o7777)
    return out
