"""The main job: ``python -m mmcodec.demo`` (``make demo``).

Starts a receiver process (``python -m mmcodec.demo.receiver``, a fresh interpreter
started with :mod:`subprocess`: nothing is pickled on the way, unlike
``multiprocessing``, whose spawn start method pickles the target and its arguments),
connects to it over ZMQ ``ipc://`` (``--transport tcp`` for ``tcp://127.0.0.1``;
``--shm`` adds a shared-memory pool for frames of 64 KiB and more, see
:mod:`mmcodec.transport.shm`; ``make demo`` runs without, then with it) and sends it
the realistic payload set of :mod:`mmcodec.payloads` — Qwen2.5-VL (5184x1176 bf16, flat)
+ grid, LLaVA (3x336x336), InternVL (13x3x448x448 + a shared token id, 2 items),
MiniCPM-V (a ragged list of 10), Whisper (128x3000), Idefics3 (pixel values + bool
mask), a 16-image Qwen2.5-VL request built with ``from_hf_inputs`` and "64 small items"
— plus one LLaVA item as a ``MultiModalFeatureSpec``.

What travels: each request is one message holding its whole ``MultiModalKwargsItems``,
the unit a front end hands the engine core (one message per request keeps a shared
field's tensor on the wire once, where per-item messages would repeat it); the
per-item unit an engine core also receives, ``MultiModalFeatureSpec`` (an item with its
placeholder position and hash), is the last row. See :mod:`mmcodec.demo.payloads`.

Per payload the sender encodes (timed alone, median of ``--repeat`` runs), announces
the payload's name and seed, waits until the receiver has built its own expected copy
from them, then sends it ``--repeat`` times with :func:`mmcodec.transport.zmq.send`
(large tensors zero-copy). The receiver decodes each message zero-copy from the ZMQ
frames, reads the clock, compares the value with its copy using the domain classes'
strict ``==`` and reports back on a second socket. The table shows the wire size,
frame count, encode time, send->decoded latency (the clock read just before ``send``
in the sender to the one just after ``decode`` in the receiver; medians), the
throughput that latency means, and whether every message was verified. The exit status
is 0 when all were, 1 on any mismatch, 2 when the receiver failed.

Clocks: both processes read ``time.monotonic_ns()``, CLOCK_MONOTONIC on Linux: one
clock for the whole machine, not per process, so differences between readings in two
processes are meaningful (likewise on macOS and Windows, whose monotonic clocks are
system-wide). This only holds on one machine; across machines it would need a round
trip.

The latencies include what a real receiver pays: the first touch of freshly allocated
receive buffers (page faults), which grows with the payload.
"""
