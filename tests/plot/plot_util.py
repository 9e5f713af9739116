# SPDX-License-Identifier: Apache-2.0
# What the plot tests share: the tool's path, the fixtures, running the tool, reading a PNG.
import os
import struct
import subprocess
import sys
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
TOOL = os.path.join(HERE, "..", "..", "tools", "plot", "gpushare-plot")
FIXTURES = os.path.join(HERE, "fixtures")


def fixture(name):
    return os.path.join(FIXTURES, name)


def plot(*args, env=None):
    """Runs the tool with this interpreter; returns the CompletedProcess (text output)."""
    return subprocess.run([sys.executable, TOOL, *args], capture_output=True, text=True,
                          timeout=300, env=env)


def read_png(path):
    """(width, height, size in bytes, {tEXt key: value}) of a PNG; AssertionError if not one."""
    with open(path, "rb") as f:
        data = f.read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path}: no PNG signature"
    pos, chunks, text = 8, [], {}
    while pos + 8 <= len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        crc = struct.unpack(">I", data[pos + 8 + length:pos + 12 + length])[0]
        assert zlib.crc32(kind + body) == crc, f"{path}: bad CRC in chunk {kind!r}"
        chunks.append(kind)
        if kind == b"tEXt":
            key, _, value = body.partition(b"\0")
            text[key.decode("latin-1")] = value.decode("latin-1")
        pos += 12 + length
    assert chunks[0] == b"IHDR" and chunks[-1] == b"IEND", f"{path}: chunks {chunks}"
    width, height = struct.unpack(">II", data[16:24])
    return width, height, len(data), text
