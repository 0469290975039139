"""Sizes live here, and only here: the smoke / default / paper profiles.

- ``smoke``: tiny random models and a few windows, so every notebook runs in seconds (tests, CI).
- ``default``: the real study on a 2-core CPU with the embedded models (SmolLM2-135M, Gemma-3-270M).
- ``class``: the embedded models at sizes a lecture can wait for (notebooks 00-04 in minutes on 2 cores);
  its C1 verdicts are marked underpowered and 03's tuned lens is left to ``default``. Sized for 00-04;
  05-10 run small but real.
- ``paper``: the paper's scale on GPUs: Gemma-2-2B and friends from the hub.

A notebook's ``parameters`` cell declares ``profile = "default"`` and its other parameters as
``None`` ("take the profile's value"); the runner injects the profile's value of every parameter the
cell declares, and ``resolve`` fills in whatever is still None when a notebook runs interactively.
"""
from __future__ import annotations

import copy
import dataclasses
import functools
import json
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, Iterable
from . import paths

if TYPE_CHECKING:
    import pandas

# Each section owns the parameters of a group of notebooks: {section: {profile: {key: value}}}.
# Keys must be unique across sections (the runner injects them by name).
SECTIONS: dict[str, dict[str, dict[str, Any]]] = {
    "common": {
        # show_solutions: run and show the exercises' solutions (the smoke run executes them so
        # they cannot rot; readers and students get them folded / hidden)
        # extra_models: read only where their cost fits (notebook 00's table and perplexity, 02's maps,
        # 03's logit lens with its C1 rows and shift table; not 03's tuned lens or causal pass, not
        # 04-05). default: Qwen2.5-Coder-1.5B (28 layers; 03's logit lens over it costs about as much as
        # the rest of 03); paper: none (Gemma-2-2B is in models there).
        "smoke": {"models": ["tiny-llama", "tiny-gemma3"], "extra_models": ["tiny-gpt2"], "device": "cpu",
                  "seed": 0, "show_solutions": True},
        "default": {"models": ["smollm2-135m", "gemma3-270m"], "extra_models": ["qwen25-coder-1.5b"],
                    "device": "cpu", "seed": 0, "show_solutions": False},
        "paper": {"models": ["google/gemma-2-2b", "smollm2-135m", "gemma3-270m"], "extra_models": [],
                  "device": "cuda", "seed": 0, "show_solutions": False},
    },
    # 00: models, corpora and a perplexity sanity check; 01: the model and sentence it follows
    # (any name load_model accepts and any sentence of 3+ tokens: students change them)
    "tour": {
        "smoke": {"ppl_corpus": "wikitext-2", "ppl_split": "validation", "ppl_window": 64,
                  "ppl_windows": 4, "ppl_doc_limit": 2, "ppl_doc_max_length": 64, "example_model": "tiny-llama",
                  "example_sentence": "The Eiffel Tower is in Paris, the capital of France."},
        # ppl_doc_limit / ppl_doc_max_length: lm-eval's per-article perplexity (evaluate.document_perplexity)
        # on that many articles, in windows of that many tokens (None: every article / the model's
        # own maximum, lm-eval's defaults); 2 articles of WikiText-2 validation are ~9k tokens per model
        # 16 windows x 256 tokens: a sanity check (a trained model lands hundreds of times below the
        # uniform guess; the SE over 16 windows is a few percent), small enough for notebook 00's
        # ~1.5 min budget from scratch; the harness (benchmarks/bench_evaluate.py) measures perplexity
        "default": {"ppl_corpus": "wikitext-2", "ppl_split": "validation", "ppl_window": 256,
                    "ppl_windows": 16, "ppl_doc_limit": 2, "ppl_doc_max_length": 256, "example_model": "smollm2-135m",
                    "example_sentence": "The Eiffel Tower is in Paris, the capital of France."},
        "paper": {"ppl_corpus": "wikitext-2", "ppl_split": "validation", "ppl_window": 1024,
                  "ppl_windows": 256, "ppl_doc_limit": None, "ppl_doc_max_length": None, "example_model": "google/gemma-2-2b",
                  "example_sentence": "The Eiffel Tower is in Paris, the capital of France."},
    },
    # 01-03: localizing the shift (lens, metrics, causal profile, tuned lens)
    "localize": {
        "smoke": {"lens_corpus": "wikitext-103", "lens_split": "validation", "lens_window": 32,
                  "lens_windows": 4, "lens_batch": 2, "n_boot": 50, "lens_matmul": "float32",
                  "lens_positions": None, "lens_check_windows": 3,
                  "lens_sentences": ["The Eiffel Tower is in Paris, the capital of France.",
                                     "One, two, three, four, five, six, seven, eight."]},
        # lens_windows x lens_positions: sized so that every outcome of C1's rules can happen on both
        # models (30 and 18 blocks; C1.middle's Bonferroni family 27 and 15 layers): 344 is
        # verdicts.c1_min_windows(16, [30, 18]), the fewest windows of 16 positions at which
        # verdicts.c1_reach finds each outcome reachable at 80% power, with the noise measured on both
        # models (verdicts.C1_NOISE_*, benchmarks/c1-noise.json). The binding outcome: C1.middle
        # certifying a layer exactly at the unigram level (its Bonferroni MDE <= the 0.02 margin); at
        # the former 32 x 16 its interval's half-width alone (0.051) exceeded the margin. 16 positions
        # (as before): at the measured costs (SmolLM2 ~0.17 s per window + ~0.019 s per position,
        # Gemma-3 ~1-2 s per window of 16 positions, benchmarks/c1-noise.json) any of 12-32 positions
        # (with c1_min_windows' windows) costs within ~5% of the cheapest for this power. The lens
        # reads 10.75x the positions it read at 32 windows (5,504 per model, 44,032 tokens through the
        # model): ~9-14 min per pass over both models on 2 cores (Gemma-3 was timed under load), and
        # notebook 03 makes two such passes (logit and tuned lens).
        # float32 unembedding: faster than bf16 on a CPU without native bf16, and exact.
        "default": {"lens_corpus": "wikitext-103", "lens_split": "validation", "lens_window": 128,
                    "lens_windows": 344, "lens_batch": 8, "n_boot": 1000, "lens_matmul": "float32",
                    "lens_positions": 16, "lens_check_windows": 12,
                    "lens_sentences": ["The Eiffel Tower is in Paris, the capital of France.",
                                       "One, two, three, four, five, six, seven, eight.",
                                       "She opened the door, looked outside and saw that it was raining."]},
        "paper": {"lens_corpus": "wikitext-103", "lens_split": "validation", "lens_window": 256,
                  "lens_windows": 512, "lens_batch": 16, "n_boot": 2000, "lens_matmul": "float32",
                  "lens_positions": None, "lens_check_windows": 128,
                  "lens_sentences": ["The Eiffel Tower is in Paris, the capital of France.",
                                     "One, two, three, four, five, six, seven, eight.",
                                     "She opened the door, looked outside and saw that it was raining."]},
    },
    # 03 (causal/tuned): tuned lens (tuned_lens.py) and causal localization (causal.py). tuned_steps is a
    # cap: a fit ends once every layer's held-out KL fell by < rel_tol (1%) over tuned_patience x
    # tuned_eval_every steps; layers still improving at the cap are marked and kept out of verdicts.
    # tuned_init "lstsq": each translator starts at the least-squares map h_l -> h_L fitted on the
    # first tuned_lstsq_windows training windows (ridge tuned_ridge x the mean variance; 0..1e-3 gave
    # the same held-out KL), then KL refinement (Adam, tuned_lr) keeps per layer the better of start
    # and refined. default: SmolLM2 converged on every layer by step 825 (0.33 s/step on 2 idle
    # cores); the cap of 1200 leaves room (benchmarks/bench-tuned-lens.json has both models).
    "causal": {
        "smoke": {"tuned_corpus": "wikitext-2", "tuned_window": 32, "tuned_train_windows": 16,
                  "tuned_val_windows": 2, "tuned_es_windows": 1, "tuned_batch": 2, "tuned_steps": 4,
                  "tuned_lr": 1e-3, "tuned_eval_every": 2, "tuned_patience": 2, "tuned_vocab": None,
                  "tuned_init": "lstsq", "tuned_lstsq_windows": 8, "tuned_ridge": 1e-3,
                  "causal_corpus": "wikitext-103", "causal_split": "validation", "causal_window": 32,
                  "causal_windows": 4, "causal_batch": 2, "causal_alphas": [0.0, 0.5],
                  "causal_directions": ["input", "next", "random"], "causal_stride": 1},
        "default": {"tuned_corpus": "wikitext-2", "tuned_window": 64, "tuned_train_windows": 256,
                    "tuned_val_windows": 3, "tuned_es_windows": 2, "tuned_batch": 4, "tuned_steps": 1200,
                    "tuned_lr": 1e-3, "tuned_eval_every": 25, "tuned_patience": 2, "tuned_vocab": 2048,
                    "tuned_init": "lstsq", "tuned_lstsq_windows": 64, "tuned_ridge": 1e-3,
                    "causal_corpus": "wikitext-103", "causal_split": "validation", "causal_window": 24,
                    "causal_windows": 8, "causal_batch": 8, "causal_alphas": [0.0],
                    "causal_directions": ["input", "next", "random"], "causal_stride": 2},
        "paper": {"tuned_corpus": "wikitext-2", "tuned_window": 512, "tuned_train_windows": 4096,
                  "tuned_val_windows": 64, "tuned_es_windows": 16, "tuned_batch": 16, "tuned_steps": 2000,
                  "tuned_lr": 1e-3, "tuned_eval_every": 50, "tuned_patience": 4, "tuned_vocab": None,
                  "tuned_init": "lstsq", "tuned_lstsq_windows": 1024, "tuned_ridge": 1e-3,
                  "causal_corpus": "wikitext-103", "causal_split": "validation", "causal_window": 256,
                  "causal_windows": 256, "causal_batch": 16, "causal_alphas": [0.0, 0.5],
                  "causal_directions": ["input", "next", "random"], "causal_stride": 1},
    },
    # 04-05: attenuation on pretrained models (sweep, gates). sweep_windows: the layer x alpha grid's
    # windows (the late-cut candidates are chosen on them); sweep_confirm_windows: the next windows of
    # the same seed, on which only the chosen candidates are swept (confirmation). atten_lens_*: the
    # lens windows (test split) for misalignment and the gates' alpha; atten_lens_positions: analysed
    # positions per window (None: all). gate_steps is a cap: fits end by held-out early stopping
    # (gate_eval_every, gate_patience); a fit that hits the cap is inconclusive in the C3 rules.
    # eval_*: notebook 05's test-loss windows and benchmark items per task.
    "attenuate": {
        "smoke": {"sweep_corpus": "wikitext-103", "sweep_split": "validation", "sweep_window": 32,
                  "sweep_windows": 6, "sweep_confirm_windows": 4, "sweep_batch": 4,
                  "sweep_alphas": [0.0, 0.25, 0.5, 0.75, 0.9, 1.0],
                  "atten_boot": 100, "atten_lens_windows": 4, "atten_lens_window": 32,
                  "atten_lens_positions": 8,
                  "gate_kinds": ["scalar", "token"], "gate_seeds": [0, 1], "gate_window": 32,
                  "gate_train": 8, "gate_heldout": 4, "gate_batch": 4, "gate_steps": 2, "gate_lr": 0.1,
                  "gate_eval_every": 1, "gate_patience": 2, "gate_bf16": False,
                  "eval_windows": 4, "eval_window": 32, "eval_items": 4},
        # Sized for 2 CPU cores (the last measured run times: figures/RUNS.json, shown at the top
        # of notebooks 04/05 and in the README); 05 after 04 reuses 04's sweep and lens.
        "default": {"sweep_corpus": "wikitext-103", "sweep_split": "validation", "sweep_window": 64,
                    "sweep_windows": 8, "sweep_confirm_windows": 64, "sweep_batch": 8,
                    "sweep_alphas": [0.0, 0.5, 0.9, 1.0],
                    "atten_boot": 1000, "atten_lens_windows": 16, "atten_lens_window": 64,
                    "atten_lens_positions": 8,
                    "gate_kinds": ["scalar", "token"], "gate_seeds": [0, 1], "gate_window": 64,
                    "gate_train": 32, "gate_heldout": 4, "gate_batch": 2, "gate_steps": 100,
                    "gate_lr": 0.2, "gate_eval_every": 4, "gate_patience": 2, "gate_bf16": False,
                    "eval_windows": 24, "eval_window": 64, "eval_items": 12},
        "paper": {"sweep_corpus": "wikitext-103", "sweep_split": "validation", "sweep_window": 512,
                  "sweep_windows": 64, "sweep_confirm_windows": 256, "sweep_batch": 8,
                  "sweep_alphas": [0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 1.0],
                  "atten_boot": 2000, "atten_lens_windows": 128, "atten_lens_window": 256,
                  "atten_lens_positions": None,
                  "gate_kinds": ["scalar", "token"], "gate_seeds": [0, 1, 2, 3, 4], "gate_window": 512,
                  "gate_train": 2048, "gate_heldout": 128, "gate_batch": 8, "gate_steps": 5000,
                  "gate_lr": 0.05, "gate_eval_every": 50, "gate_patience": 4, "gate_bf16": True,
                  "eval_windows": 256, "eval_window": 512, "eval_items": None},
    },
    # 09: which sublayer removes the input token (measure/attribution.py): attr_windows windows of
    # attr_window tokens per pretrained model (every position analysed: no vocabulary matmul, so
    # positions are cheap), bootstrap over windows; attr_train_windows WikiText-2 test windows of the
    # training context per trained GPT (seeds are the unit there). default: ~1.2-2.4 s per 128-token
    # window per model on 2 shared CPU cores (measured), so 48 windows ~ 2-4 min for both models.
    "attribution": {
        "smoke": {"attr_corpus": "wikitext-103", "attr_split": "validation", "attr_window": 32,
                  "attr_windows": 4, "attr_batch": 2, "attr_positions": None, "attr_boot": 50,
                  "attr_train_windows": 4},
        "default": {"attr_corpus": "wikitext-103", "attr_split": "validation", "attr_window": 128,
                    "attr_windows": 48, "attr_batch": 8, "attr_positions": None, "attr_boot": 1000,
                    "attr_train_windows": 64},
        "paper": {"attr_corpus": "wikitext-103", "attr_split": "validation", "attr_window": 256,
                  "attr_windows": 256, "attr_batch": 16, "attr_positions": None, "attr_boot": 2000,
                  "attr_train_windows": 256},
    },
    # the evaluation harness (evaluate.py; benchmarks/bench_evaluate.py): tasks, items per task
    # (None = the full set), sliding-window context/stride for perplexity, rows per forward
    "harness": {
        "smoke": {"harness_tasks": ["wikitext-103-validation", "lambada", "piqa", "arc-easy",
                                    "arc-challenge"],
                  "harness_limits": {"wikitext-103-validation": 2, "lambada": 8, "piqa": 8,
                                     "arc-easy": 8, "arc-challenge": 8},
                  "harness_context": 64, "harness_stride": 32, "harness_batch": 8},
        "default": {"harness_tasks": ["wikitext-103-validation", "lambada", "piqa", "arc-easy",
                                      "arc-challenge"],
                    "harness_limits": {"wikitext-103-validation": 40, "lambada": 500, "piqa": 500,
                                       "arc-easy": 500, "arc-challenge": 500},
                    "harness_context": 512, "harness_stride": 256, "harness_batch": 16},
        "paper": {"harness_tasks": ["wikitext-2-validation", "wikitext-2-test",
                                    "wikitext-103-validation", "wikitext-103-test", "lambada", "piqa",
                                    "arc-easy", "arc-challenge"],
                  "harness_limits": {"wikitext-2-validation": None, "wikitext-2-test": None,
                                     "wikitext-103-validation": None, "wikitext-103-test": None,
                                     "lambada": None, "piqa": None, "arc-easy": None,
                                     "arc-challenge": None},
                  "harness_context": 1024, "harness_stride": 512, "harness_batch": 32},
    },
    # 06-08: training GPTs with the attenuation in place (residshift/train/trainer.py TrainConfig: key
    # train_<field> sets its field, stage() below; train_batch sets batch_size).
    "train": {
        "smoke": {"train_layers": 4, "train_heads": 2, "train_width": 32, "train_context": 32,
                  "train_vocab": None, "train_mlp": "gelu", "train_dropout": 0.0, "train_bias": False,
                  "train_tokenizer": "bpe:wikitext-2:1024", "train_corpus": "wikitext-2",
                  "train_split": "train", "train_val_corpus": "wikitext-2", "train_val_split": "validation",
                  "train_val_tokens": 100_000, "train_tokens": 8 * 32 * 12, "train_batch": 8,
                  "train_accumulate": 1, "train_lr": 3e-3, "train_betas": [0.9, 0.95],
                  "train_weight_decay": 0.1, "train_warmup": 2, "train_min_lr_ratio": 0.1,
                  "train_grad_clip": 1.0, "train_eval_every": 6, "train_eval_windows": 8,
                  "train_bf16": False, "train_compile": False, "train_checkpoint_every": 100,
                  "train_seeds": [0, 1, 2], "train_cut_layers": [1, 3], "train_cut_alphas": [0.0, 0.5],
                  "train_variants": ["learned", "learned-token", "backout", "scalars"],
                  "train_bench_tasks": ["wikitext-2-test", "lambada", "piqa", "arc-easy"],
                  "train_bench_limits": {"wikitext-2-test": 2, "lambada": 8, "piqa": 8, "arc-easy": 8},
                  "train_lens_windows": 6, "train_lens_positions": None, "train_boot": 100,
                  "train_gate_init": 3.0,
                  "train_embedding": "gemma", "train_gate_lr": 0.05, "train_cut_site": "sublayer",
                  "train_contrast_embedding": "nanogpt",
                  "train_pilot_recipes": ["nanogpt", "gemma", "gemma-rope"]},
        "default": {"train_layers": 6, "train_heads": 4, "train_width": 128, "train_context": 128,
                    "train_vocab": None, "train_mlp": "gelu", "train_dropout": 0.0, "train_bias": False,
                    "train_tokenizer": "bpe:wikitext-2:1024", "train_corpus": "wikitext-2",
                    "train_split": "train", "train_val_corpus": "wikitext-2",
                    "train_val_split": "validation", "train_val_tokens": 1_000_000,
                    "train_tokens": 350 * 8 * 128, "train_batch": 8, "train_accumulate": 1,
                    "train_lr": 3e-3, "train_betas": [0.9, 0.95], "train_weight_decay": 0.1,
                    "train_warmup": 20, "train_min_lr_ratio": 0.1, "train_grad_clip": 1.0,
                    # Precision is part of the profile, not of the machine: fp32. bf16 autocast was slower
                    # at this shape on every CPU measured (0.32x fp32 on an Intel Xeon without native bf16,
                    # benchmarks/bench-train.json; 0.81x on an Intel Xeon with amx_bf16 and avx512_bf16,
                    # bench-train-xeon-amx.json; 0.91x on an AMD EPYC with avx512_bf16), and a grid
                    # trained in bf16 on one machine flipped 5 of notebook 08's verdicts against the
                    # same grid in fp32 on another. The committed grid ran in fp32 (same run keys).
                    "train_eval_every": 50, "train_eval_windows": 64, "train_bf16": False,
                    "train_compile": False, "train_checkpoint_every": 50,
                    # the grid (notebooks 06-08, study.training.grid): baseline; alpha = 0 at each block
                    # of train_cut_layers (does the block matter?); every other alpha of
                    # train_cut_alphas at the LATE blocks among them (does a late cut help, and which
                    # alpha?); train_variants; the baseline again with train_contrast_embedding; all
                    # x train_seeds, paired by seed. Seeds are the unit of every training verdict, so
                    # five of them; one run is ~50-55 s here (fp32, 2 threads), 14 x 5 = 70 runs, about
                    # an hour. The relatives (backout, scalars) did not fit beside five seeds and are
                    # dropped at this profile (they stay at smoke and paper).
                    "train_seeds": [0, 1, 2, 3, 4], "train_cut_layers": [0, 2, 4, 5],
                    "train_cut_alphas": [0.0, 0.5, 0.75, 0.9],
                    "train_variants": ["learned", "learned-token"],
                    "train_bench_tasks": ["wikitext-2-validation", "wikitext-2-test", "wikitext-103-validation",
                                          "wikitext-103-test", "lambada", "piqa", "arc-easy", "arc-challenge"],
                    # the harness on the baseline, the best fixed cut and the two learned gates x 5 seeds
                    # (study.training.bench_variants): ~0.05 s per perplexity window, ~0.04 (LAMBADA) to
                    # ~0.14 s (ARC) per item here, so ~45 s per model at these limits, ~15 min for 07's
                    # table. 100 items cannot detect a 0.03 accuracy drop (that needs thousands: 07
                    # prints how many), so C4 says "not assessable at this profile" with the items needed;
                    # the table still shows where each task sits against chance.
                    "train_bench_limits": {"wikitext-2-validation": 25, "wikitext-2-test": 25,
                                           "wikitext-103-validation": 25, "wikitext-103-test": 25,
                                           "lambada": 100, "piqa": 100, "arc-easy": 100, "arc-challenge": 100},
                    "train_lens_windows": 64, "train_lens_positions": None, "train_boot": 1000,
                    # the learned gates' starting logit theta (alpha = sigmoid(theta)) and their own
                    # peak learning rate (a third optimizer group, no weight decay, as speed-running GPTs
                    # train their scalars): at the weights' 3e-3 theta moved <= 0.3 in 350 steps, so
                    # where the gates ended said where they started. theta = 3 (alpha = 0.953) rather
                    # than the model's 6 (0.9975): at 6 the sigmoid's slope is 0.0025, so a gate that
                    # training pushes towards 1 can move alpha by at most 0.0025 -- below the 0.01 floor
                    # under which a gate "did not move" -- whatever its learning rate; at 3 it can move
                    # either way. The paper profile (2,000 steps) keeps the model's defaults.
                    "train_gate_init": 3.0,
                    # how h_0 is built (core.models.gpt.RECIPES): "gemma", the recipe the pilot chose
                    # (benchmarks/pilot-recipes.json: the first whose baseline reproduces C1.early and
                    # C1.late); the nanoGPT embedding trains as the contrast arm (notebook 08). Fixed
                    # cuts act where the authors' harness cut: at both adds of the block ("sublayer").
                    "train_embedding": "gemma", "train_gate_lr": 0.05, "train_cut_site": "sublayer",
                    "train_contrast_embedding": "nanogpt",
                    "train_pilot_recipes": ["nanogpt", "gemma", "gemma-rope"]},
        # the authors' setup (docs/paper.md): GPT-2 small shape with GEGLU, FineWeb-Edu
        # sample-10BT streamed, GPT-2 tokenizer (vocabulary padded to 50,304), 2,000 steps of
        # 4,194,304 tokens (256 windows x 16 accumulation x 1,024; 8 GPUs: 32 windows per GPU).
        "paper": {"train_layers": 12, "train_heads": 12, "train_width": 768, "train_context": 1024,
                  "train_vocab": 50304, "train_mlp": "geglu", "train_dropout": 0.0, "train_bias": False,
                  "train_tokenizer": "gpt2",
                  "train_corpus": {"path": "HuggingFaceFW/fineweb-edu", "name": "sample-10BT",
                                   "split": "train"},
                  "train_split": "train", "train_val_corpus": None, "train_val_split": "validation",
                  "train_val_tokens": 10_485_760, "train_tokens": 2000 * 4_194_304, "train_batch": 256,
                  "train_accumulate": 16, "train_lr": 6e-4, "train_betas": [0.9, 0.95],
                  "train_weight_decay": 0.1, "train_warmup": 100, "train_min_lr_ratio": 0.1,
                  "train_grad_clip": 1.0, "train_eval_every": 100, "train_eval_windows": 512,
                  "train_bf16": True, "train_compile": True, "train_checkpoint_every": 100,
                  "train_seeds": [0, 1, 2], "train_cut_layers": None, "train_cut_alphas": [0.0, 0.5],
                  "train_variants": ["learned", "learned-token", "backout", "scalars"],
                  "train_bench_tasks": ["wikitext-2-validation", "wikitext-2-test", "wikitext-103-validation",
                                        "wikitext-103-test", "lambada", "piqa", "arc-easy", "arc-challenge"],
                  "train_bench_limits": {"wikitext-2-validation": None, "wikitext-2-test": None,
                                         "wikitext-103-validation": None, "wikitext-103-test": None,
                                         "lambada": None, "piqa": None, "arc-easy": None, "arc-challenge": None},
                  "train_lens_windows": 256, "train_lens_positions": None, "train_boot": 2000,
                  "train_gate_init": None,
                  # the authors' cut removes both adds of a block (their harness's skip_first)
                  "train_embedding": "nanogpt", "train_gate_lr": None, "train_cut_site": "sublayer",
                  "train_contrast_embedding": "gemma",
                  "train_pilot_recipes": ["nanogpt", "gemma", "gemma-rope"]},
    },
    # 10: the scale ladder (study/ladder.py, `python -m residshift ladder`, `make ladder`): baselines of the
    # training half's recipe at ladder_base_tokens x 4^k tokens (k < ladder_rungs) for each shape
    # [depth, width, heads] of ladder_shapes, one seed; the logit lens read at every checkpoint of
    # ladder_base_tokens x 2^j tokens (j >= -2) on the ladder_lens_windows held-out windows notebook 08
    # reads. A rung trains on train_corpus while it needs at most ladder_max_epochs passes over it (about
    # as good as fresh data up to 4: Muennighoff et al. 2023, "Scaling data-constrained language
    # models"), else on ladder_large_corpus. ladder_hours: the CPU/GPU hours the planner may spend
    # (rungs whose measured cost does not fit are left out and listed). default: 6, 12 and 24 blocks at the
    # training half's width; under the 4-epoch rule WikiText-2's training split supplies rungs 0-2 (the
    # epochs each needed are in notebook 10's cost table), and rung 3 needs WikiText-103's training split
    # (the hub, or data/; `-p ladder_rungs=4` asks for it). The mitigation
    # (study/mitigation.py): baseline vs alpha = ladder_mitigation_alpha at the last block vs learned gates on
    # the chosen rung, a pilot of ladder_mitigation_pilot seeds, then the seed count whose MDE reaches the
    # loss margin (at most ladder_mitigation_max_seeds, within ladder_mitigation_hours).
    "ladder": {
        "smoke": {"ladder_shapes": [[5, 32, 2], [6, 32, 2]], "ladder_base_tokens": 8 * 32 * 6, "ladder_rungs": 2,
                  "ladder_seed": 0, "ladder_max_epochs": 4, "ladder_large_corpus": "wikitext-103",
                  "ladder_lens_windows": 6, "ladder_hours": 1.0, "ladder_speed_steps": 3,
                  "ladder_in_study": True,
                  "ladder_mitigation_alpha": 0.9, "ladder_mitigation_pilot": 2, "ladder_mitigation_max_seeds": 3,
                  "ladder_mitigation_hours": 0.5},
        "default": {"ladder_shapes": [[6, 128, 4], [12, 128, 4], [24, 128, 4]], "ladder_base_tokens": 350 * 8 * 128,
                    "ladder_rungs": 3, "ladder_seed": 0, "ladder_max_epochs": 4,
                    "ladder_large_corpus": "wikitext-103", "ladder_lens_windows": 64, "ladder_hours": 2.0,
                    "ladder_speed_steps": 30, "ladder_in_study": False,
                    "ladder_mitigation_alpha": 0.9, "ladder_mitigation_pilot": 3, "ladder_mitigation_max_seeds": 10,
                    "ladder_mitigation_hours": 1.0},
        # the GPU ladder: GPT-2-small's shape and a deeper one, from 1/64 of the paper profile's budget up
        "paper": {"ladder_shapes": [[12, 768, 12], [24, 768, 12]], "ladder_base_tokens": 2000 * 4_194_304 // 64,
                  "ladder_rungs": 4, "ladder_seed": 0, "ladder_max_epochs": 4,
                  "ladder_large_corpus": "wikitext-103", "ladder_lens_windows": 256, "ladder_hours": 200.0,
                  "ladder_speed_steps": 20, "ladder_in_study": False,
                  "ladder_mitigation_alpha": 0.9, "ladder_mitigation_pilot": 3, "ladder_mitigation_max_seeds": 10,
                  "ladder_mitigation_hours": 100.0},
    },
    # 11: the vocabulary probe (study/probe.py, `python -m residshift ladder --probe`, `make probe`): baselines
    # of the ladder's recipe for each cell [depth, width, heads, vocabulary] of probe_cells (a vocabulary is
    # the size of a BPE trained on WikiText-2's training split, or a tokenizer spec such as "smollm2-135m"),
    # at the ladder's rung probe_rung (ladder_base_tokens x 4^probe_rung tokens), one run per seed of
    # probe_seeds; read by the ladder's lens, recorded under names of their own. Default: 1,024 vs 16,384
    # tokens at width 128, and width 128 vs 256 at 16,384, 12 blocks, 1.4M tokens, 3 seeds (the plan
    # measures each cell's tokens/s and prints the hours before anything trains).
    "probe": {
        "smoke": {"probe_cells": [[4, 32, 2, 300], [4, 32, 2, 512]], "probe_seeds": [0, 1, 2], "probe_rung": 0,
                  "probe_hours": 1.0},
        "default": {"probe_cells": [[12, 128, 4, 1024], [12, 128, 4, 16384], [12, 256, 4, 16384]],
                    "probe_seeds": [0, 1, 2], "probe_rung": 1, "probe_hours": 3.0},
        # GPT-2-small's shape with the ladder's vocabulary and with a realistic one
        "paper": {"probe_cells": [[12, 768, 12, 1024], [12, 768, 12, 32768]], "probe_seeds": [0, 1, 2],
                  "probe_rung": 1, "probe_hours": 50.0},
    },
}

