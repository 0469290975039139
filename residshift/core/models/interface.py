"""What every loaded model offers the rest of the study: :class:`ModelInfo`, :class:`LoadedModel`, the
:class:`StudyModel` protocol and :func:`check_interface`, where each architecture keeps its parts, the errors."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ContextManager, NamedTuple, Protocol

import torch
from torch import nn





DECODERS: dict[str, str] = {
    "tied": "the tied embedding matrix (input embedding = output head)",
    "output": "the model's own output head (lm_head), for an untied model",
    "input": "the input embedding matrix, for an untied model",
}


class ModelError(RuntimeError):
    """Base class for the loader's errors; each message names the fix."""


class UnknownModelError(ModelError, KeyError):
    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0])


class MissingPackageError(ModelError, ImportError):
    pass


class UntiedEmbeddingsError(ModelError):
    pass


class ModelNotAvailableError(ModelError, FileNotFoundError):
    pass


class ArchitectureError(ModelError):
    pass


# --------------------------------------------------------------------------------------------
# The description every downstream module relies on
# --------------------------------------------------------------------------------------------


def resolve(obj: Any, path: str) -> Any:
    """Follow a dotted attribute path (``"model.layers"``) on a module or an nnsight envoy."""
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


@dataclass(eq=False)
class ModelInfo:
    """What the lens, the interventions and the harness need to know about a model.

    Notation (see the notebooks): ``h_0`` is the input of layer 0 (the scaled embedding, plus
    position embeddings where the model adds them), ``h_l`` the output of layer ``l`` (1-based),
    ``E`` the tied embedding matrix, ``N`` the final norm. The logit lens is
    ``softcap(E · N(h_l))``.
    """

    name: str
    family: str  # config.model_type, e.g. "llama", "gemma3_text", "gpt2"
    source: str  # where the weights came from: "gguf:<file>", "hub:<id>", "local:<dir>", "tiny"
    n_layers: int
    d_model: int
    vocab_size: int
    layers_path: str  # dotted path of the decoder-layer ModuleList, e.g. "model.layers"
    norm_path: str  # dotted path of the final norm, e.g. "model.norm"
    embed_path: str  # dotted path of the input embedding module
    layers: nn.ModuleList = field(repr=False)
    final_norm: nn.Module = field(repr=False)
    embedding: torch.Tensor = field(repr=False)  # [vocab, d] the matrix E the lens decodes through
    embed_scale: float = 1.0  # the input embedding is E[x] * embed_scale (Gemma: sqrt(d))
    logit_softcap: float | None = None  # logits = cap * tanh(logits / cap) where set (Gemma-2)
    prepend_bos: bool = False  # sequences start with BOS (what the model was trained with)
    bos_token_id: int | None = None
    remote: bool = False  # trace on NDIF (nnsight remote execution) instead of locally
    decoder: str = "tied"  # which matrix E is (DECODERS): "tied", or for an untied model "output" / "input"
    tied: bool = True  # whether the input embedding and the output head are one tensor

    @property
    def n_params(self) -> int:
        seen: dict[int, int] = {}
        for p in self.layers.parameters():
            seen[id(p)] = p.numel()
        for p in self.final_norm.parameters():
            seen[id(p)] = p.numel()
        seen[id(self.embedding)] = self.embedding.numel()
        return sum(seen.values())

    def layer_envoys(self, model: Any) -> list:
        """The decoder layers of ``model`` (an nnsight model or the bare torch module)."""
        return list(resolve(model, self.layers_path))

    def check_layer(self, layer: int) -> int:
        """Validate a 0-based block index (block ``layer`` maps ``h_layer`` to ``h_{layer+1}``)."""
        if not isinstance(layer, int) or isinstance(layer, bool):
            raise TypeError(f"layer must be an int, got {type(layer).__name__}")
        if not 0 <= layer < self.n_layers:
            raise IndexError(
                f"layer {layer} is out of range for {self.name}, which has {self.n_layers} layers: "
                f"use 0..{self.n_layers - 1} (or a negative index converted with "
                f"layer % {self.n_layers})"
            )
        return layer

    def describe(self) -> dict[str, Any]:
        """A JSON-friendly summary (what notebook 00 tabulates)."""
        return {
            "name": self.name,
            "family": self.family,
            "source": self.source,
            "layers": self.n_layers,
            "d_model": self.d_model,
            "vocab": self.vocab_size,
            "params": self.n_params,
            "embed_scale": round(float(self.embed_scale), 4),
            "logit_softcap": self.logit_softcap,
            "prepend_bos": self.prepend_bos,
            "decoder": self.decoder,
            "tied": self.tied,
        }


