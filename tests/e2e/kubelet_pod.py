"""One Pod on the test kubelet's node (tests/e2e/kubelet.py): PodRun materialises
its volumes, resolves its environment, rewrites mount paths, runs the container's
command as a process group and writes the Pod's status; ContainerLog keeps the
container's stdout and stderr line by line; LogServer is the node's HTTPS endpoint
the API server proxies pods/log to.
"""
import datetime
import os
import pathlib
import re
import shutil
import signal
import ssl
import subprocess
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from kubelet_base import (DEFAULT_TERMINATION_PATH, FALLBACK_BYTES, FALLBACK_LINES,
                          FAULT_LABEL, MESSAGE_LIMIT, KubeletError, _die_with_parent,
                          condition, expand_refs, now, parse_time)




# -- the container log ----------------------------------------------------------------

class ContainerLog:
    """stdout and stderr of one container, line by line with their arrival times (the
    CRI log file a real kubelet reads), written by two reader threads."""

    def __init__(self, path):
        self.path = path
        self.lines = []              # (time, stream, text without newline)
        self.cond = threading.Condition()
        self.closed = 0
        self.file = open(path, "w")

    def reader(self, pipe, stream):
        def run():
            for raw in iter(pipe.readline, b""):
                text = raw.decode(errors="replace").rstrip("\n")
                stamp = datetime.datetime.now(datetime.timezone.utc)
                with self.cond:
                    self.lines.append((stamp, stream, text))
                    self.file.write(f"{stamp.isoformat()} {stream} F {text}\n")
                    self.file.flush()
                    self.cond.notify_all()
            pipe.close()
            with self.cond:
                self.closed += 1
                self.cond.notify_all()
        t = threading.Thread(target=run, daemon=True, name=f"log-{stream}")
        t.start()
        return t

    def done(self):
        return self.closed >= 2

    def text(self):
        with self.cond:
            return "".join(t + "\n" for _, _, t in self.lines)

    def select(self, params):
        """The log as GET containerLogs answers it: sinceSeconds/sinceTime, tailLines,
        timestamps, then limitBytes (which may cut the last line)."""
        with self.cond:
            lines = list(self.lines)
        if params.get("sinceSeconds"):
            cut = datetime.datetime.now(datetime.timezone.utc) - \
                datetime.timedelta(seconds=int(params["sinceSeconds"]))
            lines = [line for line in lines if line[0] >= cut]
        elif params.get("sinceTime"):
            cut = datetime.datetime.fromtimestamp(parse_time(params["sinceTime"]),
                                                  datetime.timezone.utc)
            lines = [line for line in lines if line[0] >= cut]
        if params.get("tailLines") not in (None, ""):
            n = int(params["tailLines"])
            lines = lines[-n:] if n > 0 else []
        stamps = params.get("timestamps") in ("true", "1")
        out = "".join((s.strftime("%Y-%m-%dT%H:%M:%S.%fZ") + " " if stamps else "") + t + "\n"
                      for s, _, t in lines).encode()
        if params.get("limitBytes"):
            out = out[:int(params["limitBytes"])]
        return out

    def close(self):
        with self.cond:
            self.file.close()