# class: the default profile's values except where CLASS says, so a lecture runs notebooks 00-04 on the
# embedded models in minutes on a 2-core CPU from warm model caches (`make study PROFILE=class`; the list
# is CLASS_NOTEBOOKS). Sized for 00-04; 05-10 get small but real values (the same models and corpora, a
# fraction of the windows, steps and seeds). Its verdicts are honestly weak: 8 lens windows of 16 positions cannot reach every
# outcome of C1's sub-rules (verdicts.c1_reach; the rows say "underpowered at this profile"). The
# estimates below scale the default's measured costs (the comments above, figures/RUNS.json).
CLASS: dict[str, dict[str, Any]] = {
    # no Qwen2.5-Coder-1.5B: its load and its logit lens in 03 cost about as much as the rest of 03
    "common": {"extra_models": []},
    # 00 at default: 246 s from empty caches (models dequantized in it); its perplexity cell 40 s for 16
    # windows + 2 articles: 8 windows + 1 article ~20 s
    "tour": {"ppl_windows": 8, "ppl_doc_limit": 1},
    # 8 windows x 16 positions: ~0.5 s (SmolLM2) + ~1-2 s (Gemma-3) per window, ~25 s per lens pass of
    # both models (default: 344 windows, ~9-14 min). C1: unreachable outcomes, rows marked underpowered.
    # lens_check_windows 4: the preprocessing passes (default 12 windows, 40 s) ~15 s.
    "localize": {"lens_windows": 8, "lens_check_windows": 4},
    # tuned lens: not trained (tuned_steps 0; 03 then leaves it to the default run's committed figure).
    # 50 Adam steps after the closed-form start left 27 of SmolLM2's 30 and 12 of Gemma-3's 18 layers
    # still improving and took 317 s of 03's 769 s (a loaded 2-core AMD EPYC); the other tuned_* values
    # are what `-p tuned_steps=50` would fit. causal pass: 4 windows of 24 tokens (default 8).
    "causal": {"tuned_train_windows": 32, "tuned_val_windows": 2, "tuned_es_windows": 1, "tuned_steps": 0,
               "tuned_eval_every": 10, "tuned_lstsq_windows": 16, "causal_windows": 4, "causal_batch": 4},
    # 04 (in the class run): every block x the default's alphas (alpha = 0 at block 0 included) on 4 windows
    # of 32 tokens, 8 confirmation windows, 4 lens windows. At 4 x 64 tokens, 16 and 8 it took 557 s on a
    # loaded 2-core AMD EPYC (sweep 349 s, Gemma-3's 262k-token head dominating each replay; confirmation
    # 75 s; the lens with and without the cut 94 s): halving the tokens of each, ~4-5 min there.
    # 05 (not timed at class): a quarter of the default's windows and items, 20 gate steps.
    "attenuate": {"sweep_window": 32, "sweep_windows": 4, "sweep_confirm_windows": 8, "atten_lens_windows": 4,
                  "gate_train": 8, "gate_heldout": 2, "gate_steps": 20, "eval_windows": 8, "eval_items": 4},
    # 09: 8 windows per pretrained model (~10-20 s each), 16 per trained GPT
    "attribution": {"attr_windows": 8, "attr_train_windows": 16},
    "harness": {"harness_limits": {"wikitext-103-validation": 5, "lambada": 50, "piqa": 50,
                                   "arc-easy": 50, "arc-challenge": 50}},
    # 06-08: the default's GPT shape, 100 steps instead of 350, three seeds (the fewest the seed tests
    # take; verdicts.seed_reach says 5 would be needed), one early and one late cut, the learned gates:
    # 6 runs x 3 seeds of ~15 s, ~5 min (default: 70 runs, about an hour)
    "train": {"train_tokens": 100 * 8 * 128, "train_val_tokens": 200_000, "train_warmup": 10,
              "train_eval_every": 25, "train_eval_windows": 16, "train_checkpoint_every": 25,
              "train_seeds": [0, 1, 2], "train_cut_layers": [0, 5], "train_cut_alphas": [0.0, 0.9],
              "train_variants": ["learned"],
              "train_bench_tasks": ["wikitext-2-test", "lambada", "piqa", "arc-easy"],
              "train_bench_limits": {"wikitext-2-test": 5, "lambada": 20, "piqa": 20, "arc-easy": 20},
              "train_lens_windows": 16},
    # 10 reads the ladder's records (benchmarks/ladder/class/: none committed); `make ladder PROFILE=class`
    # plans two shapes and two rungs within a quarter of an hour
    "ladder": {"ladder_shapes": [[6, 128, 4], [12, 128, 4]], "ladder_base_tokens": 100 * 8 * 128,
               "ladder_rungs": 2, "ladder_lens_windows": 16, "ladder_hours": 0.25, "ladder_speed_steps": 10,
               "ladder_mitigation_max_seeds": 5, "ladder_mitigation_hours": 0.25},
    # 11 reads the probe's records (none committed for class); the default's cells
    "probe": {},
}
for _section, _changes in CLASS.items():
    SECTIONS[_section]["class"] = {**copy.deepcopy(SECTIONS[_section]["default"]), **copy.deepcopy(_changes)}
