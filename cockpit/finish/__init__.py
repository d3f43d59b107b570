"""After training: the samples a run wrote (before and after), chatting with what it trained, and
exporting it (merge, safetensors, GGUF, model card, push).

Plain Python, no torch and no textual: the model side runs in `train_backend.chat` and
`train_backend.export`, subprocesses.
"""