class LogServer:
    """The kubelet's HTTPS endpoint: GET /containerLogs/{ns}/{pod}/{container}."""

    def __init__(self, kubelet, workdir):
        self.kubelet = kubelet
        cert, key = self._certificate(workdir)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert, key)
        handler = self._handler()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.httpd.socket = ctx.wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever,
                                       kwargs={"poll_interval": 0.1}, daemon=True,
                                       name="kubelet-logs")

    @staticmethod
    def _certificate(workdir):
        from kubeapi import tlsgen
        d = pathlib.Path(workdir) / "kubelet-pki"
        d.mkdir(parents=True, exist_ok=True)
        tlsgen.make_ca(str(d))
        return tlsgen.make_server_cert(str(d))

    def _handler(self):
        kubelet = self.kubelet

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, fmt, *args):
                pass

            def do_GET(self):
                url = urlsplit(self.path)
                parts = [p for p in url.path.split("/") if p]
                params = {k: v[-1] for k, v in parse_qs(url.query).items()}
                if len(parts) != 4 or parts[0] != "containerLogs":
                    return self._reply(404, b"404 page not found\n")
                code, body = kubelet.container_log(parts[1], parts[2], parts[3], params)
                follow = params.get("follow") in ("true", "1") and code == 200
                if not follow:
                    return self._reply(code, body)
                self._follow(kubelet.log_of(parts[1], parts[2]), params)

            def _reply(self, code, body):
                self.send_response(code)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _follow(self, log, params):
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                with log.cond:
                    first = log.select(params)
                    sent = len(log.lines)
                if first:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(first), first))
                while True:
                    with log.cond:
                        while len(log.lines) == sent and not log.done():
                            log.cond.wait(1.0)
                        new, sent = log.lines[sent:], len(log.lines)
                        finished = log.done() and not new
                    data = "".join(t + "\n" for _, _, t in new).encode()
                    if data:
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                        self.wfile.flush()
                    if finished:
                        break
                self.wfile.write(b"0\r\n\r\n")
        return Handler

    def start(self):
        self.thread.start()

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()


# -- one pod --------------------------------------------------------------------------