# The notebooks the class profile is sized for: `make study PROFILE=class` runs them (the Makefile's
# CLASS_NOTEBOOKS says the same; tested), `make class-key` renders them with their solutions into docs/class/.
CLASS_NOTEBOOKS = ("00", "01", "02", "03", "04")

PROFILE_NAMES = ("smoke", "class", "default", "paper")

# Integer keys for which 0 is a real choice: no warmup, checkpoints only at evaluations and at the end
# (core.fitting), no preprocessing check of C1.depth (tools.lens_command), no tuned lens (notebook 03; the
# class profile's value). The value check (check_values: notebooks and the runner's -p) asks for at least 1
# of every other such count.
ZERO_ALLOWED = frozenset({"train_warmup", "train_checkpoint_every", "lens_check_windows", "tuned_steps"})


def _build() -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {p: {} for p in PROFILE_NAMES}
    owner: dict[str, str] = {}
    for section, by_profile in SECTIONS.items():
        if set(by_profile) != set(PROFILE_NAMES):
            raise ValueError(f"profile section {section!r} must define {PROFILE_NAMES}")
        keys = {k for values in by_profile.values() for k in values}
        for key in keys:
            if key in owner:
                raise ValueError(f"parameter {key!r} is defined in sections {owner[key]!r} and {section!r}")
            owner[key] = section
        for profile, values in by_profile.items():
            if set(values) != keys:
                raise ValueError(f"section {section!r}: profile {profile!r} lacks {sorted(keys - set(values))}")
            out[profile].update(values)
    return out


