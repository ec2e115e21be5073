"""One real two-node Ray cluster on this machine for every test in tests/ray.

Ray's ``cluster_utils.Cluster`` starts a head node and a second node, each with its own
raylet and object store (so objects cross stores as between machines), one CPU each
(this VM has two), small stores and no dashboard. The job's worker setup hook registers
the codec and counts tensor pickling in every worker; the driver (this process) does the
same. Everything is shut down after the package, and the fixture fails if any process
of the cluster outlives it.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import ray
import ray.util
from ray.cluster_utils import Cluster
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from mmcodec.generated import multimodal as mm
from mmcodec.integrations.ray import register, registrable_types
from tests.ray._actors import Verifier
from tests.ray._hooks import DIRECTORY_VARIABLE, install_counter, reductions

ROOT = Path(__file__).resolve().parents[2]
STORE_BYTES = 768 << 20
"""Per node: room for the 16-image request (151 MB) several times over, so no object is ever
spilled or allocated outside the store file (the tests locate tensors in its mapping)."""


@dataclass(frozen=True)
class RayCluster:
    address: str
    head_node: str
    second_node: str
    counters: Path
    """Where every process of the cluster records its tensor reductions."""


def _processes_of(session_dir: str) -> list[int]:
    """Processes whose command line names the cluster's session directory."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if session_dir.encode() in (proc / "cmdline").read_bytes():
                    found.append(int(proc.name))
            except OSError:  # exited while we looked
                pass
    return found


@pytest.fixture(scope="package")
def cluster() -> Iterator[RayCluster]:
    counters = Path(tempfile.mkdtemp(prefix="mmcodec-ray-"))
    saved = os.environ.get("RAY_USAGE_STATS_ENABLED")
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"  # raylets inherit it: no usage report
    node_args: dict[str, Any] = {
        "num_cpus": 1,
        "object_store_memory": STORE_BYTES,
        "include_dashboard": False,
    }
    nodes = Cluster(initialize_head=True, head_node_args=node_args)
    head: Any = nodes.head_node  # typed None in Ray's source; a Node once started
    session_dir = head.get_session_dir_path()
    try:
        second = nodes.add_node(**node_args)
        nodes.wait_for_nodes()
        python_path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
        ray.init(
            address=nodes.address,
            log_to_driver=False,
            runtime_env={
                "worker_process_setup_hook": "tests.ray._hooks.setup",
                "env_vars": {DIRECTORY_VARIABLE: str(counters), "PYTHONPATH": python_path},
            },
        )
        undo_counter = install_counter(counters)
        register(mm)
        try:
            yield RayCluster(nodes.address, head.node_id, second.node_id, counters)
        finally:
            undo_counter()
            for cls in registrable_types(mm):
                ray.util.deregister_serializer(cls)
            ray.shutdown()
    finally:
        nodes.shutdown()  # type: ignore[no-untyped-call]
        if saved is None:
            del os.environ["RAY_USAGE_STATS_ENABLED"]
        else:
            os.environ["RAY_USAGE_STATS_ENABLED"] = saved
        shutil.rmtree(counters, ignore_errors=True)
    deadline = time.monotonic() + 30
    while (left := _processes_of(session_dir)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert left == [], f"Ray processes outlived the cluster: {left}"


@pytest.fixture
def no_tensor_pickled(cluster: RayCluster) -> Iterator[None]:
    """Fails the test if any process of the cluster reduced a tensor during it."""
    before = reductions(cluster.counters)
    yield
    assert reductions(cluster.counters) == before


def on_node(node: str) -> NodeAffinitySchedulingStrategy:
    """Scheduling that pins a task or actor to ``node`` (never elsewhere)."""
    return NodeAffinitySchedulingStrategy(node_id=node, soft=False)


@pytest.fixture(scope="package")
def verifiers(cluster: RayCluster) -> dict[str, Any]:
    """One Verifier actor pinned to each node: ``"head"`` (the driver's) and ``"second"``."""
    return {
        where: Verifier.options(scheduling_strategy=on_node(node)).remote()  # type: ignore[attr-defined]
        for where, node in (("head", cluster.head_node), ("second", cluster.second_node))
    }
