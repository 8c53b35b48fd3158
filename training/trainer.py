"""`train(cfg)`: one EAGLE-3 draft training run, read top to bottom, with the small helpers it calls.

The story: load the target and its tokenizer; render and mask the data; build (or verify and reuse) the draft
vocab; build the draft on the target's frozen embeddings; AdamW with warmup + cosine; for each batch get the
target's aux states and logits (online, or from offline shards), unroll the TTT steps, take the weighted loss
at the positions that count, clip and step; checkpoint with the run config beside it; resume from the newest
checkpoint; on SIGTERM or Ctrl-C, finish the step, checkpoint it and stop (`training.interrupt`); export the
SGLang folder at the end. Several GPUs: launch with `torchrun`, each rank takes every world_size-th row and DDP
averages the gradients; rank 0 alone writes.
"""

from __future__ import annotations

import logging
import math
import random
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from inference.decoding.attention_kernels import without_cudnn
from inference.decoding.draft_model import Eagle3Draft
from inference.decoding.hidden_states import AuxLayers, capture, default_aux_layers
from inference.decoding.static_llama import StaticLlama, UnsupportedTarget
from training.atomic_files import hold_folder
from training.batching import plan_batches, steps_per_epoch
from training.checkpoints import newest_checkpoint, resume, save_checkpoint
from training.config import ConfigError, TrainConfig
from training.data import TokenizedRow, run_folder_rendering
from training.distributed import join_ranks, rank0_first
from training.draft_setup import build_draft, export_dtype
from training.export import convert_export, export_draft
from training.feature_sources import cache_layers, load_cached, offline_source
from training.interrupt import StopFlag, TrainingStopped, stop_on_signals
from training.loss import TTTLoss, loss_rows, ttt_loss_rows
from training.offline_target import data_hash
from training.progress import Progress, RunProgress
from training.resume_check import check_resume
from training.selection import Estimate, Selection, hold_out
from training.tokenized import RenderedRows, tokenize_file, tokenizer_hash
from training.vocab import load_or_build, vocab_key
from training.warm_start import warm_start

logger = logging.getLogger(__name__)


@dataclass
class TrainResult:
    """Where the run ended: steps taken, last loss and per-step accuracy, the export folder."""

    steps: int
    loss: float
    step_accuracies: list[float]
    export_dir: Path
    vocab_coverage: float
    tokens: int = 0
    wall_s: float = 0.0
    already_finished: bool = False  # the run had reached its last step before this call: nothing was trained
    # settings --force-resume changed: {key: (old, new)}
    changed: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    selected: Estimate | None = None  # with selection on: the exported (best) step and its estimated acceptance

    @property
    def tokens_per_s(self) -> float:
        """Real (unpadded) tokens trained on per second of the loop, target forward included (a resumed run's
        tokens and seconds cover every call of it; the time between calls is not counted)."""
        return self.tokens / self.wall_s if self.wall_s else 0.0


def train(cfg: TrainConfig, features: Any = None, memo: RenderedRows | None = None) -> TrainResult:
    """Train a draft for cfg.target on cfg.data; return where the run ended. `features`: with
    cfg.features_server, the engine's row fetcher (`training.engine_features.Fetch`, which the caller opens);
    `memo`: renderings shared by a caller's runs over the same data (`training.tokenized.RenderedRows`).
    The run folder has one writer: rank 0 holds its lock for the whole run, and a second run on it is refused
    before anything loads."""
    # --- Where we run: one process, or one rank of a torchrun job.
    rank, world, device = _setup_distributed(cfg)
    with hold_folder(cfg.out) if rank == 0 else nullcontext():
        return _train(cfg, rank, world, device, features, memo)


