"""Benchmarks: latency, CPU, memory and hearing measured the way callers and operators
feel them, run from a source checkout as `python -m benchmarks NAME` (see __main__.py).

Not installed: they need the checkout, its dev dependencies and test material. They may
import every installed package (ops' simulated Twilio caller above all); no installed
package imports them (tests/test_layering.py).
"""
