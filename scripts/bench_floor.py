"""The do-nothing FUSE floor of the benchmark suite: libfuse's
`example/passthrough_hp`, built from Debian's source package of the libfuse
the machine runs, so every figure has the floor beside it (the `hp` column,
`passthrough_hp --single {src} {mnt}`: one thread over /dev/fuse, as opfs
runs on 2 CPUs).

The build uses only the package registries:
- the source: `apt-get source --download-only fuse3=VERSION` with a private
  source list (`deb-src` of the distribution) and private apt lists and
  cache under the build directory, so the machine's apt configuration is
  left as it was;
- the headers: `apt-get install libfuse3-dev` when `pkg-config fuse3` does
  not find them;
- the compiler: g++ (`apt-get install g++` when missing).

The binary is cached at CARGO_TARGET_DIR/floor/passthrough_hp-VERSION/ and
rebuilt only when missing. VERSION is pinned (PIN); it is the libfuse of
Debian 12 (bookworm), whose 3.14 `passthrough_hp` has `--single` and
daemonizes unless `--foreground`.
"""

import os
import shutil
import subprocess

PIN = "3.14.0-4"
SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"


class FloorError(Exception):
    pass


def _run(cmd, cwd=None, env=None):
    r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True)
    if r.returncode != 0:
        raise FloorError(f"{' '.join(cmd)} failed ({r.returncode}): "
                         f"{r.stderr.decode(errors='replace')[-1500:]}")
    return r.stdout.decode()


def _apt_install(pkgs, log):
    log(f"bench: installing {' '.join(pkgs)} (apt-get) to build passthrough_hp")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    _run(["apt-get", "install", "-y", "-qq", *pkgs], env=env)


def binary(target_dir, version=PIN):
    return os.path.join(target_dir, "floor", f"passthrough_hp-{version}", "passthrough_hp")


def ensure(target_dir, log, version=PIN):
    """The path of passthrough_hp, built first when missing. Raises
    FloorError naming the step that failed."""
    out = os.path.abspath(binary(target_dir, version))
    if os.access(out, os.X_OK):
        return out
    d = os.path.dirname(out)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(os.path.join(d, "lists", "partial"))
    os.makedirs(os.path.join(d, "cache", "archives", "partial"))
    with open(os.path.join(d, "sources.list"), "w") as f:
        f.write(f"deb-src {MIRROR} {SUITE} main\n")
    apt = ["-o", f"Dir::Etc::SourceList={d}/sources.list", "-o", "Dir::Etc::SourceParts=/dev/null",
           "-o", f"Dir::State::Lists={d}/lists", "-o", f"Dir::Cache={d}/cache",
           "-o", "APT::Sandbox::User=root"]
    log(f"bench: building passthrough_hp from Debian's fuse3 {version} source package into {d}")
    _run(["apt-get", *apt, "update", "-qq"])
    _run(["apt-get", *apt, "source", "--download-only", f"fuse3={version}"], cwd=d)
    upstream = version.split("-")[0]
    _run(["dpkg-source", "-x", f"fuse3_{version}.dsc", "src"], cwd=d)
    if shutil.which("g++") is None:
        _apt_install(["g++"], log)
    if subprocess.run(["pkg-config", "--exists", "fuse3"]).returncode != 0:
        _apt_install(["pkg-config", "libfuse3-dev"], log)
    flags = _run(["pkg-config", "--cflags", "--libs", "fuse3"]).split()
    have = _run(["pkg-config", "--modversion", "fuse3"]).strip()
    if have != upstream:
        log(f"bench: note: libfuse3-dev is {have}, the source is {upstream}")
    # What libfuse's own build (meson's config.h) defines on Linux: without
    # them the example answers utimensat, fallocate and the xattr requests
    # with EOPNOTSUPP/ENOSYS (an untar fails on `Cannot utime`).
    have_flags = ["-DHAVE_UTIMENSAT", "-DHAVE_POSIX_FALLOCATE", "-DHAVE_SETXATTR"]
    _run(["g++", "-std=c++17", "-O2", *have_flags, "-o", out, "src/example/passthrough_hp.cc", *flags,
          "-lpthread"], cwd=d)
    for junk in ("src", "lists", "cache"):
        shutil.rmtree(os.path.join(d, junk), ignore_errors=True)
    return out
