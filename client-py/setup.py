"""Records, in the built package, where the checkout it was installed from
is, so that the installed package finds that checkout's
target/{release,debug}/libsluice_client.so without an environment variable
(sluice/_where.py; see sluice/_lib.py for the whole search)."""

import os
import pathlib

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = pathlib.Path(__file__).resolve().parent


class BuildPyWithWhere(build_py):
    def run(self):
        super().run()
        checkout = HERE.parent
        target = os.environ.get("CARGO_TARGET_DIR", "")
        if not (checkout / "client-lib").is_dir():
            # Built from a copy outside the checkout (an old pip): nothing to record.
            checkout, target = "", ""
        elif target:
            target = str((checkout / target).resolve())
        out = pathlib.Path(self.build_lib) / "sluice" / "_where.py"
        out.write_text(
            '"""Written by client-py/setup.py when the package was built."""\n'
            f"CHECKOUT = {str(checkout)!r}\n"
            f"CARGO_TARGET_DIR = {target!r}\n"
        )


setup(cmdclass={"build_py": BuildPyWithWhere})
