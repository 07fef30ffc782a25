"""`make package`'s check of the viewer as installed from the wheel with its `web` extra:
`convstore serve` starts, its pages and stylesheet come from the installed package, and it
stops on SIGTERM with exit 0. Standard library only; run by the packaged interpreter from
its venv's folder, next to the `store.db` the package check recorded into."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import urllib.request


def main() -> int:
    """Serve `store.db`, read the list, a transcript and the stylesheet, stop."""
    server = subprocess.Popen(
        ["bin/convstore", "--db", "store.db", "serve", "--listen", "127.0.0.1:0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        assert line.startswith("convstore viewer on http://"), line
        base = line.split()[3]
        listing = urllib.request.urlopen(base + "/", timeout=30).read().decode()
        conversation = re.search(r'href="(/c/[0-9a-f-]{36})"', listing)
        assert conversation, "the list page links no conversation"
        page = urllib.request.urlopen(base + conversation.group(1), timeout=30).read().decode()
        assert "chain verified" in page, "the transcript has no verify badge"
        style = urllib.request.urlopen(base + "/static/viewer.css", timeout=30)
        assert style.headers["content-type"].startswith("text/css")
        server.send_signal(signal.SIGTERM)
        code = server.wait(timeout=30)
        assert code == 0, f"serve exited {code}"
    finally:
        if server.poll() is None:
            server.kill()
    print(f"convstore serve: list, transcript and stylesheet served from the wheel ({base})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
