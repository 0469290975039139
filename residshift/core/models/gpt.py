"""A small pre-LN GPT with tied embeddings and one place where the skip path is attenuated.

nanoGPT's model (learned absolute positions, LayerNorm, causal self-attention through
``F.scaled_dot_product_attention``, a GELU or GEGLU MLP, ``lm_head`` tied to ``wte``) as a
``transformers`` ``PreTrainedModel`` with its own config (``model_type = "residshift-gpt"``,
registered with ``AutoConfig`` / ``AutoModelForCausalLM`` on import), so ``save_pretrained``,
``from_pretrained``, ``nnsight.TransformersModel`` and ``residshift.core.models.load_model(folder)``
treat a trained checkpoint like any Hugging Face model. Module names follow GPT-2 / nanoGPT
(``transformer.wte``, ``transformer.wpe``, ``transformer.h``, ``transformer.ln_f``, ``lm_head``).

>>> cfg = GPTConfig(n_layer=6, n_head=4, n_embd=128, block_size=128, vocab_size=1024, residual="learned")
>>> model = GPT(cfg)
>>> out = model(ids, labels=ids)          # out.loss, out.logits
>>> model.residual_alphas()               # {layer: alpha} for plots of alpha per layer over training

Residual modes (``config.residual``). ``F_l(x)`` is everything block ``l`` adds to its input
(attention, then the MLP on the updated stream). ``Block.forward`` is nanoGPT's two lines on a block
without a gate and writes the residual equation itself on a gated one, ``x <- alpha x + F_l(x)``. On
a pretrained model the same edit is applied from outside (``residshift.core.residual.attenuated``:
``block(x) - (1 - alpha) x``); the two agree to rounding (tested). At ``alpha = 1`` a gated block is
the plain block bit for bit, at either site (``1.0 * x`` is exact and the adds run in nanoGPT's order,
``(x + attn) + mlp``; tested).

- ``baseline``: ``x + F(x)``, nanoGPT's block: ``x = x + attn(LN x)``, ``x = x + mlp(LN x)``;
- ``fixed``: ``alpha x + F_l(x)`` at ``alpha_layers`` with a constant ``alpha`` in [0, 1]. By default
  (``site="block"``) it acts ONCE PER BLOCK, so a ``fixed`` model is the ``baseline`` model under the
  edit used on pretrained models (a test checks this through nnsight, to float rounding).
  ``site="sublayer"`` scales the skip at each of the two adds instead:
  ``x <- alpha x + attn(LN x)``, ``x <- alpha x + mlp(LN x)`` (the embedding's share then shrinks by
  ``alpha^2`` per block);
- ``learned``: one gate per layer, ``alpha_l = sigmoid(theta_l)``, ``theta_l = theta_init = 6`` at
  start (``alpha = 0.9975``; ``residshift.core.gating.ScalarGate``);
- ``learned-token``: ``alpha_l(t) = sigmoid(w_l . LN(x_l(t)) / sqrt(d) + b_l)`` of the block's input,
  ``w = 0`` and ``b = theta_init`` at start (``residshift.core.gating.TokenGate``, the token gate of
  notebook 05);
- ``scalars`` (nanochat-style): ``lambda_l x + F(LN x)``, one learned unconstrained scalar per layer,
  ``lambda = scalar_init = 1.0`` at start (so it starts as the baseline; nanochat starts its
  ``resid_lambdas`` at 1.15 -> 1.05 over depth and adds an ``x0`` term, which we leave out to keep
  the comparison about the skip path alone);
- ``backout`` (modded-nanogpt, record 2025-10-04): ``h_L - lambda h_k`` just before the final norm,
  ``h_k`` the residual stream after ``k = backout_layer`` blocks (default ``n_layer // 2``), a learned
  ``lambda = backout_init = 0.5`` at start. The subtraction is done at the end of the LAST block
  (``h_L`` is that block's output), so the logit lens of ``h_L`` still reproduces the model's logits.

Two identities the tests check: a ``fixed`` model is the ``baseline`` under the pretrained edit,
and ``backout`` with ``backout_layer = n_layer - 1`` is ``fixed`` attenuation of the last block with
``alpha = 1 - lambda``. Caveat: the last block of a backout model takes ``h_k`` as its second
argument, so code that replays blocks from captured arguments (``core.replay.replay``) is only
exact on such a model from layer ``k`` on; everything that runs the whole forward (nnsight edits,
the lens, the harness) is exact.

Embedding recipes (``config.embedding``): how the residual stream starts, ``h_0``.

- ``nanogpt`` (the authors' harness style, and the contrast arm): ``h_0 = wte[x] + wpe[t]``, both
  ``normal(0, 0.02)``, weight decay on both (nanoGPT's rule): the position vector is as large as the
  token vector;
- ``gemma``: ``h_0 = sqrt(d) wte[x] + wpe[t]`` with ``wte`` at ``normal(0, 1/d)``, so the token part
  has unit RMS per coordinate (Gemma's scaled embedding), learned positions at one tenth of that
  (``normal(0, 0.1)``), and no weight decay on either (the tied matrix keeps its scale);
- ``gemma-rope``: the same token embedding, no position table: rotary position embeddings
  (GPT-NeoX half-split, base 10,000) on every head's queries and keys, so ``h_0`` is the scaled
  token embedding alone (head size must be even).

The token scale is exposed as ``wte.embed_scale`` (what ``core.models.describe_model`` reads for
every model); the lens decodes through the same tied matrix whatever the recipe.

The learned modes share ``site`` with ``fixed`` (at ``"sublayer"`` one gate per block serves both
adds). ``param_groups(weight_decay, gate_lr_scale)`` gives the optimiser groups, nanoGPT's rule:
every parameter of dimension >= 2 decays (the attention and MLP matrices, and under the ``nanogpt``
recipe the tied embedding ``wte`` and ``wpe``, as in nanoGPT and the paper's code); biases, norm
gains, gates, scalars and the backout lambda do not. With ``gate_lr_scale`` the learned gates,
scalars and backout lambda get a group of their own whose learning rate is the schedule's times that
scale (speed-running GPTs' treatment of their scalars: with one learning rate for weights and gates,
a gate's logit moves by about the learning rate per step and cannot travel far in a short run).

Initialisation is GPT-2's: normal(0, 0.02) for linear and embedding weights, the two residual
projections (``attn.c_proj``, ``mlp.c_proj``) at ``0.02 / sqrt(2 n_layer)``, zero biases, unit norm
gains. The forward has no data-dependent Python control flow (``torch.compile`` and bf16 autocast
friendly); ``attention_mask`` is accepted for right-padded batches, which causal attention makes
harmless (left padding is refused outside ``torch.compile``).
"""
from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from transformers import AutoConfig, AutoModelForCausalLM, GenerationMixin, PreTrainedConfig, PreTrainedModel
from transformers import initialization as init
from transformers.modeling_outputs import CausalLMOutput
from transformers.modeling_utils import slice_logits_to_keep