PROFILES: dict[str, dict[str, Any]] = _build()
KEYS = frozenset(PROFILES["default"])  # every profile defines the same keys (_build checks)
OWNER = {k: section for section, by_profile in SECTIONS.items() for k in by_profile["default"]}
COMMON_KEYS = frozenset(SECTIONS["common"]["default"])


class UnknownProfileError(KeyError):
    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0])


def get(profile: str) -> dict[str, Any]:
    if profile not in PROFILES:
        raise UnknownProfileError(f"unknown profile {profile!r}; choose one of {', '.join(PROFILES)}")
    return copy.deepcopy(PROFILES[profile])


class OverrideError(ValueError):
    """A ``-p`` item that is not ``key=value``; the message shows the form."""


def parse_overrides(items: Iterable[str]) -> dict[str, Any]:
    """``["lens_windows=8", "models=[\"smollm2-135m\"]"]`` -> ``{key: value}``, each value read as
    JSON when it can be (else kept as the string): the ``-p`` items of ``run``, ``train`` and ``ladder``."""
    out: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise OverrideError(f"override {item!r} must look like key=value (e.g. -p lens_windows=8)")
        key, raw = item.split("=", 1)
        try:
            out[key.strip()] = json.loads(raw)
        except json.JSONDecodeError:
            out[key.strip()] = raw
    return out


