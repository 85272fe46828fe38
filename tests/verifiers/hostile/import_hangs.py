"""Hangs at import (a module waiting on a lock, a network call, a GPU that never answers), swallowing interrupts."""

import time

while True:
    try:
        time.sleep(0.05)
    except BaseException:  # noqa: BLE001 - the point: nothing stops it but a kill
        pass


def verify(draft, q, p, num_draft, rng):
    raise AssertionError("never reached")
