"""The documented way to register in every worker: ``WorkerSetup`` as a job's
``worker_process_setup_hook``, in a job of its own (a second driver, another process,
on the same cluster)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from mmcodec.generated import multimodal as mm
from mmcodec.integrations.ray import WorkerSetup
from tests.ray.conftest import ROOT, RayCluster

JOB = """
import sys

import ray

from mmcodec.generated import multimodal as mm
from mmcodec.integrations.ray import WorkerSetup
from mmcodec.payloads import PAYLOADS
from tests.ray._store import payloads_in_store

ray.init(
    address=sys.argv[1],
    log_to_driver=False,
    runtime_env={{
        "worker_process_setup_hook": WorkerSetup((mm,)),
        "env_vars": {{"PYTHONPATH": {root!r}}},
    }},
)


@ray.remote
def build(seed):
    return PAYLOADS["llava"](seed)


# This driver registered nothing: receiving needs no registration, and the values
# decode as views of the store only because the worker sent them as frames.
got = ray.get(build.remote(21))
print(type(got).__name__, got == PAYLOADS["llava"](21), payloads_in_store(got))
ray.shutdown()
"""


def test_worker_setup_registers_in_every_worker_of_a_job(
    cluster: RayCluster, tmp_path: Path
) -> None:
    script = tmp_path / "job.py"
    script.write_text(JOB.format(root=str(ROOT)), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RAY_USAGE_STATS_ENABLED": "0"}
    done = subprocess.run(
        [sys.executable, str(script), cluster.address],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split("\n")[-2] == "MultiModalKwargsItems True True"


def test_worker_setup_names_itself_and_registers() -> None:
    hook = WorkerSetup((mm,))
    assert hook.__name__ == "mmcodec_register_multimodal"
    hook()  # registering again in this process is harmless
