"""Imported only if something resolves a task name by importing it, which must never happen."""

import os

with open(os.environ.get("CASQUE_TEST_CANARY", "/tmp/casque-canary"), "w") as f:
    f.write("imported\n")


def run(*args: object) -> None:
    with open(os.environ.get("CASQUE_TEST_CANARY", "/tmp/casque-canary"), "a") as f:
        f.write("called\n")
