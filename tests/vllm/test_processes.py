"""vLLM's process boundaries between real processes, the plugin loaded by vLLM's own loader.

Each process is a fresh interpreter (multiprocessing ``spawn``) that runs
``vllm.plugins.load_general_plugins()`` as vLLM's processes do (:mod:`tests.vllm.peers`).
With the plugin on, every value is compared strictly and no process calls pickle while
it handles multimodal values; with ``VLLM_PLUGINS=""`` (the switch off) the same flow
runs on vLLM's own codecs, and the count of pickle calls shows what the plugin removed
(which is also what proves the count can fail).
"""

from __future__ import annotations

import multiprocessing
import queue
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.vllm import peers

SWITCH = {"on": None, "off": ""}
"""``VLLM_PLUGINS`` for each state of the switch (None: unset, every plugin loads)."""

_SPAWN = multiprocessing.get_context("spawn")


def _next(results: Any) -> dict[str, Any]:
    try:
        report: dict[str, Any] = results.get(timeout=240)
    except queue.Empty:
        pytest.fail("no report from the processes after 240 s")
    assert "error" not in report, f"{report['role']} failed:\n{report['error']}"
    return report


@pytest.fixture
def processes() -> Iterator[list[Any]]:
    """The test's processes: whatever the outcome, none outlives it."""
    started: list[Any] = []
    yield started
    for process in started:
        process.join(timeout=30)
        if process.exitcode is None:
            process.kill()
            process.join()


def _start(processes: list[Any], target: Any, *args: Any) -> None:
    process = _SPAWN.Process(target=target, args=args, daemon=True)
    process.start()
    processes.append(process)


def _finish(processes: list[Any]) -> None:
    for process in processes:
        process.join(timeout=60)
        assert process.exitcode == 0, f"{process.name} exited with {process.exitcode}"


@pytest.fixture
def switch(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    state: str = request.param
    monkeypatch.delenv("MMCODEC_VLLM_SHM", raising=False)
    # vLLM's from_hf_inputs orders an item's keys by string hashes: one hash seed for all
    # processes, so that an item rebuilt from a seed has the order the sender's had.
    monkeypatch.setenv("PYTHONHASHSEED", "0")
    plugins = SWITCH[state]
    if plugins is None:
        monkeypatch.delenv("VLLM_PLUGINS", raising=False)
    else:
        monkeypatch.setenv("VLLM_PLUGINS", plugins)
    return state


@pytest.mark.parametrize("switch", ["on"], indirect=True)  # off: in the shm test below
def test_engine_core_request_over_zmq_ipc(
    switch: str, tmp_path: Path, processes: list[Any]
) -> None:
    address = f"ipc://{tmp_path}/engine-core-input"
    results = _SPAWN.Queue()
    _start(processes, peers.request_receiver, address, 7, results)
    assert _next(results).get("bound")
    _start(processes, peers.request_sender, address, 7, results)
    reports = {r["role"]: r for r in (_next(results), _next(results))}
    _finish(processes)
    sent, received = reports["sender"], reports["receiver"]
    assert received["items"] == 5
    assert sent["installed"] == received["installed"] == "view"
    assert (sent["encoder"], received["decoder"]) == (
        "MmcodecMsgpackEncoder",
        "MmcodecMsgpackDecoder",
    )
    assert received["frames"] > 3  # vLLM's header, the descriptor, mmcodec's frames
    for report in (sent, received):
        assert (report["pickle calls"], report["multimodal pickled"]) == (0, 0), report


@pytest.mark.parametrize("switch", list(SWITCH), indirect=True)
def test_shm_sender_cache_with_two_reader_processes(
    switch: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, processes: list[Any]
) -> None:
    monkeypatch.setenv("VLLM_OBJECT_STORAGE_SHM_BUFFER_NAME", f"mmcodec-test-{tmp_path.name}")
    addresses = [f"ipc://{tmp_path}/cache-reader{rank}" for rank in range(2)]
    results = _SPAWN.Queue()
    lock = _SPAWN.Lock()
    for address in addresses:
        _start(processes, peers.shm_reader, address, 11, lock, 2, results)
    assert [_next(results).get("bound") for _ in addresses] == [True, True]
    _start(processes, peers.shm_writer, addresses, 11, results)
    assert _next(results).get("created")
    reports = [_next(results) for _ in range(3)]
    _finish(processes)
    by_role = {role: [r for r in reports if r["role"] == role] for role in ("writer", "reader")}
    assert [r["items"] for r in by_role["reader"]] == [5, 5]
    if switch == "on":
        assert {r["installed"] for r in reports} == {"view"}
        assert {r["storage"] for r in reports} == {"ZeroCopyShmObjectStorage"}
        for report in reports:
            assert (report["pickle calls"], report["multimodal pickled"]) == (0, 0), report
    else:  # the switch off: vLLM's codecs and storage throughout
        assert {r["installed"] for r in reports} == {None}
        assert {r["storage"] for r in reports} == {"SingleWriterShmObjectStorage"}
        # vLLM's MsgpackSerde: pickle.dumps per put, pickle.loads per get.
        assert by_role["writer"][0]["pickle calls"] == 5
        assert [r["pickle calls"] for r in by_role["reader"]] == [5, 5]
