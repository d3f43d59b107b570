"""Convert a packaged model's GGUF into a safetensors folder (cockpit.models.packaged).

    python -m train_backend.packaged GGUF_FILE OUT_DIR

transformers dequantizes the GGUF and builds the tokenizer (with its chat template) from
its metadata; the folder is then what `from_pretrained(OUT_DIR)` reads, like any local model.
"""

from __future__ import annotations

import sys
from pathlib import Path


def convert(gguf_file: str, out_dir: str) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    folder, name = str(Path(gguf_file).parent), Path(gguf_file).name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    loaded = AutoModelForCausalLM.from_pretrained(
        folder, gguf_file=name, dtype=torch.bfloat16, quantization_config=GgufConfig(dequantize=True)
    )
    # a model loaded from GGUF keeps its GGUF quantizer, which refuses to save: the same weights,
    # dense, in a plain model of the same config
    config = loaded.config
    config.__dict__.pop("quantization_config", None)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.load_state_dict(loaded.state_dict())
    model.generation_config = loaded.generation_config
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    convert(*sys.argv[1:])
