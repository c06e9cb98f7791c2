#!/bin/sh
# mount(8)'s helper for `mount -t zarrfs` and fstab (the .rpm's; the .deb installs a link):
# zarrfs takes mount(8)'s form, SOURCE MOUNTPOINT [-o OPTIONS], itself.
exec /usr/bin/zarrfs "$@"
