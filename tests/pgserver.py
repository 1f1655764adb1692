"""A real PostgreSQL server for tests: a cluster initdb'd in a temporary directory,
started on loopback on a free port as an unprivileged user (PostgreSQL refuses to run as
root: as root the cluster belongs to ``nobody``), stopped and removed after.

    with PostgresServer() as pg:
        url = pg.url          # postgresql://r3@127.0.0.1:PORT/r3

``binaries()`` finds initdb and pg_ctl (PATH, or Debian's /usr/lib/postgresql/*/bin).
"""

import glob
import os
import shutil
import socket
import subprocess
import tempfile

USER = "nobody"  # who runs the server when the tests run as root


def binaries():
    """The directory holding initdb, pg_ctl and postgres, or None."""
    found = shutil.which("initdb")
    dirs = [os.path.dirname(os.path.realpath(found))] if found else []
    dirs += sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)
    for d in dirs:
        if all(os.access(os.path.join(d, b), os.X_OK) for b in ("initdb", "pg_ctl", "postgres")):
            return d
    return None


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PostgresServer:
    def __init__(self, bindir=None):
        self.bindir = bindir or binaries()
        self.root = tempfile.mkdtemp(prefix="r3-pg-")  # under /tmp: nobody can reach it there
        self.data = os.path.join(self.root, "data")
        self.port = free_port()
        self.url = "postgresql://r3@127.0.0.1:%d/r3" % self.port

    def _run(self, *argv):
        argv = [os.path.join(self.bindir, argv[0])] + list(argv[1:])
        if os.geteuid() == 0:
            argv = ["runuser", "-u", USER, "--"] + argv
        return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=True)

    def __enter__(self):
        if os.geteuid() == 0:
            shutil.chown(self.root, USER)
        self._run("initdb", "-D", self.data, "-U", "r3", "-A", "trust", "--no-sync", "-E", "UTF8")
        self._run(
            "pg_ctl",
            "-D",
            self.data,
            "-l",
            os.path.join(self.root, "log"),
            "-w",
            "start",
            "-o",
            "-h 127.0.0.1 -p %d -k %s -c fsync=off" % (self.port, self.root),
        )
        import psycopg2

        conn = psycopg2.connect(host="127.0.0.1", port=self.port, user="r3", dbname="postgres")
        conn.autocommit = True
        conn.cursor().execute("CREATE DATABASE r3")
        conn.close()
        return self

    def __exit__(self, *exc):
        try:
            self._run("pg_ctl", "-D", self.data, "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