class PodRun:
    """One Pod on this node: its directory, its volumes, its process, its log."""

    def __init__(self, kubelet, job_state, pod):
        self.kubelet = kubelet
        self.job = job_state
        self.pod = pod
        self.ns = pod["metadata"]["namespace"]
        self.name = pod["metadata"]["name"]
        self.uid = pod["metadata"]["uid"]
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix=f"{self.name}-", dir=kubelet.pods_dir))
        self.container = pod["spec"]["containers"][0]
        self.log = ContainerLog(self.dir / "container.log")
        self.proc = None
        self.phase = "Pending"
        self.waiting = None
        self.started_at = None
        self.kill_reason = None          # set when the process is being stopped
        self.release_event = threading.Event()
        self.terminate_event = threading.Event()
        self.wake = threading.Event()    # set by release, terminate and the process's end
        self.counted = False
        # a hold the pod's own label asked for ends when the label is taken off the pod
        self.held_by_label = FAULT_LABEL in (pod["metadata"].get("labels") or {})
        self.grace = None
        self.done = threading.Event()
        self.mounts = []                 # (mountPath, host dir), longest first
        self.thread = threading.Thread(target=self._run, daemon=True, name=f"pod-{self.name}")

    # -- status ---------------------------------------------------------------------

    def write_status(self, status):
        if not self.kubelet.stop_event.is_set():     # a stopped kubelet writes nothing
            self.kubelet.patch_pod_status(self.ns, self.name, status)

    def _container_status(self, state, ready=False):
        image = self.container.get("image", "")
        return {"name": self.container["name"], "state": state, "ready": ready,
                "started": "running" in state, "restartCount": 0, "image": image,
                "imageID": f"{image}@sha256:{'0' * 64}" if "running" in state or
                "terminated" in state else "",
                **({"containerID": f"testkubelet://{self.uid}"}
                   if "running" in state or "terminated" in state else {})}

    def _addresses(self):
        return {"hostIP": "127.0.0.1", "hostIPs": [{"ip": "127.0.0.1"}],
                "podIP": "127.0.0.1", "podIPs": [{"ip": "127.0.0.1"}]}

    def waiting_reason(self):
        """Why the container has not started (None once it has)."""
        if self.phase == "Pending":
            return self.waiting or "ContainerCreating"
        return None

    def _pending(self, reason, message):
        self.waiting = reason
        self.write_status({
            "phase": "Pending", "startTime": self.started_at or now(), **self._addresses(),
            "conditions": [condition("PodReadyToStartContainers", "True"),
                           condition("Initialized", "True"),
                           condition("Ready", "False", "ContainersNotReady",
                                     f"containers with unready status: "
                                     f"[{self.container['name']}]"),
                           condition("ContainersReady", "False", "ContainersNotReady",
                                     f"containers with unready status: "
                                     f"[{self.container['name']}]"),
                           condition("PodScheduled", "True")],
            "containerStatuses": [self._container_status(
                {"waiting": {"reason": reason, "message": message}})]})

    def _running(self):
        self.phase = "Running"
        self.write_status({
            "phase": "Running", "startTime": self.started_at, **self._addresses(),
            "conditions": [condition("PodReadyToStartContainers", "True"),
                           condition("Initialized", "True"), condition("Ready", "True"),
                           condition("ContainersReady", "True"),
                           condition("PodScheduled", "True")],
            "containerStatuses": [self._container_status(
                {"running": {"startedAt": self.started_at}}, ready=True)]})
        self.kubelet.pod_running(self)

    def _terminated(self, exit_code, message, reason=None, pod_reason=None, pod_message=None,
                    finished=None):
        ok = exit_code == 0 and pod_reason is None
        self.phase = "Succeeded" if ok else "Failed"
        term = {"exitCode": exit_code, "reason": reason or ("Completed" if ok else "Error"),
                "startedAt": self.started_at, "finishedAt": finished or now(),
                "containerID": f"testkubelet://{self.uid}"}
        if message:
            term["message"] = message
        status = {"phase": self.phase, "startTime": self.started_at or now(),
                  **self._addresses(),
                  "conditions": [condition("PodReadyToStartContainers", "False"),
                                 condition("Initialized", "True"),
                                 condition("Ready", "False", "PodCompleted"),
                                 condition("ContainersReady", "False", "PodCompleted"),
                                 condition("PodScheduled", "True")],
                  "containerStatuses": [self._container_status({"terminated": term})]}
        if pod_reason:
            status["reason"], status["message"] = pod_reason, pod_message
        self.write_status(status)

    # -- setup ----------------------------------------------------------------------

    def _resolve_env(self):
        """The container's environment: the image's, the service variables, then the
        pod's env and envFrom with valueFrom resolved through the API."""
        k = self.kubelet
        env = dict(k.image_env(self.container.get("image", "")))
        env["HOSTNAME"] = self.name
        env.setdefault("HOME", str(self.dir / "rootfs"))
        env.update(k.service_env())
        for src in self.container.get("envFrom") or []:
            prefix = src.get("prefix", "")
            if "secretRef" in src:
                data = k.secret_data(self.ns, src["secretRef"]["name"],
                                     src["secretRef"].get("optional"))
            else:
                data = k.config_map_data(self.ns, src["configMapRef"]["name"],
                                         src["configMapRef"].get("optional"))
            for key, value in (data or {}).items():
                env[prefix + key] = value.decode(errors="replace")
        for e in self.container.get("env") or []:
            if "valueFrom" not in e:
                env[e["name"]] = expand_refs(e.get("value", ""), env)
                continue
            value = self._value_from(e["valueFrom"])
            if value is not None:
                env[e["name"]] = value
        return env

    def _value_from(self, src):
        k = self.kubelet
        if "secretKeyRef" in src or "configMapKeyRef" in src:
            ref = src.get("secretKeyRef") or src.get("configMapKeyRef")
            kind = "secret" if "secretKeyRef" in src else "configmap"
            data = k.secret_data(self.ns, ref["name"], ref.get("optional")) \
                if kind == "secret" else \
                k.config_map_data(self.ns, ref["name"], ref.get("optional"))
            if data is None:
                return None
            if ref["key"] not in data:
                if ref.get("optional"):
                    return None
                raise KubeletError("CreateContainerConfigError",
                                   f"couldn't find key {ref['key']} in {kind.title()} "
                                   f"{self.ns}/{ref['name']}")
            return data[ref["key"]].decode(errors="replace")
        if "fieldRef" in src:
            return self._field(src["fieldRef"]["fieldPath"])
        if "resourceFieldRef" in src:
            res = src["resourceFieldRef"]["resource"]
            kind, _, name = res.partition(".")
            value = ((self.container.get("resources") or {}).get(kind) or {}).get(name)
            return str(value if value is not None else {"cpu": 2}.get(name, 0))
        raise KubeletError("CreateContainerConfigError", f"unsupported valueFrom {src}")

    def _field(self, path):
        m, spec = self.pod["metadata"], self.pod["spec"]
        simple = {"metadata.name": m["name"], "metadata.namespace": m["namespace"],
                  "metadata.uid": m["uid"], "spec.nodeName": spec.get("nodeName", ""),
                  "spec.serviceAccountName": spec.get("serviceAccountName", ""),
                  "status.hostIP": "127.0.0.1", "status.podIP": "127.0.0.1",
                  "status.hostIPs": "127.0.0.1", "status.podIPs": "127.0.0.1"}
        if path in simple:
            return simple[path]
        found = re.match(r"^metadata\.(labels|annotations)\['(.+)'\]$", path)
        if found:
            return (m.get(found.group(1)) or {}).get(found.group(2), "")
        if path in ("metadata.labels", "metadata.annotations"):
            items = m.get(path.split(".")[1]) or {}
            return "\n".join(f'{k}="{v}"' for k, v in sorted(items.items()))
        raise KubeletError("CreateContainerConfigError", f"unsupported fieldPath {path}")

    def _write_files(self, root, files, mode):
        root.mkdir(parents=True, exist_ok=True)
        for rel, (data, file_mode) in files.items():
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            os.chmod(path, file_mode if file_mode is not None else mode)

    @staticmethod
    def _pick(data, items, what, optional):
        """{path: (bytes, mode)} of a secret or configMap source (items or every key)."""
        if data is None:
            return {}
        if not items:
            return {key: (value, None) for key, value in data.items()}
        out = {}
        for it in items:
            if it["key"] not in data:
                if optional:
                    continue
                raise KubeletError("CreateContainerConfigError",
                                   f"couldn't find key {it['key']} in {what}")
            out[it["path"]] = (data[it["key"]], it.get("mode"))
        return out

    def _source_files(self, src):
        """{path: (bytes, mode)} of one projected source (or volume of that kind)."""
        k = self.kubelet
        if "secret" in src:
            s = src["secret"]
            name = s.get("secretName") or s.get("name")
            return self._pick(k.secret_data(self.ns, name, s.get("optional")), s.get("items"),
                              f"Secret {self.ns}/{name}", s.get("optional"))
        if "configMap" in src:
            s = src["configMap"]
            return self._pick(k.config_map_data(self.ns, s["name"], s.get("optional")),
                              s.get("items"), f"ConfigMap {self.ns}/{s['name']}",
                              s.get("optional"))
        if "serviceAccountToken" in src:
            s = src["serviceAccountToken"]
            token = k.request_token(self.ns, self.pod, s.get("audience"),
                                    s.get("expirationSeconds", 3600))
            return {s["path"]: (token.encode(), None)}
        if "downwardAPI" in src:
            out = {}
            for it in src["downwardAPI"].get("items") or []:
                if "fieldRef" not in it:
                    raise KubeletError("CreateContainerConfigError",
                                       f"unsupported downwardAPI item {it}")
                out[it["path"]] = (self._field(it["fieldRef"]["fieldPath"]).encode(),
                                   it.get("mode"))
            return out
        raise KubeletError("CreateContainerConfigError", f"unsupported volume source {src}")

    def _volumes(self):
        """Materialises every volume; returns {name: host dir}."""
        out = {}
        for v in self.pod["spec"].get("volumes") or []:
            root = self.dir / "volumes" / v["name"]
            out[v["name"]] = root
            if "emptyDir" in v:
                root.mkdir(parents=True)
                continue
            if "projected" in v:
                mode = v["projected"].get("defaultMode", 0o644)
                files = {}
                for src in v["projected"].get("sources") or []:
                    files.update(self._source_files(src))
            elif "secret" in v or "configMap" in v or "downwardAPI" in v:
                kind = next(x for x in ("secret", "configMap", "downwardAPI") if x in v)
                mode = v[kind].get("defaultMode", 0o644)
                files = self._source_files({kind: v[kind]})
            else:
                raise KubeletError("CreateContainerConfigError",
                                   f"volume {v['name']}: only secret, configMap, projected, "
                                   "downwardAPI and emptyDir are materialised")
            self._write_files(root, files, mode)
        return out

    def _mount(self, volumes):
        mounts = []
        for m in self.container.get("volumeMounts") or []:
            host = volumes.get(m["name"])
            if host is None:
                raise KubeletError("CreateContainerConfigError",
                                   f"volume {m['name']} of mount {m['mountPath']} not found")
            if m.get("subPath"):
                host = host / m["subPath"]
                host.mkdir(parents=True, exist_ok=True)
            mounts.append((m["mountPath"].rstrip("/") or "/", str(host)))
        self.mounts = sorted(mounts, key=lambda x: -len(x[0]))

    def rewrite(self, value):
        """value with a leading mount path replaced by its directory on this host."""
        for path, host in self.mounts:
            if value == path or value.startswith(path + "/"):
                return host + value[len(path):]
        return value

    def _termination_path(self):
        path = self.container.get("terminationMessagePath") or DEFAULT_TERMINATION_PATH
        host = self.rewrite(path)
        if host == path:         # not on a volume: the kubelet's own file, bind-mounted
            host = str(self.dir / "termination-log")
            self.mounts.append((path, host))
            self.mounts.sort(key=lambda x: -len(x[0]))
        pathlib.Path(host).parent.mkdir(parents=True, exist_ok=True)
        return host

    def _argv(self, env):
        c = self.container
        image = self.kubelet.image(c.get("image", ""))
        command = list(c.get("command") or image.get("entrypoint") or [])
        args = list(c.get("args") if c.get("args") is not None else
                    ([] if c.get("command") else image.get("cmd") or []))
        argv = [expand_refs(a, env) for a in command + args]
        if not argv:
            raise KubeletError("CreateContainerError", "no command specified")
        argv = [self.rewrite(a) for a in argv]
        argv[0] = self.kubelet.map_command(argv[0])
        return argv

    # -- the run --------------------------------------------------------------------

    def start(self):
        self.thread.start()

    def _run(self):
        try:
            self._lifecycle()
        except Exception as e:              # never leave a pod half-way without a trace
            self.kubelet.note(f"pod {self.ns}/{self.name}: {e!r}")
            if self.phase not in ("Succeeded", "Failed"):
                try:
                    self._terminated(128, None, "StartError")
                except Exception:
                    pass
                self.kubelet.pod_finished(self)
        finally:
            self.log.close()
            self.done.set()

    def _wait_start_conditions(self):
        """Waits for the pod's env and volumes to be possible (a missing Secret keeps it
        Pending with CreateContainerConfigError, as a kubelet retries); returns the
        environment, or None when the pod is being deleted first."""
        while True:
            try:
                env = self._resolve_env()
                self._mount(self._volumes())
                return env
            except KubeletError as e:
                self._pending(e.reason, e.message)
                if self.terminate_event.wait(1.0):
                    return None
                shutil.rmtree(self.dir / "volumes", ignore_errors=True)

    def _lifecycle(self):
        fault = self.kubelet.fault_of(self.job.job, self.pod)
        self.started_at = now()
        if fault == "image-pull":
            image = self.container.get("image", "")
            self._pending("ErrImagePull", f'failed to pull and unpack image "{image}": '
                          "failed to resolve reference: not found")
            self.terminate_event.wait()
            return self._stopped_before_start()
        env = self._wait_start_conditions()
        if env is None:
            return self._stopped_before_start()
        termination = self._termination_path()
        argv = self._argv(env)
        env = {k: self.rewrite(v) for k, v in env.items()}
        cwd = self.container.get("workingDir")
        cwd = self.rewrite(cwd) if cwd else str(self.dir / "rootfs")
        pathlib.Path(cwd).mkdir(parents=True, exist_ok=True)
        pathlib.Path(env["HOME"]).mkdir(parents=True, exist_ok=True)
        self._running()
        if fault == "hold":
            while not self.release_event.is_set() and not self.terminate_event.is_set():
                self.wake.wait()
                self.wake.clear()
            if self.terminate_event.is_set():
                return self._stopped_before_start(exit_code=137, running=True)
        try:
            self.proc = subprocess.Popen(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL,
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                         start_new_session=True,
                                         preexec_fn=_die_with_parent)
        except OSError as e:
            self._terminated(128, f"failed to start: {e}", "StartError")
            return self.kubelet.pod_finished(self)
        readers = [self.log.reader(self.proc.stdout, "stdout"),
                   self.log.reader(self.proc.stderr, "stderr")]
        code = self._wait_process()
        for r in readers:
            r.join(10)
        self._finish(code, termination)

    def _wait_process(self):
        """Waits for the process; a deletion or deadline stops it: SIGTERM to the process
        group, SIGKILL after the grace period.  Returns the exit code (128+signal)."""
        deadline = self.pod["spec"].get("activeDeadlineSeconds")
        deadline_at = parse_time(self.started_at) + deadline if deadline else None
        proc = self.proc
        threading.Thread(target=lambda: (proc.wait(), self.wake.set()), daemon=True,
                         name=f"wait-{self.name}").start()
        while proc.poll() is None:
            if self.terminate_event.is_set():
                break
            if deadline_at is not None and time.time() >= deadline_at:
                self.kill_reason = "DeadlineExceeded"
                self.grace = 0
                break
            self.wake.wait(None if deadline_at is None else max(0, deadline_at - time.time()))
            self.wake.clear()
        if proc.poll() is not None:
            return self._code(proc.returncode)
        self._signal(signal.SIGTERM)
        try:
            return self._code(self.proc.wait(self.grace if self.grace is not None else 30))
        except subprocess.TimeoutExpired:
            self._signal(signal.SIGKILL)
            return self._code(self.proc.wait())

    @staticmethod
    def _code(returncode):
        return 128 - returncode if returncode < 0 else returncode

    def _signal(self, sig):
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:
            pass

    def _finish(self, code, termination):
        message = self._message(termination, code)
        if self.kill_reason == "DeadlineExceeded":
            self._terminated(code, message, pod_reason="DeadlineExceeded",
                             pod_message="Pod was active on the node longer than the "
                                         "specified deadline")
        else:
            self._terminated(code, message)
        self.kubelet.pod_finished(self)

    def _message(self, termination, code):
        try:
            with open(termination, "rb") as f:
                data = f.read(MESSAGE_LIMIT)
        except OSError:
            data = b""
        policy = self.container.get("terminationMessagePolicy", "File")
        if not data and code != 0 and policy == "FallbackToLogsOnError":
            lines = self.log.text().splitlines(keepends=True)[-FALLBACK_LINES:]
            data = "".join(lines).encode()[-FALLBACK_BYTES:]
        return data.decode(errors="replace")

    def _stopped_before_start(self, exit_code=None, running=False):
        """The pod is deleted before its process ran (a fault held it)."""
        if running:
            self._terminated(exit_code or 137, None)
        self.kubelet.pod_finished(self)

    # -- from the outside -----------------------------------------------------------

    def terminate(self, grace, reason=None):
        """Stops the pod: its process gets SIGTERM, SIGKILL after grace seconds."""
        if self.terminate_event.is_set():
            return
        self.grace = grace
        self.kill_reason = self.kill_reason or reason
        self.terminate_event.set()
        self.wake.set()

    def release(self):
        self.release_event.set()
        self.wake.set()

    def cleanup(self):
        shutil.rmtree(self.dir, ignore_errors=True)
