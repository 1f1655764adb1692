"""Plain-text tables, number formatting and progress lines for everything the CLI prints."""

import os
import sys
import threading


def stdout_to_devnull():
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def say(line):
    """Print a progress line; if the reader of our output went away, the work goes on."""
    try:
        print(line, flush=True)
    except BrokenPipeError:
        stdout_to_devnull()


def warn(line):
    """A line the user must see even when stdout carries JSON: on stderr."""
    print(line, file=sys.stderr, flush=True)


def table(headers, rows, align=None):
    """Render rows as an aligned text table (numbers right-aligned)."""
    rows = [["" if v is None else str(v) for v in r] for r in rows]
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    align = align or ["l" if i == 0 or not rows or not _numeric(rows[0][i]) else "r" for i in range(len(headers))]

    def fmt(cells):
        return "  ".join(c.rjust(w) if a == "r" else c.ljust(w) for c, w, a in zip(cells, widths, align)).rstrip()

    lines = [fmt(headers), fmt(["-" * w for w in widths])]
    lines += [fmt(r) for r in rows]
    return "\n".join(lines)


def _numeric(text):
    try:
        float(text.rstrip("%xsB").replace("KiB", "").replace("MiB", "").replace("ms", ""))
        return True
    except ValueError:
        return False


def seconds(value):
    if value is None:
        return "-"
    if value < 1e-6:
        return "%.0fns" % (value * 1e9)
    if value < 1e-3:
        return "%.1fus" % (value * 1e6)
    if value < 1:
        return "%.2fms" % (value * 1e3)
    return "%.2fs" % value


def size(nbytes):
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return "%.1f%s" % (nbytes / scale, unit)
    return "%dB" % nbytes


def percent(fraction):
    return "-" if fraction is None else "%.1f%%" % (100 * fraction)


class ProgressBar:
    """One progress line per task, on stderr: redrawn in place on a terminal, else
    printed at every tenth of the way (logs stay short)."""

    def __init__(self, stream=None, width=24):
        self.stream = stream or sys.stderr
        self.width = width
        self.tty = self.stream.isatty()
        self._last = {}
        self._lock = threading.Lock()  # kernels searched at once report from their own threads

    def update(self, key, done, total, text=""):
        with self._lock:
            self._update(key, done, total, text)

    def _update(self, key, done, total, text):
        filled = int(self.width * done / total) if total else self.width
        line = "%s [%s%s] %d/%d %s" % (key, "#" * filled, "." * (self.width - filled), done, total, text)
        try:
            if self.tty:
                self.stream.write("\r\033[K" + line + ("\n" if done >= total else ""))
            else:
                step = (10 * done) // total if total else 10
                if self._last.get(key) == step and done < total:
                    return
                self._last[key] = step
                self.stream.write(line + "\n")
            self.stream.flush()
        except BrokenPipeError:
            pass