def _train(cfg: TrainConfig, rank: int, world: int, device: torch.device, features: Any,
           memo: RenderedRows | None) -> TrainResult:
    # A resume with other settings than the checkpoint's is refused before anything loads (training/resume_check.py).
    newest = newest_checkpoint(cfg) if cfg.resume else None
    changed = check_resume(newest, cfg) if newest is not None else {}
    torch.manual_seed(cfg.seed)
    random.seed(cfg.seed)

    # --- Target, tokenizer, data (rendered with the target's chat template, assistant tokens supervised). From a
    # capture's cache (`cfg.cache`) the rows and states are there, and of the target only what the loss needs.
    cache, target, tokenizer, rows, layers = load_inputs(cfg, device, features, memo)
    rows, heldout = hold_out(rows, cfg)  # checkpoint selection's held-out slice (training.selection), when on

    # --- Draft vocab: cached per (data, tokenizer, N), verified before reuse; a warm start keeps its draft's own.
    pairs = [(r.input_ids, r.loss_mask) for r in rows]
    key = vocab_key(data_hash(pairs), tokenizer_hash(tokenizer), cfg.draft_vocab_size)
    init = warm_start(cfg, target, layers, pairs) if cfg.init_draft is not None else None
    vocab = init.vocab if init is not None else rank0_first(
        rank, world, lambda: load_or_build(cfg.out / "vocab_cache", key, pairs, len(tokenizer), cfg.draft_vocab_size))
    logger.info("draft vocab covers %.1f%% of supervised tokens", 100 * vocab.coverage)

    # --- Draft on the target's frozen embeddings; optimizer; schedule; resume.
    draft = (init.draft if init is not None else build_draft(target, cfg, vocab)).to(device)
    optimizer = torch.optim.AdamW([p for p in draft.parameters() if p.requires_grad], lr=cfg.lr,
                                  weight_decay=cfg.weight_decay, fused=device.type == "cuda")
    shard = rows[rank::world][: len(rows) // world]  # equal shards: every rank takes the same number of steps
    per_epoch = steps_per_epoch(shard, cfg, world, device)
    total_steps = cfg.max_steps or cfg.epochs * per_epoch
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, warmup_cosine(total_steps, cfg.warmup_ratio))
    step, counted_before = resume(cfg, draft, optimizer, scheduler) if cfg.resume else (0, RunProgress())
    model = torch.nn.parallel.DistributedDataParallel(draft) if world > 1 else draft
    source = cache if cache is not None else rank0_first(
        rank, world, lambda: offline_source(cfg, target, rows + heldout, layers, key, tokenizer_hash(tokenizer))
    ) if cfg.mode == "offline" else None
    progress = Progress(cfg.out / "train_log.jsonl", total_steps, enabled=rank == 0, start_step=step,
                        **counted_before)
    loop = TrainLoop(draft=draft, model=model, optimizer=optimizer, scheduler=scheduler, shard=shard,
                     per_epoch=per_epoch, total_steps=total_steps,
                     scorer=fast_target(target) if source is None else target,
                     source=source, layers=layers, progress=progress, autocast=torch.autocast(
                         "cuda", dtype=torch.bfloat16) if device.type == "cuda" and cfg.bf16 else nullcontext())
    if heldout:
        loop.selection = Selection(cfg, heldout, lambda i, a: target_states(loop.scorer, loop.source, i, a, layers),
                                   total_steps=total_steps, start_step=step, rank=rank, world=world, device=device,
                                   autocast=loop.autocast, progress=progress)
        if init is not None and step == 0:  # a warm start's own draft is a candidate too: a fine-tune may not beat it
            loop.selection.after_step(0, draft, force=True)

    # --- The loop: target states -> TTT unroll -> weighted loss -> clip -> step (`run_steps`, `train_step`).
    step, result = run_steps(cfg, loop, step, rank, world, device)

    # --- Export the SGLang folder (rank 0), and finish.
    export_dir = cfg.out / "export"
    # best, not last
    selected = loop.selection.restore_best(draft) if loop.selection is not None and rank == 0 else None
    if rank == 0:
        first: Any = "vllm" if cfg.export_engine == "vllm" else "sglang"
        export_draft(draft, layers, export_dir, dtype=export_dtype(cfg, target),
                     target_layers=target.config.num_hidden_layers, engine=first,
                     rendering=_rendering_record(cfg))
        if cfg.export_engine == "both":
            convert_export(export_dir, cfg.out / "export-vllm", "vllm")
        progress.plot(cfg.out / "loss_curve.png")
    if world > 1:
        dist.destroy_process_group()
    trained = train_result(cfg, step, result, loop, export_dir, vocab.coverage, changed)
    trained.selected = selected
    return trained