class ParameterError(ValueError):
    """A parameter value of a kind or range the profiles never give its key (``ppl_windows = 0``,
    ``seed = 1.5``, ``models = "tiny-llama"``); the message is one line naming the fix."""


def _kinds(values: Iterable[Any]) -> set[str]:
    out = set()
    for v in values:
        out.add("none" if v is None else "bool" if isinstance(v, bool) else "int" if isinstance(v, int)
                else "float" if isinstance(v, float) else "str" if isinstance(v, str)
                else "list" if isinstance(v, (list, tuple)) else "dict" if isinstance(v, dict) else "other")
    return out


def _allowed(key: str) -> tuple[set[str], str | None, int | None]:
    """What a value of profile key ``key`` may be, from the key's values in every profile: their kinds
    (an int is allowed where a float is), the kind of their list elements when every profile's list
    holds one kind, and the least int allowed (1 when every profile's value is a positive count, unless
    :data:`ZERO_ALLOWED` says 0 is a choice too; 0 when none is negative)."""
    values = [PROFILES[p][key] for p in PROFILE_NAMES]
    kinds = _kinds(values)
    if "float" in kinds:
        kinds.add("int")
    elements = _kinds([e for v in values if isinstance(v, (list, tuple)) for e in v])
    element = next(iter(elements)) if len(elements) == 1 else None
    ints = [v for v in values if isinstance(v, int) and not isinstance(v, bool)]
    least = None
    if ints and "float" not in kinds:
        least = 1 if min(ints) >= 1 and key not in ZERO_ALLOWED else 0 if min(ints) >= 0 else None
    return kinds, element, least