from ..gating import THETA_INIT, FixedGate, ScalarGate, SkipScalar, TokenGate

MODEL_TYPE = "residshift-gpt"
MODES = ("baseline", "fixed", "learned", "learned-token", "backout", "scalars")
GATED_MODES = ("fixed", "learned", "learned-token", "scalars")  # modes with a skip gate per block
SITES = ("block", "sublayer")
MLPS = ("gelu", "geglu")
RECIPES = ("nanogpt", "gemma", "gemma-rope")  # how h_0 is built (module docstring)
ROPE_BASE = 10_000.0


class GPTConfigError(ValueError):
    """A GPT configuration that cannot be built; the message names the fix."""


class GPTConfig(PreTrainedConfig):
    """Everything that defines a model (a ``transformers`` config dataclass; JSON in ``config.json``).

    Every bad value, wrong types included, raises :class:`GPTConfigError` (a ``ValueError``) at
    construction, naming the fix.

    ``alpha`` / ``alpha_layers`` only for ``residual="fixed"``; ``theta_init`` for the learned gates;
    ``scalar_init`` for ``scalars``; ``backout_layer`` / ``backout_init`` for ``backout``.
    """

    model_type = MODEL_TYPE
    attribute_map = {
        "hidden_size": "n_embd",
        "num_hidden_layers": "n_layer",
        "num_attention_heads": "n_head",
        "max_position_embeddings": "block_size",
    }

    n_layer: int = 6
    n_head: int = 4
    n_embd: int = 128
    block_size: int = 128
    vocab_size: int = 1024
    mlp: str = "gelu"  # "gelu" (4d hidden) | "geglu" (gelu(x W) * (x V), 4d hidden: 1.5x the MLP weights)
    embedding: str = "nanogpt"  # the embedding recipe, one of RECIPES (module docstring)
    dropout: float = 0.0
    bias: bool = False  # biases in Linear and LayerNorm (nanoGPT's training default: off)
    residual: str = "baseline"
    site: str = "block"  # "block": alpha x + F(x) once per block | "sublayer": at both adds
    alpha: float | None = None
    alpha_layers: list[int] | tuple[int, ...] | None = None
    theta_init: float = THETA_INIT
    scalar_init: float = 1.0
    backout_layer: int | None = None  # default n_layer // 2
    backout_init: float = 0.5
    initializer_range: float = 0.02
    layer_norm_epsilon: float = 1e-5
    bos_token_id: int | None = None
    eos_token_id: int | None = None
    pad_token_id: int | None = None
    tie_word_embeddings: bool = True
    use_cache: bool = False  # no KV cache: generate() recomputes the prefix

    def __post_init__(self, **kwargs):
        if isinstance(self.alpha_layers, tuple):
            self.alpha_layers = list(self.alpha_layers)
        if self.residual == "backout" and self.backout_layer is None and type(self.n_layer) is int:
            self.backout_layer = self.n_layer // 2
        super().__post_init__(**kwargs)
        self.check()

    def check(self) -> "GPTConfig":
        """Raise :class:`GPTConfigError` naming the fix for anything that cannot be built."""
        def bad(msg):
            raise GPTConfigError(msg)

        def is_int(v):
            return isinstance(v, int) and not isinstance(v, bool)

        for name, want, ok in [
            (("n_layer", "n_head", "n_embd", "block_size", "vocab_size"), "an int", is_int),
            (("dropout", "theta_init", "scalar_init", "backout_init", "initializer_range", "layer_norm_epsilon"),
             "a number", lambda v: is_int(v) or isinstance(v, float)),
            (("mlp", "residual", "site", "embedding"), "a string", lambda v: isinstance(v, str)),
            (("bias",), "True or False", lambda v: isinstance(v, bool)),
            (("alpha",), "a number or None", lambda v: v is None or is_int(v) or isinstance(v, float)),
            (("backout_layer",), "an int or None", lambda v: v is None or is_int(v)),
            (("alpha_layers",), "a list of ints or None", lambda v: v is None or (
                isinstance(v, (list, tuple)) and all(is_int(l) for l in v))),
        ]:
            for n in name:
                if not ok(getattr(self, n)):
                    bad(f"{n} must be {want}, got {getattr(self, n)!r}")
        for name in ("n_layer", "n_head", "n_embd", "block_size", "vocab_size"):
            if getattr(self, name) < 1:
                bad(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.n_embd % self.n_head:
            bad(f"n_embd {self.n_embd} is not a multiple of n_head {self.n_head}: pick a width divisible "
                "by the number of heads")
        if self.mlp not in MLPS:
            bad(f"unknown mlp {self.mlp!r}; choose one of {MLPS}")
        if self.embedding not in RECIPES:
            bad(f"unknown embedding recipe {self.embedding!r}; choose one of {RECIPES}")
        if self.embedding == "gemma-rope" and (self.n_embd // self.n_head) % 2:
            bad(f"rotary positions rotate pairs of coordinates: the head size {self.n_embd // self.n_head} "
                f"(n_embd {self.n_embd} / n_head {self.n_head}) must be even; pick another width or head count")
        if not 0.0 <= self.dropout < 1.0:
            bad(f"dropout must lie in [0, 1), got {self.dropout}")
        if self.residual not in MODES:
            bad(f"unknown residual mode {self.residual!r}; choose one of {MODES}")
        if self.site not in SITES:
            bad(f"unknown site {self.site!r}; choose 'block' (alpha x + F(x) once per block) or "
                "'sublayer' (alpha at the attention add and at the MLP add)")
        if self.site != "block" and self.residual not in GATED_MODES:
            bad(f"site={self.site!r} only applies to the gated modes {GATED_MODES}, not {self.residual!r}")
        fixed = self.residual == "fixed"
        if fixed:
            if self.alpha is None or not self.alpha_layers:
                bad("residual='fixed' needs alpha= (in [0, 1]) and alpha_layers= (a list of block "
                    f"indices in 0..{self.n_layer - 1})")
            if not 0.0 <= self.alpha <= 1.0:
                bad(f"alpha must lie in [0, 1] (1 = unmodified skip path, 0 = skip path cut), got {self.alpha}")
            if len(set(self.alpha_layers)) != len(self.alpha_layers):
                bad(f"alpha_layers has duplicates: {self.alpha_layers}")
            for l in self.alpha_layers:
                if not 0 <= l < self.n_layer:
                    bad(f"alpha_layers entry {l} is out of range for {self.n_layer} layers: use "
                        f"0..{self.n_layer - 1}")
        elif self.alpha is not None or self.alpha_layers is not None:
            bad(f"alpha / alpha_layers only apply to residual='fixed', not {self.residual!r}: drop them "
                "or set residual='fixed'")
        if self.residual == "backout":
            if self.n_layer < 2:
                bad("backout needs at least 2 layers (it subtracts a middle layer's stream)")
            if not 1 <= self.backout_layer <= self.n_layer - 1:
                bad(f"backout_layer {self.backout_layer} is out of range: the stream after k blocks, "
                    f"k in 1..{self.n_layer - 1}")
        elif self.backout_layer is not None:
            bad(f"backout_layer only applies to residual='backout', not {self.residual!r}")
        return self

    @classmethod
    def for_tokenizer(cls, tokenizer, **kwargs) -> "GPTConfig":
        """A config whose vocabulary and special-token ids are ``tokenizer``'s (``len(tokenizer)``)."""
        ids = dict(vocab_size=len(tokenizer), bos_token_id=tokenizer.bos_token_id,
                   eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
        clash = {k: kwargs[k] for k in ids if k in kwargs and kwargs[k] != ids[k]}
        if clash:
            raise GPTConfigError(f"{clash} disagree with the tokenizer ({ids}); leave them out")
        return cls(**{**kwargs, **ids})

    def gate_layers(self) -> list[int]:
        """The blocks whose skip path carries a gate (empty for baseline and backout)."""
        if self.residual == "fixed":
            return sorted(self.alpha_layers)
        if self.residual in GATED_MODES:
            return list(range(self.n_layer))
        return []


# --------------------------------------------------------------------------------------------
# The model (nanoGPT's modules)
# --------------------------------------------------------------------------------------------


def make_gate(config: GPTConfig, layer: int) -> nn.Module | None:
    """The skip-path gate of block ``layer`` for ``config.residual`` (None: plain skip)."""
    if layer not in config.gate_layers():
        return None
    if config.residual == "fixed":
        return FixedGate(config.alpha)
    if config.residual == "learned":
        return ScalarGate(config.theta_init)
    if config.residual == "learned-token":
        return TokenGate(config.n_embd, config.theta_init)
    if config.residual == "scalars":
        return SkipScalar(config.scalar_init)
    raise GPTConfigError(f"mode {config.residual!r} has no per-block gate")


class ScaledEmbedding(nn.Embedding):
    """``embed_scale * E[x]``: Gemma's scaled token embedding (the tied matrix stays ``E``)."""

    def __init__(self, num_embeddings: int, embedding_dim: int, embed_scale: float):
        super().__init__(num_embeddings, embedding_dim)
        self.embed_scale = float(embed_scale)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return super().forward(ids) * self.embed_scale


def rotary(x: torch.Tensor) -> torch.Tensor:
    """Rotary position embedding of ``x [B, heads, T, head size]`` (GPT-NeoX half-split, positions
    0..T-1, base :data:`ROPE_BASE`), computed in float32 and returned in ``x``'s dtype."""
    T, hd = x.shape[-2], x.shape[-1]
    inv = ROPE_BASE ** (-torch.arange(0, hd, 2, device=x.device, dtype=torch.float32) / hd)
    angle = torch.arange(T, device=x.device, dtype=torch.float32)[:, None] * inv[None]  # [T, hd/2]
    cos, sin = angle.cos(), angle.sin()
    x1, x2 = x.float()[..., : hd // 2], x.float()[..., hd // 2:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).to(x.dtype)


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.rope = config.embedding == "gemma-rope"
        self.n_head = config.n_head
        self.dropout = config.dropout
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.c_proj.residual_projection = True  # scaled init (GPT._init_weights)
        self.resid_dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        if self.rope:
            q, k = rotary(q), rotary(k)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                           dropout_p=self.dropout if self.training else 0.0)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        hidden = 4 * config.n_embd
        self.geglu = config.mlp == "geglu"
        self.c_fc = nn.Linear(config.n_embd, 2 * hidden if self.geglu else hidden, bias=config.bias)
        self.c_proj = nn.Linear(hidden, config.n_embd, bias=config.bias)
        self.c_proj.residual_projection = True
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.c_fc(x)
        if self.geglu:
            a, b = h.chunk(2, dim=-1)
            h = F.gelu(a) * b
        else:
            h = F.gelu(h)
        return self.dropout(self.c_proj(h))


class Backout(nn.Module):
    """``lambda h_k``: what the last block subtracts (modded-nanogpt's backout)."""

    def __init__(self, init_value: float = 0.5):
        super().__init__()
        self.init_value = float(init_value)
        self.lam = nn.Parameter(torch.tensor(self.init_value))

    def forward(self, h_k: torch.Tensor) -> torch.Tensor:
        return self.lam * h_k


class Block(nn.Module):
    """Pre-LN block: nanoGPT's two adds without a gate; with one, ``x <- alpha x + F(x)`` written as the
    equation, once per block (``site="block"``) or at each add (``"sublayer"``)."""

    def __init__(self, config: GPTConfig, layer: int):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon, bias=config.bias)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon, bias=config.bias)
        self.mlp = MLP(config)
        self.gate = make_gate(config, layer)  # None: the plain skip
        self.per_sublayer = config.site == "sublayer"
        last = layer == config.n_layer - 1
        self.backout = Backout(config.backout_init) if config.residual == "backout" and last else None

    def forward(self, x: torch.Tensor, h_k: torch.Tensor | None = None) -> torch.Tensor:
        a = self.gate
        if a is None:  # nanoGPT's two lines
            x = x + self.attn(self.ln_1(x))
            x = x + self.mlp(self.ln_2(x))
        elif self.per_sublayer:  # alpha at each of the two adds
            x = a(x) * x + self.attn(self.ln_1(x))
            x = a(x) * x + self.mlp(self.ln_2(x))
        else:  # x_{l+1} = alpha x_l + F_l(x_l), F_l = attention, then the MLP on the updated stream
            f = self.attn(self.ln_1(x))
            x = a(x) * x + f + self.mlp(self.ln_2(x + f))
        if self.backout is not None:  # last block of a backout model: subtract lambda h_k
            x = x - self.backout(h_k)
        return x


class GPT(PreTrainedModel, GenerationMixin):
    config_class = GPTConfig
    config: GPTConfig
    base_model_prefix = "transformer"
    main_input_name = "input_ids"
    _no_split_modules = ["Block"]
    _supports_sdpa = True
    _can_compile_fullgraph = True
    _tied_weights_keys = {"lm_head.weight": "transformer.wte.weight"}

    def __init__(self, config: GPTConfig):
        super().__init__(config)
        config.check()
        recipe = config.embedding
        wte = (nn.Embedding(config.vocab_size, config.n_embd) if recipe == "nanogpt"
               else ScaledEmbedding(config.vocab_size, config.n_embd, math.sqrt(config.n_embd)))
        if recipe != "nanogpt":  # unit RMS per coordinate after the sqrt(d) scale; positions at 1/10
            wte.init_std = 1 / math.sqrt(config.n_embd)
        modules = dict(wte=wte)
        if recipe != "gemma-rope":
            modules["wpe"] = nn.Embedding(config.block_size, config.n_embd)
            if recipe == "gemma":
                modules["wpe"].init_std = 0.1
        self.transformer = nn.ModuleDict(dict(
            **modules,
            drop=nn.Dropout(config.dropout),
            h=nn.ModuleList([Block(config, l) for l in range(config.n_layer)]),
            ln_f=nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon, bias=config.bias),
        ))
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.backout_layer = config.backout_layer if config.residual == "backout" else -1
        self.post_init()

    # -- transformers plumbing ----------------------------------------------------------------

    def get_input_embeddings(self) -> nn.Embedding:
        return self.transformer.wte

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.transformer.wte = value

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head

    def set_output_embeddings(self, value: nn.Linear) -> None:
        self.lm_head = value

    @classmethod
    def _supports_default_dynamic_cache(cls) -> bool:
        return False  # no KV cache: generate() feeds the whole prefix each step

    def _init_weights(self, module: nn.Module) -> None:
        std = getattr(module, "init_std", self.config.initializer_range)  # the recipe's embedding scales
        if isinstance(module, (nn.Linear, nn.Embedding)):
            if getattr(module, "residual_projection", False):  # GPT-2: / sqrt(2 L) on the residual adds
                std = std / math.sqrt(2 * self.config.n_layer)
            init.normal_(module.weight, mean=0.0, std=std)
            if getattr(module, "bias", None) is not None:
                init.zeros_(module.bias)
        elif isinstance(module, nn.LayerNorm):
            init.ones_(module.weight)
            if module.bias is not None:
                init.zeros_(module.bias)
        elif isinstance(module, ScalarGate):
            init.constant_(module.theta, module.theta_init)
        elif isinstance(module, TokenGate):
            init.zeros_(module.w)
            init.constant_(module.b, module.theta_init)
        elif isinstance(module, SkipScalar):
            init.constant_(module.lam, module.init)
        elif isinstance(module, Backout):
            init.constant_(module.lam, module.init_value)

    # -- forward -----------------------------------------------------------------------------

    def forward(
        self,
        input_ids: torch.LongTensor,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        labels: torch.LongTensor | None = None,
        logits_to_keep: int | torch.Tensor = 0,
        **kwargs: Any,
    ) -> CausalLMOutput:
        """Logits ``[B, T, vocab]`` (or the positions ``logits_to_keep`` selects) and, with
        ``labels`` (HF convention: ``labels = input_ids``, shifted inside, -100 ignored), the mean
        next-token cross-entropy in float32."""
        B, T = input_ids.shape
        if T > self.config.block_size:
            raise ValueError(f"sequence of {T} tokens exceeds block_size {self.config.block_size}: "
                             "cut the input into windows of at most block_size tokens")
        if attention_mask is not None and not torch.compiler.is_compiling():
            _check_right_padded(attention_mask)
        if position_ids is None:
            position_ids = torch.arange(T, device=input_ids.device)
        tr = self.transformer
        x = tr.wte(input_ids)
        if "wpe" in tr:  # learned positions (rotary ones act inside attention)
            x = x + tr.wpe(position_ids)
        x = tr.drop(x)
        h_k = None
        for l, block in enumerate(tr.h):
            if l == self.backout_layer:
                h_k = x  # the stream after backout_layer blocks (backout mode only)
            x = block(x, h_k)
        x = slice_logits_to_keep(tr.ln_f(x), logits_to_keep)
        logits = self.lm_head(x)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits[:, :-1].float().reshape(-1, logits.shape[-1]),
                                   labels[:, 1:].reshape(-1).to(logits.device), ignore_index=-100)
        return CausalLMOutput(loss=loss, logits=logits)

    # -- what the trainer and the plots need ---------------------------------------------------

    def param_groups(self, weight_decay: float, gate_lr_scale: float | None = None) -> list[dict[str, Any]]:
        """AdamW groups: ``[{"params": decay, "weight_decay": wd}, {"params": no_decay, 0.0}]``, and
        with ``gate_lr_scale`` a third, ``{"params": gates, 0.0, "lr_scale": gate_lr_scale}``.

        Decay: every parameter of dimension >= 2 (matrices, and the tied embeddings under the
        ``nanogpt`` recipe, nanoGPT's rule). No decay: biases, norm gains, the embeddings of the
        ``gemma`` recipes, and the gates (theta, w, b), scalars and the backout lambda (in their own
        group when ``gate_lr_scale`` is given; ``core.fitting`` multiplies the schedule's learning
        rate by a group's ``lr_scale``).
        """
        gate_params = {id(p) for p in self.gate_parameters()}
        embeddings = set() if self.config.embedding == "nanogpt" else {
            id(m.weight) for name, m in self.transformer.items() if name in ("wte", "wpe")}
        decay, no_decay, gates = [], [], []
        for p in self.parameters():  # each tied parameter once
            if not p.requires_grad:
                continue
            if id(p) in gate_params and gate_lr_scale is not None:
                gates.append(p)
            elif p.dim() >= 2 and id(p) not in gate_params and id(p) not in embeddings:
                decay.append(p)
            else:
                no_decay.append(p)
        groups = [{"params": decay, "weight_decay": float(weight_decay)},
                  {"params": no_decay, "weight_decay": 0.0}]
        if gate_lr_scale is not None:
            if not (isinstance(gate_lr_scale, (int, float)) and math.isfinite(gate_lr_scale) and gate_lr_scale > 0):
                raise GPTConfigError(f"gate_lr_scale must be a positive number, got {gate_lr_scale!r}")
            groups.append({"params": gates, "weight_decay": 0.0, "lr_scale": float(gate_lr_scale)})
        return groups

    def gate_parameters(self) -> list[nn.Parameter]:
        """The learned gate / scalar / backout parameters (empty for baseline and fixed)."""
        return [p for m in self.modules() if isinstance(m, (ScalarGate, TokenGate, SkipScalar, Backout))
                for p in m.parameters()]

    @torch.no_grad()
    def residual_alphas(self) -> dict[int, float]:
        """``{layer: alpha}`` for every block: 1.0 on a plain skip, the fixed alpha, ``sigmoid(theta)``,
        ``sigmoid(b)`` for token gates (the alpha of a token with ``LN(x)`` orthogonal to ``w``), or
        the scalar ``lambda``."""
        out = {}
        for l, block in enumerate(self.transformer.h):
            g = block.gate
            out[l] = 1.0 if g is None else float(g()) if isinstance(g, FixedGate) else g.value()
        return out

    @torch.no_grad()
    def token_alphas(self, input_ids: torch.LongTensor) -> torch.Tensor:
        """Each gated block's alpha per token, ``[n_layer, B, T]`` (1.0 on a plain skip): the gate
        evaluated on the stream entering the block, from one forward (at ``site="sublayer"`` the
        attention add's alpha). For scalar gates every token gets the layer's alpha."""
        inputs: list[torch.Tensor | None] = [None] * self.config.n_layer
        hooks = [b.register_forward_pre_hook(lambda m, a, l=l: inputs.__setitem__(l, a[0]))
                 for l, b in enumerate(self.transformer.h)]
        try:
            self(input_ids)
        finally:
            for h in hooks:
                h.remove()
        out = torch.ones(self.config.n_layer, *input_ids.shape)
        for l, (b, x) in enumerate(zip(self.transformer.h, inputs)):
            if b.gate is not None:
                a = b.gate(x)
                out[l] = (a[..., 0] if isinstance(a, torch.Tensor) and a.ndim else torch.as_tensor(a)).float()
        return out

    @torch.no_grad()
    def learned_scalars(self) -> dict[str, float]:
        """Flat ``{name: value}`` of what the residual mode learns, for JSON logs: ``alpha/<l>``
        (learned modes), ``backout_lambda`` (backout)."""
        out: dict[str, float] = {}
        if self.config.residual in ("learned", "learned-token", "scalars"):
            out.update({f"alpha/{l}": a for l, a in self.residual_alphas().items()})
        last = self.transformer.h[-1]
        if last.backout is not None:
            out["backout_lambda"] = float(last.backout.lam)
        return out

    def num_params(self, non_embedding: bool = True) -> int:
        """Parameter count (tied weights once); ``non_embedding`` drops the position embedding
        (nanoGPT's convention: the token embedding counts, it is the output head too)."""
        n = sum(p.numel() for p in self.parameters())
        if non_embedding and "wpe" in self.transformer:
            n -= self.transformer.wpe.weight.numel()
        return n


def _check_right_padded(mask: torch.Tensor) -> None:
    if mask.ndim != 2:
        raise ValueError(f"attention_mask must be [batch, seq] (1 = token, 0 = padding), got shape {tuple(mask.shape)}")
    if bool((mask[:, 1:] > mask[:, :-1]).any()):
        raise ValueError("attention_mask has padding before tokens (left padding); this model takes "
                         "right-padded batches only (causal attention makes right padding harmless)")


AutoConfig.register(MODEL_TYPE, GPTConfig, exist_ok=True)
AutoModelForCausalLM.register(GPTConfig, GPT, exist_ok=True)