def load_inputs(cfg: TrainConfig, device: torch.device, features: Any = None, memo: RenderedRows | None = None
                ) -> tuple[Any, Any, Any, list[TokenizedRow], AuxLayers]:
    """(feature source or None, target, tokenizer, rows, aux layers): from a capture's cache (`cfg.cache`), from a
    serving engine (`cfg.features_server`: the target's head only, the states asked of the engine as training
    goes), else the target loaded whole and cfg.data tokenized; the layers checked against the target's depth."""
    cache = None
    if cfg.features_server is not None:
        from training.engine_features import engine_feature_source, engine_head_target

        if features is None:
            raise ConfigError("features_server needs the engine's fetcher: run it through `datahunt train "
                              "--features-server URL`")
        target, tokenizer = engine_head_target(cfg.target)
        rows = tokenize_file(cfg, tokenizer, memo)
        layers = aux_layers(cfg, target.config.num_hidden_layers)
        layers.validate(target.config.num_hidden_layers)
        return engine_feature_source(cfg.target, features, layers, target), target, tokenizer, rows, layers
    if cfg.cache is not None:
        cache, target, tokenizer = load_cached(cfg)
        rows, layers = cache.rows(), cache_layers(cfg, cache)
    else:
        target, tokenizer = load_target(cfg.target, device, cfg.bf16)
        rows = tokenize_file(cfg, tokenizer, memo)
        layers = aux_layers(cfg, target.config.num_hidden_layers)
    layers.validate(target.config.num_hidden_layers)
    return cache, target, tokenizer, rows, layers


@dataclass
class TrainLoop:
    """What the loop steps: the draft (and its DDP wrapper), optimizer and schedule, this rank's rows, where the
    target's states come from (`scorer` online, `source` offline), and the run's log."""

    draft: Eagle3Draft
    model: torch.nn.Module
    optimizer: Any
    scheduler: Any
    shard: list[TokenizedRow]
    per_epoch: int
    total_steps: int
    scorer: Any
    source: Any
    layers: AuxLayers
    progress: Progress
    autocast: Any  # bf16 autocast for the draft on CUDA, else a null context
    selection: Selection | None = None  # acceptance-aware checkpoint selection, when on


def run_steps(cfg: TrainConfig, loop: TrainLoop, step: int, rank: int, world: int, device: torch.device
              ) -> tuple[int, TTTLoss | None]:
    """Train from `step` to the last step; return the step reached and the last step's loss (None: no step ran).
    No host sync but on log steps. A stop signal ends it after a whole step, with a checkpoint of that step
    (`TrainingStopped`)."""
    result = None
    epoch = step // max(1, loop.per_epoch)
    first, every = step + 1, log_interval(cfg.log_every, loop.total_steps)
    with stop_on_signals() as stop:
        while step < loop.total_steps:
            # A run resumed mid-epoch continues that epoch's batch order where the checkpoint left it.
            done_in_epoch = step - epoch * loop.per_epoch
            planned = plan_batches(loop.shard, cfg, seed=cfg.seed + epoch)[done_in_epoch:loop.per_epoch]
            if hasattr(loop.source, "prefetch"):  # an engine source fetches the epoch's batches ahead of the steps
                loop.source.prefetch([(ids, attn) for ids, attn, _ in planned])
            for ids, attn, mask in planned:
                result = train_step(cfg, loop, ids, attn, mask, device)
                step += 1
                loop.progress.count(attn)
                if step == first or step % every == 0 or step == loop.total_steps:
                    loop.progress.log(step, result, float(loop.scheduler.get_last_lr()[0]))
                if loop.selection is not None:
                    loop.selection.after_step(step, loop.draft)
                if rank == 0 and (step % cfg.save_every == 0 or step == loop.total_steps):
                    save_checkpoint(cfg, loop.draft, loop.optimizer, loop.scheduler, step, loop.progress)
                if step < loop.total_steps and (signum := _stop_signal(stop, step, cfg, world, device)) is not None:
                    _stop(cfg, loop.draft, loop.optimizer, loop.scheduler, step, signum, rank, world, loop.progress)
                if step >= loop.total_steps:
                    break
            epoch += 1
    return step, result


