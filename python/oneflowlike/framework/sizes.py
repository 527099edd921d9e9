"""Byte sizes written as people write them: "6GiB", "512MiB", "1.5GB", "100000"."""

import re

_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kib": 1 << 10, "kb": 10 ** 3, "m": 1 << 20,
          "mib": 1 << 20, "mb": 10 ** 6, "g": 1 << 30, "gib": 1 << 30, "gb": 10 ** 9,
          "t": 1 << 40, "tib": 1 << 40, "tb": 10 ** 12}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_bytes(text, what):
    """``text`` as a number of bytes (KiB/MiB/GiB and bare K/M/G are powers of 1024, KB/MB/GB
    of 1000); raises ValueError naming ``what`` (a flag or a setting) when it is not one."""
    if isinstance(text, int) and not isinstance(text, bool):
        value = text
    else:
        match = _SIZE.match(str(text))
        unit = match.group(2).lower() if match else None
        if match is None or unit not in _UNITS:
            raise ValueError(f"{what} must be a size such as 6GiB, 512MiB, 1.5GB or a number of "
                             f"bytes. However, got {text!r}.")
        value = int(float(match.group(1)) * _UNITS[unit])
    if value <= 0:
        raise ValueError(f"{what} must be positive. However, got {text!r}.")
    return value


def parse_limit(text, what):
    """A memory limit (Note [Memory limit] in nn/graph_memory.py): ``text`` as parse_bytes
    reads it, or 0, meaning no limit, for None, "" and 0 (the launcher's --memory-per-rank,
    OFL_MEMORY_PER_RANK and set_memory_limit all read it here)."""
    if text is None or (isinstance(text, str) and text.strip() in ("", "0")):
        return 0
    if not isinstance(text, str) and text == 0:  # 0, 0.0, False
        return 0
    return parse_bytes(text.strip() if isinstance(text, str) else text, what)


def format_bytes(n):
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n} bytes"
