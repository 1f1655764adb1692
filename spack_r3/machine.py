"""What this machine's caches hold: what record and replay size their work by."""

import os


def cache_bytes(level=None):
    """The size of this machine's level-``level`` data cache (default: the largest, the
    last level), one core's view, from sysfs; None when it says nothing."""
    sizes = {}
    base = "/sys/devices/system/cpu/cpu0/cache"
    for entry in os.listdir(base) if os.path.isdir(base) else ():
        try:
            with open(os.path.join(base, entry, "size")) as f:
                text = f.read().strip()
            with open(os.path.join(base, entry, "level")) as f:
                lvl = int(f.read())
            with open(os.path.join(base, entry, "type")) as f:
                if f.read().strip() == "Instruction":
                    continue
        except (OSError, ValueError):
            continue
        unit = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        if text.rstrip("KMG").isdigit():
            sizes[lvl] = int(text.rstrip("KMG")) * unit
    if not sizes:
        return None
    return sizes.get(level) if level is not None else sizes[max(sizes)]
