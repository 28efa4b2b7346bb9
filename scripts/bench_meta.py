#!/usr/bin/env python3
"""Helpers for scripts/bench.py, run as separate processes so the timing
covers one program's syscalls.

  bench_meta.py DIR N            create, stat, rename and delete N files in DIR
  bench_meta.py --random-writes FILE K   K random 4 KiB writes into FILE
"""
import os
import random
import sys


def storm(root, n):
    d = os.path.join(root, "storm")
    os.mkdir(d)
    data = b"x" * 100
    for i in range(n):
        fd = os.open(os.path.join(d, f"f{i}"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        os.write(fd, data)
        os.close(fd)
    for i in range(n):
        os.stat(os.path.join(d, f"f{i}"))
    for i in range(n):
        os.rename(os.path.join(d, f"f{i}"), os.path.join(d, f"g{i}"))
    for i in range(n):
        os.unlink(os.path.join(d, f"g{i}"))
    os.rmdir(d)


def random_writes(path, k):
    rng = random.Random(4)
    size = os.path.getsize(path)
    blocks = size // 4096
    buf = os.urandom(4096)
    fd = os.open(path, os.O_RDWR)
    for _ in range(k):
        os.pwrite(fd, buf, rng.randrange(blocks) * 4096)
    os.close(fd)


if __name__ == "__main__":
    if sys.argv[1] == "--random-writes":
        random_writes(sys.argv[2], int(sys.argv[3]))
    else:
        storm(sys.argv[1], int(sys.argv[2]))
