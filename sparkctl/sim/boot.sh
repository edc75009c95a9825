#!/bin/sh
# PID 1 of a simulated Spark's fresh pid/mount/uts/ipc/time namespaces (started by sparkctl/sim/supervisor.py,
# already inside the instance's netns). Builds the test host's filesystem view, then execs systemd as PID 1.
# Environment: SIM_ROOTFS (lowerdir), SIM_INSTANCE (run/<name>: upper/ work/ merged/), SIM_CGROUP (host path of
# the instance's cgroup v2 dir), SIM_RO_BINDS ("SRC:DST ..." host dirs shared read-only).
set -eu
M="$SIM_INSTANCE/merged"

# the instance's root: the shared pristine rootfs below, its own upper dir above (kept across reboots)
mount -t overlay overlay -o "lowerdir=$SIM_ROOTFS,upperdir=$SIM_INSTANCE/upper,workdir=$SIM_INSTANCE/work" "$M"

# API filesystems, private to this mount namespace (they vanish with it; nothing to unmount on the host)
mount -t proc -o nosuid,nodev,noexec proc "$M/proc"
mount --bind "$M/proc/sys" "$M/proc/sys"
mount -o remount,bind,ro "$M/proc/sys"                    # no host sysctl may change from inside...
mount --bind "$M/proc/sys/net" "$M/proc/sys/net" && mount -o remount,bind,rw "$M/proc/sys/net" || true  # ...but its own netns's
# a boot id of its own for every boot (the kernel's is the VM's): journalctl -b, "did it reboot?" checks
cat /proc/sys/kernel/random/uuid > "$SIM_INSTANCE/boot_id"
mount --bind "$SIM_INSTANCE/boot_id" "$M/proc/sys/kernel/random/boot_id"
mount -o remount,bind,ro "$M/proc/sys/kernel/random/boot_id"
mount --bind "$M/proc/sysrq-trigger" "$M/proc/sysrq-trigger" && mount -o remount,bind,ro "$M/proc/sysrq-trigger" || true
mount -t sysfs -o ro,nosuid,nodev,noexec sysfs "$M/sys"   # shows this netns's interfaces
mount -t tmpfs -o mode=755,nosuid,nodev,size=256m tmpfs "$M/run"
chmod 1777 "$M/tmp"                                         # /tmp on the overlay (disk), as on bookworm: pip stages GBs there

# a private /dev: never the host's (a getty or console there would be the VM's real console)
mount -t tmpfs -o mode=755,nosuid,size=1m tmpfs "$M/dev"
for d in null zero full random urandom tty; do
  : > "$M/dev/$d"
  mount --bind "/dev/$d" "$M/dev/$d"
done
mkdir -p "$M/dev/pts" "$M/dev/shm"
mount -t devpts -o newinstance,ptmxmode=0666,mode=0620,gid=5 devpts "$M/dev/pts"
ln -s pts/ptmx "$M/dev/ptmx"
mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs "$M/dev/shm"
ln -s /proc/self/fd "$M/dev/fd"
ln -s /proc/self/fd/0 "$M/dev/stdin"
ln -s /proc/self/fd/1 "$M/dev/stdout"
ln -s /proc/self/fd/2 "$M/dev/stderr"

for spec in ${SIM_RO_BINDS:-}; do
  src=${spec%%:*}; dst=$M${spec#*:}
  mkdir -p "$dst"
  mount --bind "$src" "$dst"
  mount -o remount,bind,ro "$dst"
done

ulimit -n 1048576 2>/dev/null || true   # best effort: systemd clamps every unit's LimitNOFILE to its own hard limit

# its own cgroup v2 subtree, then a cgroup namespace rooted there: systemd sees a clean hierarchy
echo 0 > "$SIM_CGROUP/cgroup.procs"
export M
exec unshare --cgroup /bin/sh -c '
  mount -t cgroup2 -o nosuid,nodev,noexec cgroup2 "$M/sys/fs/cgroup"
  exec env -i container=sparkctl-sim PATH=/usr/sbin:/usr/bin:/sbin:/bin TERM=dumb LANG=C.UTF-8 \
    chroot "$M" /lib/systemd/systemd --system'
