"""Build a `synthetic:<arch>` model: the shipped shape, random weights, shipped tokenizer.

    python -m train_backend.synthetic ARCH OUT_DIR {bf16,fp16,fp32} {cuda,cpu}

Run as a child process by the trainer (and by benchmarks, to warm the cache) so the
build's memory peak stays out of the training process.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path


def build(arch: str, out_dir: str, dtype_name: str, device_kind: str) -> None:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from cockpit.models import shipped as shapes
    from train_backend.model import shipped_tokenizer_dir, torch_dtype

    config = AutoConfig.for_model(**shapes.hf_config_dict(arch))
    torch.manual_seed(0)
    device = "cuda" if device_kind == "cuda" and torch.cuda.is_available() else "cpu"
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=torch_dtype(dtype_name))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    for item in Path(shipped_tokenizer_dir()).iterdir():
        shutil.copy(item, out / item.name)


if __name__ == "__main__":
    if len(sys.argv) != 5:
        raise SystemExit(__doc__)
    build(*sys.argv[1:])
