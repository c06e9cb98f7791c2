#!/usr/bin/env bash
# Install zarrfs: the binary in $PREFIX/bin, the mount.zarrfs helper link in /sbin (so that
# `mount -t zarrfs` and fstab lines of type zarrfs work), and the systemd unit zarrfs@.service.
#   sudo scripts/install.sh            # PREFIX=/usr/local
set -euo pipefail
cd "$(dirname "$0")/.."
prefix="${PREFIX:-/usr/local}"
cargo build --release --quiet
install -D -m 0755 target/release/zarrfs "$prefix/bin/zarrfs"
ln -sf "$prefix/bin/zarrfs" /sbin/mount.zarrfs
install -d /etc/systemd/system /etc/zarrfs
sed "s|^ExecStart=zarrfs |ExecStart=$prefix/bin/zarrfs |" systemd/zarrfs@.service > /etc/systemd/system/zarrfs@.service
if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then systemctl daemon-reload; fi
echo "installed $prefix/bin/zarrfs, /sbin/mount.zarrfs, /etc/systemd/system/zarrfs@.service"