class LoadedModel(NamedTuple):
    model: Any  # nnsight.TransformersModel
    tokenizer: Any
    info: ModelInfo


# --------------------------------------------------------------------------------------------
# The interface every model satisfies (written down; checked by check_interface)
# --------------------------------------------------------------------------------------------


class StudyModule(Protocol):
    """The bare torch module (``lm._module``; ``info.layers`` etc. point into it).

    - ``forward(input_ids, attention_mask=None, use_cache=False[, logits_to_keep=k])`` returns an
      object with ``.logits`` ``[batch, seq, vocab]`` (fp32 or the model's dtype). The harness pads
      with ``attention_mask``; ``logits_to_keep`` is optional (used when ``forward`` accepts it:
      logits of the last ``k`` positions only).
    - ``get_input_embeddings()`` / ``get_output_embeddings()``: modules sharing one ``weight``
      ``[vocab, d]`` (tied; ``ModelInfo.embedding`` is that tensor).
    - ``config``: ``model_type``; ``max_position_embeddings`` or ``n_positions`` (the harness's
      longest window); ``final_logit_softcapping`` where the logits are soft-capped.
    - the decoder layers form an ``nn.ModuleList`` at ``ModelInfo.layers_path``; layer ``l`` is
      called as ``layer(h, *args, **kwargs)`` (or with ``hidden_states=h``) and returns ``h_{l+1}``
      as a tensor ``[batch, seq, d]`` (a tuple whose first element is it is tolerated by the sweep
      replay, not by the lens, which edits ``.output`` in place). Everything a layer needs besides
      ``h`` (masks, rotary tables) comes in its other arguments, so a block can be replayed on an
      edited ``h`` with the captured arguments (``core.replay.replay_from``).
    - the final norm (``ModelInfo.norm_path``) maps the last layer's output to the hidden state the
      head reads: ``logits == softcap(final_norm(h_L) @ E.T)``, which the logit lens relies on.
    """

    def forward(self, input_ids: torch.Tensor, **kwargs: Any) -> Any: ...

    def get_input_embeddings(self) -> nn.Module: ...

    def get_output_embeddings(self) -> nn.Module: ...


class StudyModel(Protocol):
    """What ``load_model(...).model`` must offer (``nnsight.TransformersModel`` does, for any
    :class:`StudyModule`):

    - ``trace(input_ids, remote=False)``: a context in which, for each layer envoy
      ``info.layer_envoys(model)[l]``, ``.input`` is ``h_l`` (read it before ``.output``) and
      ``.output`` is ``h_{l+1}``, both ``[batch, seq, d]`` and assignable (the edits replace
      ``.output``, the causal profile also ``layers[0].input``); ``model.output.logits`` is the
      final logits; ``.save()`` keeps a value past the trace; ``loss.backward()`` works inside.
    - ``_module``: the bare :class:`StudyModule` (the sweep and the harness call it directly).
    - ``tokenizer``: the Hugging Face tokenizer (``bos_token_id``; ``__call__``; a pad token or
      an ``eos_token_id`` to pad with).

    The :class:`ModelInfo` beside it carries the rest: ``n_layers``, ``d_model``, ``vocab_size``,
    ``layers`` / ``layers_path``, ``final_norm``, ``embedding`` (the tied ``E``), ``embed_scale``
    (``h_0 = E[x] * embed_scale``, plus position embeddings where the model adds them),
    ``logit_softcap``, ``prepend_bos`` / ``bos_token_id``, ``check_layer`` and ``layer_envoys``.
    """

    _module: StudyModule
    tokenizer: Any

    def trace(self, *inputs: Any, **kwargs: Any) -> ContextManager: ...


