"""After training: the samples a run wrote (before and after), and chatting with what it trained.

Plain Python, no torch and no textual: the model side runs in `train_backend.chat`, a subprocess.
"""
