import os
import secrets
import shutil
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))


@pytest.fixture(params=["bound", "copied"])
def variables(request, monkeypatch):
    """How graphs keep their modules' tensors (Note [Graphs sharing modules]): "bound", the
    module tensors themselves (host memory in the plan's layout), or "copied", a copy in the
    graph's runtime synced when another user needs it: the path of ZeRO's shards and of GPU
    tensors, forced here on the CPU."""
    if request.param == "copied":
        from oneflowlike.nn import graph_sharing

        monkeypatch.setattr(graph_sharing, "bindable_pieces", lambda graph, names: {})
    return request.param


# Two "hosts" for multi-host tests (test_multiprocess.py, test_gpt_example.py).
class _Host:
    def __init__(self, namespace, device, address):
        self.namespace = namespace
        self.device = device
        self.address = address


def _ip(*args):
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=20)


@pytest.fixture
def two_hosts(request):
    """Two network namespaces, 10.213.0.1 and 10.213.0.2 on the two ends of a veth pair.

    Skips when namespaces cannot be made here (not root); removes everything it made, even
    when the test or this set-up fails.
    """
    if shutil.which("ip") is None:
        pytest.skip("needs the `ip` command (iproute2) for network namespaces")
    suffix = secrets.token_hex(3)
    hosts = [_Host(f"ofl-test-{suffix}-{i}", f"oflv{suffix}{i}", f"10.213.0.{i + 1}")
             for i in range(2)]
    made = []

    def remove():
        for host in hosts:  # a veth end left outside a namespace (set-up failed midway)
            if _ip("link", "show", host.device).returncode == 0:
                _ip("link", "del", host.device)
        for namespace in reversed(made):
            _ip("netns", "del", namespace)
    request.addfinalizer(remove)

    for host in hosts:
        result = _ip("netns", "add", host.namespace)
        if result.returncode != 0:
            pytest.skip(f"cannot make network namespaces: `ip netns add {host.namespace}` "
                        f"failed: {result.stderr.strip()}")
        made.append(host.namespace)
    result = _ip("link", "add", hosts[0].device, "type", "veth", "peer", "name", hosts[1].device)
    if result.returncode != 0:
        pytest.skip(f"cannot make a veth pair: {result.stderr.strip()}")
    for host in hosts:
        for args in (["link", "set", host.device, "netns", host.namespace],
                     ["-n", host.namespace, "addr", "add", f"{host.address}/24", "dev",
                      host.device],
                     ["-n", host.namespace, "link", "set", host.device, "up"],
                     ["-n", host.namespace, "link", "set", "lo", "up"]):
            result = _ip(*args)
            assert result.returncode == 0, f"ip {' '.join(args)}: {result.stderr}"
    return hosts
