# Every target creates or refreshes the project's virtual environment first.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
MMCODEC := $(VENV)/bin/mmcodec
# torch's CPU build. Here `torch==2.13.0` resolves to a CPU wheel on local disk; from
# PyPI on Linux the same requirement is the CUDA build (gigabytes of GPU libraries).
# Elsewhere: make TORCH_INDEX="--index-url https://download.pytorch.org/whl/cpu"
TORCH_SPEC ?= torch==2.13.0
TORCH_INDEX ?=
STAMP := $(VENV)/.installed
# `make check` fails when schema/ breaks wire compatibility with this git ref.
COMPAT_REF ?= HEAD
# Large-buffer timings are bimodal under glibc's malloc (fresh pages cost more than
# the copy); pin the allocator's thresholds so repeated runs measure the same thing.
BENCH_ENV := GLIBC_TUNABLES=glibc.malloc.mmap_threshold=4294967296:glibc.malloc.trim_threshold=4294967296

# vLLM 0.33's own environment (CPU), for the vLLM binding's tests and benchmark: the
# pinned list with --no-deps (vllm's wheel declares a CUDA torch), then this project.
VLLM_VENV := .venv-vllm
VLLM_PY := $(VLLM_VENV)/bin/python
VLLM_REQUIREMENTS := requirements/vllm-0.33-cpu.txt
VLLM_STAMP := $(VLLM_VENV)/.installed
VLLM_ENV := VLLM_TARGET_DEVICE=cpu VLLM_LOGGING_LEVEL=WARNING

# The Rust side (rust/): the runtime crate, the crate generated from schema/, the tools
# the Python tests and benchmarks drive, the gateway example. These machines cannot reach
# crates.io: cargo builds against Debian's packaged crates (rust/offline.toml; rust-deps
# installs them, CI runs as root). `make test CARGO_CONFIG_FILE=` builds from crates.io.
CARGO ?= cargo
CARGO_CONFIG_FILE ?= $(CURDIR)/rust/offline.toml
CARGO_CONFIG = $(if $(CARGO_CONFIG_FILE),--config $(CARGO_CONFIG_FILE))
export MMCODEC_CARGO_CONFIG := $(CARGO_CONFIG_FILE)
RUST_PACKAGES := librust-indexmap-dev librust-regex-dev librust-zmq-dev pkg-config
RUST_SCHEMA_OUT := rust/multimodal/src/generated
# Cases of the Rust mutation test (cargo test); CI runs this many.
MUTATIONS ?= 100000

.PHONY: venv generate check lint typecheck test test-fast mutate mutate-sample demo bench bench-ray
.PHONY: fuzz soak soak-ci clean
.PHONY: venv-vllm test-vllm bench-vllm rust-deps rust-test

venv: $(STAMP)

# mmcodec/__init__.py holds the version, which the installed metadata repeats.
$(STAMP): pyproject.toml mmcodec/__init__.py
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# torch first, from TORCH_SPEC/TORCH_INDEX: an unpinned torch pulls a multi-GB CUDA build.
	$(PY) -m pip install --quiet $(TORCH_INDEX) '$(TORCH_SPEC)'
	# Then the project: the newest versions its ranges allow. The pin goes along, so the
	# torch extra's range is met by the build just installed, never by another download.
	$(PY) -m pip install --quiet -e '.[torch,test,dev,bench]' '$(TORCH_SPEC)'
	touch $(STAMP)

generate: venv
	$(MMCODEC) generate --schemas schema --out generated --package mmcodec.generated
	$(MMCODEC) generate --lang rust --schemas schema --out $(RUST_SCHEMA_OUT)
	$(MMCODEC) generate --schemas tests/schemas --out tests/golden
	$(MMCODEC) generate --lang rust --schemas tests/schemas --out tests/golden_rust
	$(PY) -m tests.rust.corpus
	$(MMCODEC) json-schema > schema/mmcodec.schema.json

check: venv
	$(MMCODEC) validate schema
	$(MMCODEC) check --schemas schema --out generated --package mmcodec.generated
	$(MMCODEC) check --lang rust --schemas schema --out $(RUST_SCHEMA_OUT)
	$(MMCODEC) check --schemas tests/schemas --out tests/golden
	$(MMCODEC) check --lang rust --schemas tests/schemas --out tests/golden_rust
	$(MMCODEC) compat --against $(COMPAT_REF)
	$(MMCODEC) json-schema | cmp -s - schema/mmcodec.schema.json || \
		{ echo "schema/mmcodec.schema.json is stale; run: make generate"; exit 1; }
	$(MAKE) --no-print-directory lint typecheck

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: venv
	$(VENV)/bin/mypy

# Every test, in a random order (its seed is printed first; --randomly-seed=N replays it),
# with line and branch coverage of the shipped package and its floor ([tool.coverage]).
test: check rust-test
	$(PY) -m pytest -q --cov --cov-report=term

# The inner loop: no installs, processes, clusters, mypy or fuzzing (tests/conftest.py).
test-fast: venv
	$(PY) -m pytest -q -x -m "not slow"

