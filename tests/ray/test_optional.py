"""Ray stays optional: importing mmcodec, its codecs and transports never imports ray."""

from __future__ import annotations

import subprocess
import sys

from tests.ray.conftest import ROOT


def test_importing_mmcodec_imports_no_ray() -> None:
    code = (
        "import sys\n"
        "import mmcodec, mmcodec.integrations, mmcodec.generated.multimodal, mmcodec.payloads\n"
        "import mmcodec.transport.zmq, mmcodec.transport.shm\n"
        "print(sorted(m for m in sys.modules if m == 'ray' or m.startswith('ray.')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert done.stdout == "[]\n"