# what each kind is called where a value is written in Python (a notebook) or in JSON (-p on the command line)
KIND_WORDS = {
    "python": {"none": "None", "bool": "True/False", "int": "an integer", "float": "a number",
               "str": "a string", "list": "a list", "dict": "a dict"},
    "json": {"none": "null", "bool": "true/false", "int": "an integer", "float": "a number",
             "str": "a string", "list": "a JSON list", "dict": "a JSON object"},
}


def value_problem(key: str, value: Any, *, words: str = "python") -> str | None:
    """What a value of profile key ``key`` must be (``"an integer of at least 1"``) when ``value`` is of a
    kind or range the profiles never give that key, else None. Keys every profile leaves None, and the
    entries of dicts, are not checked; ``words`` is ``"python"`` or ``"json"`` (:data:`KIND_WORDS`)."""
    kinds, element, least = _allowed(key)
    if kinds <= {"none"}:
        return None
    kind = next(iter(_kinds([value])))
    elements_ok = {element, "int"} if element == "float" else {element}
    bad = (kind not in kinds or (kind == "int" and least is not None and value < least)
           or (kind == "list" and element is not None and not _kinds(value) <= elements_ok))
    if not bad:
        return None
    names = KIND_WORDS[words]
    allowed = []
    for k in sorted(kinds, key=list(names).index):
        if (k == "int" and "float" in kinds) or (k == "none" and words == "python"):
            continue  # "a number" says it; in a notebook None takes the profile's value
        text = names[k]
        if k == "int" and least is not None:
            text += f" of at least {least}"
        if k == "list" and element is not None:
            text += f" of {names[element].removeprefix('an ').removeprefix('a ')}s"
        allowed.append(text)
    return " or ".join(allowed)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def check_values(profile: str, given: dict[str, Any]) -> None:
    """The ``given`` values of profile keys (None: the profile's) must be of the kinds and ranges the
    profiles give those keys (:func:`value_problem`, the runner's ``-p`` check): else
    :class:`ParameterError`, one line naming the parameter, what it must be and the profile's value."""
    for key, value in given.items():
        if value is None or key not in KEYS:
            continue
        must = value_problem(key, value)
        if must is not None:
            raise ParameterError(
                f"parameter {key} = {_short(value)}: {key} must be {must} (the {profile} profile's value: "
                f"{key} = {_short(PROFILES[profile][key])}; None takes it)")


