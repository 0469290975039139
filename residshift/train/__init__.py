"""Training small tied-embedding GPTs with residual attenuation in place.

``gpt`` (the model and its config, registered with the ``transformers`` Auto classes on import),
``tokenizer`` (a byte-level BPE trained on a corpus, or a pretrained model's tokenizer by name).
"""
