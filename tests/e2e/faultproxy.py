"""A small TCP proxy on 127.0.0.1 for injecting network faults in front of a
real server (the real kube-apiserver, whose own behaviour has no fault knobs).

It forwards raw bytes (TLS passes through untouched, so the server's
certificate must name 127.0.0.1) and offers three faults:

    proxy.drop_all()        close every open connection, both directions, now
                            (a client sees its watch/stream end abruptly)
    proxy.pause()           stop moving bytes: open connections hang, new ones are
    proxy.resume()          accepted but get nothing until resume()
    proxy.set_latency(s)    delay every forwarded chunk by s seconds (0 to stop)
    proxy.refuse(True)      close new connections as soon as they are accepted

plus counters for tests (`accepted`, `open_connections()`), `wait_connections(n)`
and `clear()` to remove every fault.  Use as a context manager or call close().
"""
import socket
import threading
import time

CHUNK = 65536
POLL = 0.1  # how often a blocked pump looks at the fault state


class FaultProxy:
    def __init__(self, target_host, target_port, listen_host="127.0.0.1", listen_port=0):
        self.target = (target_host, target_port)
        self.lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.lsock.bind((listen_host, listen_port))
        self.lsock.listen(128)
        self.lsock.settimeout(POLL)
        self.host, self.port = self.lsock.getsockname()[:2]
        self.cond = threading.Condition()
        self.paused = False
        self.latency = 0.0
        self.refusing = False
        self.closed = False
        self.accepted = 0
        self.conns = set()  # (client socket, upstream socket) pairs still open
        self.thread = threading.Thread(target=self._accept_loop, name="faultproxy", daemon=True)
        self.thread.start()

    @property
    def address(self):
        return f"{self.host}:{self.port}"

    # -- fault knobs --------------------------------------------------------------------

    def drop_all(self):
        """Closes every open connection; returns how many were dropped."""
        with self.cond:
            conns = list(self.conns)
            self.conns.clear()
        for pair in conns:
            for s in pair:
                _close(s)
        return len(conns)

    def pause(self):
        with self.cond:
            self.paused = True

    def resume(self):
        with self.cond:
            self.paused = False
            self.cond.notify_all()

    def set_latency(self, seconds):
        with self.cond:
            self.latency = float(seconds)

    def refuse(self, on=True):
        with self.cond:
            self.refusing = bool(on)

    def clear(self):
        """Removes every fault (connections already dropped stay dropped)."""
        with self.cond:
            self.latency = 0.0
            self.refusing = False
        self.resume()

    def open_connections(self):
        with self.cond:
            return len(self.conns)

    def wait_connections(self, n, timeout=30):
        """Waits until at least n connections are open through the proxy."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while len(self.conns) < n:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"faultproxy: {len(self.conns)} open connections, "
                                         f"waited {timeout}s for {n}")
                self.cond.wait(min(left, POLL))
            return len(self.conns)

    def close(self):
        with self.cond:
            self.closed = True
            self.paused = False
            self.cond.notify_all()
        self.thread.join(timeout=5)
        _close(self.lsock)
        self.drop_all()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- forwarding ---------------------------------------------------------------------

    def _accept_loop(self):
        while True:
            with self.cond:
                if self.closed:
                    return
            try:
                client, _ = self.lsock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            with self.cond:
                self.accepted += 1
                refusing = self.refusing
            if refusing:
                _close(client)
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=10)
            except OSError:
                _close(client)  # the server is down: the client sees a reset/EOF
                continue
            pair = (client, upstream)
            with self.cond:
                self.conns.add(pair)
                self.cond.notify_all()
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(pair, src, dst), daemon=True).start()

    def _wait_while_paused(self):
        """Blocks while paused; returns the latency to apply, or None when closing."""
        with self.cond:
            while self.paused and not self.closed:
                self.cond.wait(POLL)
            return None if self.closed else self.latency

    def _pump(self, pair, src, dst):
        try:
            # inside the try: drop_all() may have closed the pair before this thread ran
            src.settimeout(POLL)
            while True:
                if self._wait_while_paused() is None:
                    break
                try:
                    data = src.recv(CHUNK)
                except socket.timeout:
                    continue
                if not data:
                    break
                latency = self._wait_while_paused()
                if latency is None:
                    break
                if latency > 0:
                    time.sleep(latency)  # the injected delay itself, not a wait for a condition
                dst.sendall(data)
        except OSError:
            pass
        finally:
            with self.cond:
                self.conns.discard(pair)
                self.cond.notify_all()
            for s in pair:
                _close(s)


def _close(s):
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        s.close()
    except OSError:
        pass