# Mutation testing ([tool.mutmut]) in a snapshot of the working tree, so that neither
# mutmut's mutants/ nor a stopped run touches this one; then the score of each module.
# On demand: hours on 2 cores. MUTANTS picks mutants by name (globs), e.g.
# make mutate MUTANTS='mmcodec.runtime.framing.*'
MUTATE_DIR ?= /tmp/mmcodec-mutate
MUTANTS ?=
mutate: venv
	rm -rf $(MUTATE_DIR) && mkdir -p $(MUTATE_DIR)/mutants
	git ls-files -z --cached --others --exclude-standard | xargs -0 cp -a --parents -t $(MUTATE_DIR)
	# mutmut walks real folders and names mutants by path, while the code imports
	# mmcodec.codegen and mmcodec.generated: in the snapshot those are the folders, and the
	# top-level names the symlinks (the other way round from the repository).
	cd $(MUTATE_DIR) && for name in codegen generated; do \
		rm mmcodec/$$name && mv $$name mmcodec/$$name && ln -s mmcodec/$$name $$name && \
		ln -s mmcodec/$$name mutants/$$name; done
	cd $(MUTATE_DIR) && $(CURDIR)/$(VENV)/bin/mutmut run --max-children 2 $(MUTANTS)
	cd $(MUTATE_DIR) && $(CURDIR)/$(PY) -m tests.mutation_scores --survivors $(MUTATE_FLAGS)

# A fixed sample for CI: every mutant of the functions where the audit of issue 25 planted
# the bugs that went through (partial build, compat's insertion check, the planner's
# aliases, the sender's container check); each must be killed.
MUTATE_SAMPLE := 'mmcodec.runtime.tensors.x__build_some__mutmut_*' \
	'mmcodec.codegen.compat.x__compare_structs__mutmut_*' \
	'mmcodec.runtime.codec.x__check_container_lengths__mutmut_*'
mutate-sample:
	$(MAKE) --no-print-directory mutate MUTANTS="$(MUTATE_SAMPLE)" MUTATE_FLAGS=--fail-under=100

# The Debian packages of the crates the Rust side uses (nothing to do when they are there,
# or when building from crates.io).
rust-deps:
	@if [ -n "$(CARGO_CONFIG_FILE)" ] && ! dpkg-query -W $(RUST_PACKAGES) >/dev/null 2>&1; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(RUST_PACKAGES); \
	fi

# Formatting (the generated modules included: rustfmt must find nothing to change), clippy
# with warnings as errors, and every Rust test, the mutation test at MUTATIONS cases.
rust-test: rust-deps
	cd rust && $(CARGO) fmt --all -- --check
	cd rust && $(CARGO) clippy $(CARGO_CONFIG) --workspace --all-targets -- -D warnings
	cd rust && MMCODEC_MUTATIONS=$(MUTATIONS) $(CARGO) test $(CARGO_CONFIG) --workspace
	# What the Python tests drive (tests/rust, tests/vllm): built here, outside their timeouts.
	cd rust && $(CARGO) build --release $(CARGO_CONFIG) -p mmcodec-tools -p mmcodec-gateway-example

demo: venv generate rust-deps
	$(PY) -m mmcodec.demo
	$(PY) -m mmcodec.demo --shm
	$(PY) -m mmcodec.demo --shm --readers 4
	# A Rust gateway preprocesses 16 images (151 MB of bf16 patches) and sends the request
	# over ZMQ; Python decodes it and verifies every value and byte.
	cd rust && $(CARGO) build --release $(CARGO_CONFIG) -p mmcodec-gateway-example
	$(PY) -m mmcodec.demo.rust_gateway --binary rust/target/release/mmcodec-gateway --images 16

bench: venv rust-deps
	cd rust && $(CARGO) build --release $(CARGO_CONFIG) -p mmcodec-tools
	$(BENCH_ENV) $(PY) -m bench
	$(BENCH_ENV) $(PY) -m bench.fanout

# The design payloads through a two-node Ray cluster, default Ray vs mmcodec registered.
bench-ray: venv
	$(BENCH_ENV) $(PY) -m bench.ray

venv-vllm: $(VLLM_STAMP)

$(VLLM_STAMP): $(VLLM_REQUIREMENTS) pyproject.toml mmcodec/__init__.py
	test -x $(VLLM_PY) || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_PY) -m pip install --quiet --upgrade pip
	$(VLLM_PY) -m pip install --quiet --no-deps $(TORCH_INDEX) -r $(VLLM_REQUIREMENTS)
	# This project on top, without dependencies: the pinned list holds them.
	$(VLLM_PY) -m pip install --quiet --no-deps -e .
	touch $(VLLM_STAMP)

# tests/vllm only runs here (`make test` ignores it); a vLLM that fails to import fails.
test-vllm: venv-vllm
	$(VLLM_ENV) $(VLLM_PY) -m pytest -q -p no:cacheprovider tests/vllm

bench-vllm: venv-vllm
	$(BENCH_ENV) $(VLLM_ENV) $(VLLM_PY) -m bench.vllm

fuzz: venv
	MMCODEC_FUZZ_EXAMPLES=100000 $(PY) -m pytest -q -p no:cacheprovider tests/security/test_fuzz.py

# Crash-test the transports: senders and readers SIGKILLed at random (not part of `make test`).
SOAK_MINUTES ?= 10
soak: venv
	$(PY) -m bench.soak --minutes $(SOAK_MINUTES)

soak-ci: venv
	$(PY) -m bench.soak --minutes 1

clean:
	rm -rf $(VENV) $(VLLM_VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis rust/target
