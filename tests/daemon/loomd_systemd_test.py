#!/usr/bin/python3
"""loomd under a fake systemd: READY=1 once it serves, WATCHDOG=1 while it runs, STOPPING=1 on
SIGTERM, then exit 0.

    /usr/bin/python3 tests/daemon/loomd_systemd_test.py build/bin/loomd

The test binds a unix datagram socket and passes it to loomd in NOTIFY_SOCKET, with WATCHDOG_USEC
(systemd's protocol for a Type=notify service with WatchdogSec=).
"""

import os
import signal
import socket
import subprocess
import sys
import tempfile


def main(loomd):
    with tempfile.TemporaryDirectory(prefix="loomd-systemd-") as directory:
        path = os.path.join(directory, "notify")
        notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        notify.bind(path)
        notify.settimeout(30)
        environment = dict(os.environ, NOTIFY_SOCKET=path, WATCHDOG_USEC="400000")
        process = subprocess.Popen(
            [loomd, "--listen", "127.0.0.1:0", "--node-name", "systemd-test"],
            env=environment, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            ready = notify.recv(4096).decode()
            assert ready.startswith("READY=1\nSTATUS=serving on 127.0.0.1:"), ready
            assert notify.recv(4096).decode() == "WATCHDOG=1"
            assert notify.recv(4096).decode() == "WATCHDOG=1"
            process.send_signal(signal.SIGTERM)
            message = notify.recv(4096).decode()
            while message == "WATCHDOG=1":
                message = notify.recv(4096).decode()
            assert message == "STOPPING=1\nSTATUS=shutting down", message
            code = process.wait(60)
            output = process.stdout.read()
            assert code == 0, f"loomd exited with {code}:\n{output}"
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    print("loomd_systemd_test.py: READY=1, WATCHDOG=1, STOPPING=1, exit 0")


if __name__ == "__main__":
    main(sys.argv[1])
