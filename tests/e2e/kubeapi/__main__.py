"""Command line: PYTHONPATH=tests/e2e /usr/bin/python3 -m kubeapi --state-dir DIR [options]."""
import argparse
import os
import signal
import sys

from .app import Emulator


def main():
    p = argparse.ArgumentParser(prog="kubeapi", description="Kubernetes API-server emulator "
                                "for tests (see docs/testing.md)")
    p.add_argument("--state-dir", required=True, help="PKI, tokens, kubeconfig, saved state")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0, help="0 picks a free port")
    p.add_argument("--token-file", help="bearer tokens, one a line (default STATE/tokens)")
    p.add_argument("--minor", type=int, default=32, help="Kubernetes minor version reported")
    p.add_argument("--history", type=int, default=10000,
                   help="watch events kept; older resourceVersions get 410 Expired")
    p.add_argument("--bookmark-interval", type=float, default=60.0)
    p.add_argument("--watch-list", choices=["auto", "on", "off"], default="auto",
                   help="serve sendInitialEvents (the WatchList gate); off answers 422; auto "
                   "follows the gate's default for --minor (on in 1.32 and 1.34+)")
    p.add_argument("--discovery", choices=["aggregated", "legacy"], default="aggregated",
                   help="answer /api and /apis in the aggregated format when asked (as 1.30+ "
                   "servers do), or only in the legacy one")
    p.add_argument("--keep-watch-history", action="store_true",
                   help="after a restart, watches may resume from before it (a real "
                   "apiserver's watch cache starts empty and answers 410)")
    p.add_argument("--verbose", action="store_true")
    args = p.parse_args()
    emu = Emulator(args.state_dir, host=args.host, port=args.port, token_file=args.token_file,
                   minor=args.minor, history=args.history, verbose=args.verbose,
                   keep_watch_history=args.keep_watch_history)
    emu.settings.bookmark_interval = args.bookmark_interval
    emu.settings.aggregated_discovery = args.discovery == "aggregated"
    if args.watch_list == "auto":
        emu.settings.watch_list = args.minor == 32 or args.minor >= 34
    else:
        emu.settings.watch_list = args.watch_list == "on"
    signal.signal(signal.SIGTERM, lambda *_: emu.request_stop())
    signal.signal(signal.SIGINT, lambda *_: emu.request_stop())
    if args.verbose:
        sys.stderr.write(f"kubeapi: serving {emu.url} (state {args.state_dir})\n")
    emu.run()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