def resolve(profile: str | None = None, /, **given: Any) -> SimpleNamespace:
    """The profile's parameters, with every ``given`` value that is not None taking precedence.

    The profile may be named positionally or as ``profile=`` (the key the runner injects), so a
    notebook can pass its whole parameters cell: ``resolve(**params)``. A ``given`` key the profile
    does not define raises ``KeyError`` (a typo never silently falls back to the profile's value), and
    a value of a kind or range the profiles never give its key raises :class:`ParameterError`
    (:func:`check_values`: the runner's ``-p`` check, so papermill by hand and JupyterLab get it too).
    """
    named = given.pop("profile", None)
    if profile is not None and named is not None and named != profile:
        raise ValueError(f"two profiles given: {profile!r} and profile={named!r}; pass one")
    profile = profile if profile is not None else named
    if profile is None:
        raise TypeError(f"resolve() needs a profile name: one of {', '.join(PROFILES)}")
    params = get(profile)
    unknown = [k for k in given if k not in params]
    if unknown:
        raise KeyError(f"parameters {unknown} are not in profile {profile!r}; known: {sorted(params)}")
    check_values(profile, given)
    params.update({k: v for k, v in given.items() if v is not None})
    params["profile"] = profile
    return SimpleNamespace(**params)


class UndeclaredParameterError(AttributeError):
    """A notebook read a profile key its ``parameters`` cell does not declare (so ``-p`` cannot set it)."""


class Declared(SimpleNamespace):
    """A notebook's resolved parameters: the keys its ``parameters`` cell declares, and ``profile``.

    Reading any other profile key raises :class:`UndeclaredParameterError` naming the line to add,
    so a notebook's ``parameters`` cell is the whole list of what it reads (and what ``-p`` reaches):
    the smoke run of every notebook checks it, where the runner once inferred it from the code.
    """

    def __getattr__(self, key: str) -> Any:  # only called for names the namespace lacks
        if key in KEYS:
            raise UndeclaredParameterError(
                f"this notebook reads the profile key {key!r} but its parameters cell does not declare it: "
                f"add `{key} = None` to the cell tagged 'parameters'")
        raise AttributeError(key)


def from_namespace(namespace: dict[str, Any], *, every_key: bool = False) -> Declared:
    """:func:`resolve` restricted to the profile keys found in ``namespace`` (a :class:`Declared`).

    A notebook's setup cell passes its globals (which, right after the ``parameters`` cell, hold
    just the declared parameters): ``P = profiles.from_namespace(globals())``. ``every_key``: every key
    of the profile, for a notebook whose short parameters cell leaves the rest to the profile (only the
    declared keys take ``-p``).
    """
    if "profile" not in namespace:
        raise KeyError("the namespace has no `profile`: declare `profile = \"default\"` in the "
                       "notebook's parameters cell")
    given = {k: v for k, v in namespace.items() if k in KEYS}
    full = vars(resolve(namespace["profile"], **given))
    paths.use_profile(full["profile"])  # figures of a run outside the runner go to build/<profile>/figures
    return Declared(**(full if every_key else {k: full[k] for k in [*given, "profile"]}))