def log_interval(log_every: int, total_steps: int) -> int:
    """Steps between progress lines: `log_every`, unless that is longer than the whole run (20 steps with the
    default 50 printed nothing until the end): then a tenth of the run. The first step of each call is logged
    as well, so progress shows from the start."""
    return log_every if log_every <= total_steps else max(1, total_steps // 10)


def train_step(cfg: TrainConfig, loop: TrainLoop, ids: Tensor, attn: Tensor, mask: Tensor, device: torch.device
               ) -> TTTLoss:
    """One optimizer step on one batch: target states -> TTT unroll -> weighted loss -> backward -> clip -> step."""
    counted = loss_rows(mask)  # on the host, from the batch: the positions the loss reads
    if device.type == "cuda":
        counted = counted.pin_memory()  # so that its copy, too, does not wait for the GPU
    ids, attn, counted = (t.to(device, non_blocking=True) for t in (ids, attn, counted))
    # forward and backward: the backward's attention kernel is chosen by the same rule
    with attention_kernels(cfg.attention_kernels):
        aux, target_logits = target_states(loop.scorer, loop.source, ids, attn, loop.layers)
        with loop.autocast:  # the draft's head runs at those positions only
            step_logits = loop.model(ids, aux, cfg.ttt_steps, rows=counted)
        result = ttt_loss_rows(step_logits, target_logits, loop.draft.d2t, loop.draft.t2d, counted,
                               ids.shape[1], cfg.step_decay)
        loop.optimizer.zero_grad(set_to_none=True)
        result.total.backward()  # type: ignore[no-untyped-call]  # torch's backward is untyped
    torch.nn.utils.clip_grad_norm_(loop.draft.parameters(), cfg.grad_clip)
    loop.optimizer.step()
    loop.scheduler.step()
    return result


def train_result(cfg: TrainConfig, step: int, result: TTTLoss | None, loop: TrainLoop, export_dir: Path,
                 vocab_coverage: float, changed: dict[str, tuple[Any, Any]]) -> TrainResult:
    """Where the run ended; a run that had already finished takes its loss and accuracies from its last log record."""
    progress = loop.progress
    if result is not None:
        loss, accuracies = float(result.total.detach()), result.step_accuracies
    else:  # no step ran now: a finished run's last log record says where it ended
        last = progress.records[-1] if progress.records else None
        loss = float(last.get("loss", "nan")) if last else math.nan
        accuracies = list((last.get("step_accuracies") if last else None) or [0.0] * cfg.ttt_steps)
    return TrainResult(steps=step, loss=loss, step_accuracies=accuracies,
                       export_dir=export_dir, vocab_coverage=vocab_coverage, tokens=progress.tokens,
                       wall_s=progress.elapsed(), already_finished=result is None and step >= loop.total_steps > 0,
                       changed=changed)


def _stop_signal(stop: StopFlag, step: int, cfg: TrainConfig, world: int, device: torch.device) -> int | None:
    """The signal to stop on after this step, or None. One process: checked every step (a flag, no sync).
    Several: on log steps only, the ranks' flags reduced to one, so that every rank stops after the same step."""
    if world == 1:
        return stop.signum
    if step % cfg.log_every:
        return None
    wanted = torch.tensor([stop.signum or 0], device=device)
    dist.all_reduce(wanted, op=dist.ReduceOp.MAX)
    return int(wanted.item()) or None


def _stop(cfg: TrainConfig, draft: Eagle3Draft, optimizer: Any, scheduler: Any, step: int, signum: int, rank: int,
          world: int, progress: Progress) -> None:
    """Checkpoint this step (rank 0; unless the periodic checkpoint just did) and raise `TrainingStopped`."""
    folder = cfg.out / "checkpoints" / f"step_{step:07d}"
    if rank == 0 and not (folder / "state.pt").exists():
        folder = save_checkpoint(cfg, draft, optimizer, scheduler, step, progress)
    if world > 1:
        dist.barrier()  # the checkpoint is whole before any rank leaves
        dist.destroy_process_group()
    raise TrainingStopped(step, signum, folder if rank == 0 else None)


def _setup_distributed(cfg: TrainConfig) -> tuple[int, int, torch.device]:
    """Rank, world size and device; under torchrun, join the process group (`training.distributed`)."""
    if cfg.device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device cuda: no CUDA device is available here (use --device cpu or auto)")
    return join_ranks(cfg.device == "cuda" or (cfg.device == "auto" and torch.cuda.is_available()))


def aux_layers(cfg: TrainConfig, target_layers: int) -> AuxLayers:
    """The target layers whose states the draft reads: the configured ids, else the default three."""
    return AuxLayers(cfg.aux_layer_ids, "input") if cfg.aux_layer_ids else default_aux_layers(target_layers)


def load_target(path: Path, device: torch.device, bf16: bool = True) -> tuple[Any, Any]:
    """The frozen target (bf16 on GPU, fp32 on CPU) and its tokenizer, from a local folder."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dtype = torch.bfloat16 if device.type == "cuda" and bf16 else torch.float32
    target: Any = AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype)
    target = target.to(device).eval()
    target.requires_grad_(False)
    return target, AutoTokenizer.from_pretrained(str(path))


def attention_kernels(choice: str) -> Any:
    """A fresh context (one per step) for every attention of a step: torch's own backend choice, or every fused
    kernel but cuDNN's."""
    return nullcontext() if choice == "auto" else without_cudnn()


def _rendering_record(cfg: TrainConfig) -> dict[str, str] | None:
    """How the run rendered its rows (its rendering.json), for the export to record; None when not recorded."""
    rendering = run_folder_rendering(cfg.out)
    return rendering.as_json() if rendering is not None else None


def warmup_cosine(total_steps: int, warmup_ratio: float) -> Any:
    """LR multiplier: linear warmup over warmup_ratio of the steps, then cosine down to 0."""
    warmup = max(1, int(total_steps * warmup_ratio))

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, total_steps - warmup)
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))

    return factor


def target_states(target: Any, source: Any, ids: Tensor, attn: Tensor, layers: AuxLayers) -> tuple[Tensor, Tensor]:
    """Aux states and target logits: computed now (online) or looked up in the offline shards.

    `target` is the transformers model, or a cacheless `StaticLlama` over its weights (Llama-family targets:
    the same function without transformers' per-call overhead; checked equal in the tests).
    """
    if source is not None:
        looked_up: tuple[Tensor, Tensor] = source.lookup(ids, attn)
        return looked_up
    if isinstance(target, StaticLlama):
        logits, aux = target.states(ids, layers.as_input().ids)
        return aux, logits
    states = capture(target, ids, attn, layers)
    return states.aux, states.logits  # the target's dtype; the loss upcasts what it needs


def fast_target(target: Any) -> Any:
    """A cacheless static-cache runner over the target's weights where the architecture allows, else the target."""
    try:
        return StaticLlama(target, slots=0, max_len=0)
    except UnsupportedTarget:
        return target
