"""The parts of `make demo` (scripts/demo.py): the embedded program and sample manifests
(samples.py), the sandbox of real servers on loopback built from the test harness's fixture
classes (sandbox.py), and what the demo shows on the terminal (show.py)."""
