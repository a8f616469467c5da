"""Prerequisites of the network-namespace sshd test hosts (``tools/netns_hosts.sh``), checked once for every test
module that builds them: ``None`` when they can be made here, else the exact reason and the fix."""

from __future__ import annotations

import os
import shutil
import sys

__all__ = ["netns_skip_reason"]


def netns_skip_reason() -> str | None:
    if sys.platform != "linux":
        return f"network-namespace hosts need Linux, this is {sys.platform}"
    if os.geteuid() != 0:
        return "network-namespace sshd hosts need root (ip netns add, sshd); run the suite as root or in CI"
    for tool, fix in (("ip", "iproute2"), ("ssh", "openssh-client"), ("ssh-keygen", "openssh-client")):
        if shutil.which(tool) is None:
            return f"'{tool}' not found: apt-get install -y {fix}"
    if not os.access("/usr/sbin/sshd", os.X_OK):
        return "/usr/sbin/sshd not found: apt-get install -y openssh-server"
    return None
