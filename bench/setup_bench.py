"""The virtualenv set-up that `make test` and `make demo` start with: pip against uv, each into a fresh
virtualenv of a fresh clone of HEAD, in one invocation.

    python bench/setup_bench.py [--write-results]

Arms, the same extras (`EXTRAS` of the Makefile) and the indexes, find-links and constraints of the
machine's pip configuration:
- **pip**: the recipe before uv (`pip install --upgrade pip`, then `pip install -e ".[EXTRAS]"`);
- **uv, cold cache**: `make venv` with an empty `UV_CACHE_DIR`, as on a fresh machine;
- **uv, warm cache**: `make venv` with the machine's uv cache, as for a second clone on the same machine.

Reported: each arm's wall seconds, whether its installed versions are pip's (names normalized; pip,
setuptools, uv and judgeforge itself left out), and `import vllm`'s wall seconds in its venv afterwards
(median of 2): where PYTHONDONTWRITEBYTECODE is set, as on these machines, a venv installed without
compiled bytecode recompiles every import in every process, and the suite took 1.6x as long (bench/RESULTS.md).
The ratio is pip over uv: above 1 is faster with uv.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import tempfile
import time
from pathlib import Path

import _common as C

TITLE = "make: the virtualenv set-up, pip against uv"
EXTRAS = "cpu,model,train,serve,eval,ray,test"
OWN = {"pip", "setuptools", "uv", "judgeforge"}
FALLBACK = "uv did not install the extras: pip instead"  # the Makefile's line when pip installs instead


def installed(python: Path) -> dict[str, str]:
    """{normalized name: version} of what `python`'s environment holds, less the installers and judgeforge."""
    text = subprocess.run([str(python), "-m", "pip", "list", "--format=freeze"], capture_output=True, text=True,
                          check=True).stdout
    pins = (line.split("==", 1) for line in text.splitlines() if "==" in line)
    return {n: v for n, v in ((re.sub(r"[-_.]+", "-", n).lower(), v) for n, v in pins) if n not in OWN}


def import_s(python: Path) -> float:
    """`import vllm` in a fresh process, median of 2 (torch, transformers and vLLM: what every engine pays)."""
    walls = []
    for _ in range(2):
        t0 = time.perf_counter()
        subprocess.run([str(python), "-c", "import vllm"], check=True, capture_output=True)
        walls.append(time.perf_counter() - t0)
    return round(C.median(walls), 1)


def pip_arm(clone: Path, timeout: float) -> float:
    venv = clone / ".venv-pip"
    py = venv / "bin" / "python"
    t0 = time.perf_counter()
    subprocess.run([os.environ.get("PYTHON", "python3.11"), "-m", "venv", str(venv)], check=True, timeout=timeout)
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--upgrade", "pip"], check=True, timeout=timeout)
    subprocess.run([str(py), "-m", "pip", "install", "-q", "-e", f".[{EXTRAS}]"], cwd=clone, check=True,
                   timeout=timeout)
    # as the Makefile does after either installer (they break `import transformers` beside torch+cpu)
    subprocess.run([str(py), "-m", "pip", "uninstall", "-y", "-q", "torchvision", "torchaudio", "torchcodec"],
                   timeout=timeout)
    return time.perf_counter() - t0


def uv_arm(clone: Path, venv: str, cache: str | None, timeout: float) -> float:
    env = {**os.environ, **({"UV_CACHE_DIR": cache} if cache else {})}
    t0 = time.perf_counter()
    done = subprocess.run(["make", f"VENV={venv}", "venv"], cwd=clone, env=env, capture_output=True, text=True,
                          timeout=timeout)
    wall = time.perf_counter() - t0
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    fell_back = FALLBACK in done.stdout.splitlines()  # make also prints the recipe, which quotes it
    assert not fell_back, "uv failed and the recipe fell back to pip"
    return wall


def measure(timeout: float) -> dict:
    head = subprocess.run(["git", "-C", str(C.REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()
    out = {"date": C.now(), "cpu": C.cpu(), "load_start": C.loadavg(), "commit": head}
    with tempfile.TemporaryDirectory(prefix="setup-bench-") as tmp:
        clone = C.clone_at(head, Path(tmp))
        out["pip_s"] = round(pip_arm(clone, timeout), 1)
        out["uv_cold_s"] = round(uv_arm(clone, ".venv-uv-cold", str(Path(tmp) / "uv-cache"), timeout), 1)
        out["uv_warm_s"] = round(uv_arm(clone, ".venv-uv-warm", None, timeout), 1)
        pip = installed(clone / ".venv-pip" / "bin" / "python")
        for arm in ("pip", "uv-cold", "uv-warm"):
            out[f"{arm}_import_s"] = import_s(clone / f".venv-{arm}" / "bin" / "python")
        for arm in ("uv-cold", "uv-warm"):
            other = installed(clone / f".venv-{arm}" / "bin" / "python")
            out[f"{arm}_same_versions"] = other == pip
            out[f"{arm}_differs"] = sorted(set(other.items()) ^ set(pip.items()))[:20]
        out["packages"] = len(pip)
    out["load_end"] = C.loadavg()
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per arm before it is killed")
    ap.add_argument("--write-results", action="store_true")
    a = ap.parse_args(argv)
    out = measure(a.timeout)
    C.save_results("setup", out, a)

    def text(command: str) -> str:
        rows = [f"| pip (before) | {out['pip_s']:.0f} | 1.00x | - | {out['pip_import_s']} |",
                f"| uv, cold cache (`make venv`, a fresh machine) | {out['uv_cold_s']:.0f} | "
                f"{out['pip_s'] / out['uv_cold_s']:.2f}x | {out['uv-cold_same_versions']} | {out['uv-cold_import_s']} |",
                f"| uv, warm cache (`make venv`, a second clone) | {out['uv_warm_s']:.0f} | "
                f"{out['pip_s'] / out['uv_warm_s']:.2f}x | {out['uv-warm_same_versions']} | {out['uv-warm_import_s']} |"]
        description = (f"A fresh virtualenv with the extras `{EXTRAS}` in a fresh clone of `{out['commit']}`, "
                       f"each arm in its own, one after the other ({out['packages']} packages).")
        return C.section(TITLE, description, ["arm", "wall s", "pip / arm", "the same versions as pip", "import vllm s"], rows,
                         command, out)

    return C.publish("setup_bench.py", argv, TITLE, text, a.write_results)


if __name__ == "__main__":
    raise SystemExit(main())