# --------------------------------------------------------------------------------------------
# Stage configs from a profile
# --------------------------------------------------------------------------------------------

STAGE_KEY = "residshift.profile_key"  # dataclass field metadata: the field's profile key, less the prefix


def key(suffix: str) -> dict[str, str]:
    """Field metadata naming a field's profile key where it is not the field's name:
    ``n_windows: int = field(default=16, metadata=profiles.key("windows"))`` reads ``<prefix>_windows``."""
    return {STAGE_KEY: suffix}


def stage_keys(cls: type, prefix: str | None = None) -> dict[str, str]:
    """``{field: profile key}`` for the fields of the stage config ``cls`` that a profile sets.

    The rule, the same for every stage: field ``f`` (or the name its metadata gives, :func:`key`) reads
    ``<prefix>_f`` when the profiles define that key, else the shared key ``f`` of the ``common``
    section (``seed``); ``prefix`` defaults to ``cls.PREFIX``.
    """
    prefix = prefix if prefix is not None else getattr(cls, "PREFIX", None)
    if not prefix:
        raise TypeError(f"{cls.__name__} has no PREFIX: pass the profile keys' prefix (e.g. 'lens')")
    out = {}
    for f in dataclasses.fields(cls):
        name = f.metadata.get(STAGE_KEY, f.name)
        if f"{prefix}_{name}" in KEYS:
            out[f.name] = f"{prefix}_{name}"
        elif name in COMMON_KEYS:
            out[f.name] = name
    return out


def stage(cls: type, P: Any, prefix: str | None = None, /, **given: Any) -> Any:
    """The stage config ``cls`` at profile ``P`` (a name, a dict of values or a resolved namespace):
    every field :func:`stage_keys` maps takes the profile's value; ``given`` (field names) sets the
    others (the model, a seed, a gate kind) or replaces a profile value; the rest keep their defaults.

    >>> cfg = profiles.stage(SweepConfig, P, model="smollm2-135m")   # the sweep_* keys and seed
    >>> lens = profiles.stage(LensPass, P, "atten_lens", corpus=P.sweep_corpus, split="test")
    """
    values = get(P) if isinstance(P, str) else P
    read = values.__getitem__ if isinstance(values, dict) else lambda k: getattr(values, k)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(given) - names)
    if unknown:
        raise TypeError(f"{cls.__name__} has no field(s) {unknown}; its fields: {sorted(names)}")
    kwargs = {}
    for field_name, profile_key in stage_keys(cls, prefix).items():
        if field_name in given:
            continue
        try:
            kwargs[field_name] = read(profile_key)
        except KeyError:
            raise KeyError(f"{cls.__name__}.{field_name} reads the profile key {profile_key!r}, which these "
                           f"values lack (section {OWNER[profile_key]!r} of residshift/core/profiles.py)") from None
    return cls(**kwargs, **given)


def parameter_rows(namespace: dict[str, Any]) -> list[tuple[str, Any, str]]:
    """``(parameter, value, source)`` for every profile key in ``namespace``, in its order.

    ``namespace`` is what :func:`from_namespace` takes (a notebook's globals right after its
    ``parameters`` cell; dicts keep insertion order, so the rows follow the cell's declarations;
    imports and any other name that is not a profile key are left out). ``value`` is the resolved
    value (a copy: the rows never touch the notebook's ``P``). ``source`` is ``"profile <name>"``
    when the namespace holds None or the profile's own value (what the runner injects) and
    ``"override"`` when it holds another value (set in the cell, or ``-p`` on the command line).
    """
    resolved = vars(from_namespace(namespace))  # same checks and errors as the notebook's own P
    profile = resolved["profile"]
    defaults = PROFILES[profile]
    rows = []
    for key, given in namespace.items():
        if key not in defaults:
            continue
        try:
            same = given is None or bool(given == defaults[key])
        except Exception:  # noqa: BLE001 - a value that cannot be compared (an array) is an override
            same = False
        rows.append((key, copy.deepcopy(resolved[key]), f"profile {profile}" if same else "override"))
    return rows


def parameters_table(namespace: dict[str, Any]) -> pandas.DataFrame:
    """:func:`parameter_rows` as a ``pandas.DataFrame`` (columns parameter, value, source) that
    displays every value whole, as it would be written in the parameters cell (``repr``: lists of
    models and alpha grids are never cut to "..."), without the row numbers. A notebook's setup
    cell shows it right after resolving: ``display(profiles.parameters_table(globals()))``.
    """
    import pandas as pd  # lazy: pandas ~0.3 s; the command line imports this module

    rows = parameter_rows(namespace)
    values = pd.Series([v for _, v, _ in rows], dtype=object)  # object: 64 and 0.001 stay as given
    return _table_class()({"parameter": [k for k, _, _ in rows], "value": values,
                           "source": [s for _, _, s in rows]})


@functools.cache
def _table_class() -> type:
    import pandas as pd  # lazy: see parameters_table

    class ParametersTable(pd.DataFrame):
        """A DataFrame that renders whole values, without its index (slices are plain frames)."""

        def _formatters(self, pad: bool = False) -> dict:
            out = {}
            for column in self.columns:  # values as written in a cell ('cpu', [0.0, 0.5])
                show = repr if column == "value" else str
                width = max((len(show(v)) for v in self[column]), default=0) if pad else 0
                out[column] = lambda v, show=show, width=width: show(v).ljust(width)  # text: left-aligned
            return out

        def __repr__(self) -> str:
            """One line a parameter: name, value as written in a cell, source; no column padding, so one long
            value does not widen every line (the notebook shows the HTML table)."""
            if not {"parameter", "value", "source"} <= set(self.columns) or self.empty:
                return self.to_string(index=False, formatters=self._formatters(pad=True), justify="left")
            width = max(len(str(k)) for k in self["parameter"])
            return "\n".join(f"{k!s:<{width}}  {v!r}  ({src})"
                             for k, v, src in zip(self["parameter"], self["value"], self["source"]))

        def _repr_html_(self) -> str:
            with pd.option_context("display.max_colwidth", None):  # to_html would cut at 50
                return self.to_html(index=False, formatters=self._formatters(), notebook=True)

    return ParametersTable
