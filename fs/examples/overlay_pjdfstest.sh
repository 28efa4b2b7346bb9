#!/usr/bin/env bash
# pjdfstest 0.2.2 on the overlay example (`DirLower` + `NoHook`) over a
# non-empty lower dir, with the config scripts/conformance uses for the main
# mount, compared with a plain directory of the same filesystem. Three runs:
# the plain dir, the overlay's root (new names beside lower ones), and the
# lower dir `src` through the overlay (copied up at the first create, its
# lower files showing beside pjdfstest's), then the LINK_MAX check that
# stands in for link::link_count_max (skipped on FUSE by its own guard),
# then fsx 0.3.2 (the config of scripts/conformance) on a lower file of
# 777,777 random bytes: copied up at its first open for writing, then
# FSX_OPS operations [100000] of every kind fsx has (mmap writes included).
#
# Usage (as root, /dev/fuse, fusermount3, pjdfstest on PATH):
#   cargo build -p opfs-fs --example overlay
#   fs/examples/overlay_pjdfstest.sh target/debug/examples/overlay
# Prints the summary of each run; logs stay in the printed scratch dir.
set -euo pipefail
BIN=$(realpath "$1")
W=$(mktemp -d "${TMPDIR:-/tmp}/ovl-pjd.XXXXXX")
chmod 755 "$W" # pjdfstest's dummy users must reach the test dirs
mkdir -m 755 "$W"/{lower,upper,work,mnt,secondary,plain}
mkdir -p -m 755 "$W/lower/src/sub"
for i in $(seq 1 50); do echo "file $i" >"$W/lower/src/f$i"; done
echo deep >"$W/lower/src/sub/g"
ln -s src/f1 "$W/lower/link"
head -c 777777 /dev/urandom >"$W/lower/fsx.dat"
lower_state() { (cd "$W/lower" && find . -printf '%p %y %m %s %T@\n' | sort); }
lower_state >"$W/lower-before.txt"
cat >"$W/pjdfstest.toml" <<EOT
[features]
posix_fallocate = {}
utimensat = {}
utime_now = {}
rename_ctime = {}

[settings]
naptime = 0.01
allow_remount = false

[dummy_auth]
entries = [
  ["nobody", "nogroup"],
  ["daemon", "daemon"],
]
EOT
mount -t tmpfs -o size=1m,mode=755 ovl-pjd "$W/secondary"
"$BIN" "$W/lower" "$W/upper" "$W/work" "$W/mnt" --allow-other &
PID=$!
for _ in $(seq 50); do mountpoint -q "$W/mnt" && break; sleep 0.1; done
mountpoint -q "$W/mnt" || { echo "overlay did not mount" >&2; exit 1; }
run() {
    NO_COLOR=1 RUST_BACKTRACE=0 timeout -k 10 900 pjdfstest -c "$W/pjdfstest.toml" \
        -s "$W/secondary" -p "$1" >"$W/pjd-$2.log" 2>&1 || true
    printf '%-12s %s\n' "$2" "$(grep '^Summary' "$W/pjd-$2.log" || echo 'no summary')"
}
run "$W/plain" plain
run "$W/mnt" overlay
run "$W/mnt/src" overlay-src
perl -e '
    use Errno;
    my ($f, $max) = @ARGV;
    open(my $fh, ">", $f) or die "create $f: $!\n"; close $fh;
    for my $i (1 .. $max - 1) { link($f, "$f.$i") or die "link number $i: $!\n" }
    link($f, "$f.over") and die "link number $max succeeded, expected EMLINK\n";
    $!{EMLINK} or die "link number $max: $!, expected EMLINK\n";
    print "LINK_MAX     $max links to one file, then EMLINK\n";
' "$W/mnt/link-max" "$(getconf LINK_MAX "$W/plain")"
cat >"$W/fsx.toml" <<EOT
flen = 1048576
[opsize]
max = 131072
[weights]
close_open = 2
read = 10
write = 10
mapread = 10
mapwrite = 10
invalidate = 1
truncate = 4
fsync = 1
fdatasync = 1
posix_fallocate = 2
punch_hole = 2
sendfile = 2
posix_fadvise = 1
copy_file_range = 4
EOT
mkdir -p "$W/fsx-artifacts"
start=$(date +%s)
if timeout -k 10 1800 fsx -f "$W/fsx.toml" -S 7 -N "${FSX_OPS:-100000}" -P "$W/fsx-artifacts" \
    "$W/mnt/fsx.dat" >"$W/fsx.log" 2>&1; then
    echo "fsx          seed 7, ${FSX_OPS:-100000} operations, no miscompare ($(($(date +%s) - start))s)"
else
    tail -20 "$W/fsx.log"
    echo "fsx          FAILED (log $W/fsx.log)"
fi
fusermount3 -u "$W/mnt"
wait $PID || true
umount "$W/secondary"
if lower_state | diff "$W/lower-before.txt" - >/dev/null; then
    echo "lower        unchanged"
else
    echo "lower        CHANGED (see $W/lower-before.txt)"
fi
echo "logs: $W"
