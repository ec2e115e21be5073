"""Suite-wide collection: which tests are slow, and an order that any seed may shuffle.

``make test`` runs every test in a random order (pytest-randomly: ``-p no:randomly`` turns
it off, ``--randomly-seed=N`` replays the order a run printed at its end).
The order is shuffled by module, then by test, and then regrouped by package keeping
that shuffled order: a package-scoped fixture (the two-node Ray cluster of tests/ray)
starts once, whatever the seed, while packages, modules and tests still run in an order
of the seed's choosing.

``make test-fast`` leaves out what is marked ``slow``: the tests that install, start
processes or clusters, run mypy, or fuzz thousands of cases. They are listed here, with
the reason, rather than in each file, so the list is one place to read and keep.
"""

from __future__ import annotations

from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent

SLOW_MODULES = {
    "tools/test_pre_commit.py": "pre-commit installs mmcodec and torch into hook environments",
    "tools/test_wheel.py": "builds the wheel and installs it with torch into new venvs",
    "security/test_fuzz.py": "thousands of generated hostile messages",
    "test_typing.py": "runs mypy",
    "codegen/test_first_generate.py": "generates in a subprocess without the project's tools",
    "codegen/test_determinism.py": "generates in subprocesses under several hash seeds",
    "transport/test_demo.py": "the demo's sender and receiver processes",
    "transport/test_zmq_processes.py": "peer processes over ZMQ",
    "transport/test_shm_processes.py": "peer processes over shared memory",
    "transport/test_shm_crashes.py": "peer processes killed mid-transfer",
    "bench/test_runner.py": "the benchmark's receiver processes and plots",
}
"""Test modules (relative to tests/) whose every test is slow, and why."""

SLOW_TESTS = {
    "transport/test_shm_fanout.py::test_four_reader_processes_over_pub_sub": "4 processes",
    "transport/test_shm_fanout.py::test_a_dead_reader_never_blocks_the_others": "3 processes",
    "codegen/test_cli.py::test_exit_codes_of_the_real_command": "the console script, 6 times",
    "codegen/test_cli.py::test_a_stale_golden_copy_fails_check_with_the_command_that_fixes_it": (
        "the console script"
    ),
    "codegen/test_cli.py::test_python_dash_m_is_the_same_command": "two interpreters",
    "codegen/test_inspect.py::test_stdin_is_read_with_a_dash": "an interpreter",
    "codegen/test_inspect.py::test_hostile_input_in_a_subprocess_prints_no_traceback": (
        "an interpreter"
    ),
    "codegen/test_inspect.py::test_the_message_never_chooses_what_is_imported": "an interpreter",
    "codegen/test_compat.py::test_against_a_git_ref_of_the_project": "git and the compiler",
    "security/test_schema_injection.py::test_schema_text_stays_inside_literals_and_comments": (
        "generates and imports a module per hostile text"
    ),
    "security/test_schema_injection.py::"
    "test_the_reproducer_generates_a_module_that_imports_and_runs_nothing": "an interpreter",
    "security/test_bounded_work.py::test_the_failing_key_of_a_wide_mapping_is_found_in_one_pass": (
        "a mapping of a million entries"
    ),
    "transport/test_zmq.py::test_importing_the_codec_does_not_import_zmq": "an interpreter",
    "security/test_nesting.py::test_deep_nesting_is_refused_under_a_raised_recursion_limit": (
        "an interpreter decoding 5 MB headers fourteen times"
    ),
    "security/test_nesting.py::test_the_safe_depth_decodes_normally_in_a_raised_limit_process": (
        "an interpreter"
    ),
}
"""Single slow tests (all their parametrisations), and why."""

SLOW_PACKAGES = {"ray": "a two-node Ray cluster"}
"""Packages (directories under tests/) whose every test is slow, and why."""


def _relative(item: pytest.Item) -> tuple[str, str]:
    """(path of the item's module relative to tests/, its name without parameters)."""
    path = Path(str(item.path)).resolve()
    try:
        relative = path.relative_to(TESTS).as_posix()
    except ValueError:  # a test outside tests/ (pytest given another path)
        relative = path.as_posix()
    return relative, item.name.split("[", 1)[0]


def _is_slow(relative: str, name: str) -> bool:
    return (
        relative in SLOW_MODULES
        or f"{relative}::{name}" in SLOW_TESTS
        or relative.split("/", 1)[0] in SLOW_PACKAGES
    )


def _package(item: pytest.Item) -> str:
    return _relative(item)[0].rpartition("/")[0]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        relative, name = _relative(item)
        if _is_slow(relative, name):
            item.add_marker(pytest.mark.slow)
    # Each package's tests together, in the order the first of them came (stable: the
    # shuffle within and across packages stays). Without pytest-randomly: a no-op.
    first: dict[str, int] = {}
    for index, item in enumerate(items):
        first.setdefault(_package(item), index)
    items.sort(key=lambda item: first[_package(item)])


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    # The order's seed at the end, where a failure is read (-q hides the header with it).
    seed = terminalreporter.config.getoption("randomly_seed", None)
    if seed is not None and terminalreporter.config.pluginmanager.has_plugin("randomly"):
        terminalreporter.write_line(f"random order: replay it with --randomly-seed={seed}")


def pytest_configure(config: pytest.Config) -> None:
    # A listed module or test that was renamed or moved would quietly make its successor
    # fast: the lists must name what is on disk.
    stale = [f"{name}/" for name in SLOW_PACKAGES if not (TESTS / name).is_dir()]
    stale += [module for module in SLOW_MODULES if not (TESTS / module).is_file()]
    for entry in SLOW_TESTS:
        module, name = entry.split("::")
        path = TESTS / module
        if not path.is_file() or f"def {name}(" not in path.read_text(encoding="utf-8"):
            stale.append(entry)
    if stale:
        raise pytest.UsageError(f"tests/conftest.py lists slow tests that do not exist: {stale}")