def check_interface(loaded: LoadedModel, ids: torch.Tensor | None = None, *, atol: float = 1e-4) -> None:
    """Check that ``loaded`` satisfies :class:`StudyModel` / :class:`StudyModule` on ``ids``
    (default: 8 token ids): raise :class:`ArchitectureError` listing every part that does not."""
    lm, tok, info = loaded
    module = lm._module
    problems: list[str] = []
    if ids is None:
        ids = torch.arange(3, 11).remainder(info.vocab_size).unsqueeze(0)
    ids = ids.to(info.embedding.device)
    if not (info.n_layers == len(info.layers) == len(info.layer_envoys(lm))):
        problems.append(f"n_layers {info.n_layers} != the {len(info.layers)} layers at {info.layers_path}")
    emb_in, emb_out = module.get_input_embeddings(), module.get_output_embeddings()
    chosen = {"tied": emb_in, "input": emb_in, "output": emb_out}.get(info.decoder)
    if info.decoder == "tied" and (emb_in is None or emb_out is None or emb_in.weight is not emb_out.weight
                                   or info.embedding is not emb_in.weight):
        problems.append("input and output embeddings must be one tensor, and info.embedding that tensor "
                        "(or load an untied model with decoder='output' / 'input')")
    elif chosen is None or info.embedding is not chosen.weight:
        problems.append(f"info.embedding must be the weight of {DECODERS.get(info.decoder, info.decoder)}")
    if tuple(info.embedding.shape) != (info.vocab_size, info.d_model):
        problems.append(f"embedding shape {tuple(info.embedding.shape)} != (vocab_size, d_model) "
                        f"({info.vocab_size}, {info.d_model})")
    with torch.no_grad():
        try:
            outs = []
            with lm.trace(ids):
                layers = info.layer_envoys(lm)
                h0 = layers[0].input.save()
                for layer in layers:  # explicit loop: nnsight runs the body in execution order
                    outs.append(layer.output.save())
                logits = lm.output.logits.save()
        except Exception as err:  # noqa: BLE001 - reported, with the rest
            raise ArchitectureError(f"{info.name}: tracing the layers failed: {err!r}") from err
        shape = (ids.shape[0], ids.shape[1], info.d_model)
        for l, h in enumerate([h0, *outs]):
            if not isinstance(h, torch.Tensor) or tuple(h.shape) != shape:
                what = type(h).__name__ if not isinstance(h, torch.Tensor) else tuple(h.shape)
                problems.append(f"h_{l} (layer {'0 input' if l == 0 else f'{l - 1} output'}) is {what}, "
                                f"expected a tensor {shape}")
        reads_own_head = info.decoder in ("tied", "output") or info.tied
        if reads_own_head and isinstance(outs[-1], torch.Tensor) and isinstance(logits, torch.Tensor):
            lens = info.final_norm(outs[-1]).float() @ info.embedding.float().T
            if info.logit_softcap:
                lens = info.logit_softcap * torch.tanh(lens / info.logit_softcap)
            gap = float((lens - logits.float()).abs().max())
            if gap > atol * max(1.0, float(logits.float().abs().max())):
                problems.append(f"softcap(final_norm(h_L) @ E.T) differs from the logits by {gap:.3g}: "
                                "the final norm, tied matrix or soft-cap is not what the model uses")
        try:
            bare = module(ids, attention_mask=torch.ones_like(ids), use_cache=False).logits
            if not torch.allclose(bare.float(), logits.float(), atol=atol, rtol=1e-4):
                problems.append("forward(ids, attention_mask=ones) differs from the traced logits")
        except TypeError as err:
            problems.append(f"forward must accept attention_mask= and use_cache=: {err}")
    if not hasattr(module.config, "model_type"):
        problems.append("config has no model_type")
    if problems:
        raise ArchitectureError(f"{info.name} does not satisfy the study's model interface:\n  - "
                                + "\n  - ".join(problems))


# Where each architecture keeps its layers, final norm and input embedding.
_ARCH_PATHS: list[tuple[str, str, str]] = [
    ("model.layers", "model.norm", "model.embed_tokens"),  # llama, gemma*, mistral, qwen, olmo
    ("transformer.h", "transformer.ln_f", "transformer.wte"),  # gpt2, gpt-neo, gpt-j, residshift.core.models.gpt
    ("gpt_neox.layers", "gpt_neox.final_layer_norm", "gpt_neox.embed_in"),  # pythia
    ("model.decoder.layers", "model.decoder.final_layer_norm", "model.decoder.embed_tokens"),  # opt
]


def _find_paths(model: nn.Module, layers_path=None, norm_path=None, embed_path=None):
    if layers_path and norm_path and embed_path:
        candidates = [(layers_path, norm_path, embed_path)]
    else:
        candidates = _ARCH_PATHS
    for lp, np_, ep in candidates:
        try:
            layers, norm, _embed = resolve(model, lp), resolve(model, np_), resolve(model, ep)
        except AttributeError:
            continue
        if isinstance(layers, nn.ModuleList) and isinstance(norm, nn.Module):
            return lp, np_, ep
    raise ArchitectureError(
        f"could not find the decoder layers and final norm of {type(model).__name__}; tried "
        f"{[c[:2] for c in candidates]}. Pass layers_path=, norm_path= and embed_path= to "
        "load_model (dotted attribute paths, e.g. 'model.layers', 'model.norm', 'model.embed_tokens')."
    )
