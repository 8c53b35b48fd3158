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

import json
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

from core.chat_render import Reasoning, ToolRendering
from inference.decoding.attention_kernels import without_cudnn
from inference.decoding.draft_model import DraftConfig, Eagle3Draft
from inference.decoding.hidden_states import AuxLayers, capture, default_aux_layers, target_embeddings
from inference.decoding.static_llama import StaticLlama, UnsupportedTarget
from training.atomic_files import hold_folder
from training.checkpoints import newest_checkpoint, resume, save_checkpoint
from training.config import ConfigError, TrainConfig
from training.data import (
    Conversation,
    Rendering,
    TokenizedRow,
    check_template,
    check_tool_support,
    load_conversations,
    record_rendering,
    run_folder_rendering,
    run_rendering,
    tokenize_rows,
    training_file,
)
from training.export import convert_export, export_draft
from training.interrupt import StopFlag, TrainingStopped, stop_on_signals
from training.loss import TTTLoss, loss_rows, ttt_loss_rows
from training.offline_target import data_hash, output_head
from training.progress import Progress, RunProgress
from training.resume_check import check_resume
from training.selection import Estimate, Selection, hold_out
from training.token_cache import cache_key, cached_rows
from training.vocab import DraftVocab, load_or_build, vocab_key
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
    changed: dict[str, tuple[Any, Any]] = field(default_factory=dict)  # settings --force-resume changed: {key: (old, new)}
    selected: Estimate | None = None  # with selection on: the exported (best) step and its estimated acceptance

    @property
    def tokens_per_s(self) -> float:
        """Real (unpadded) tokens trained on per second of the loop, target forward included (a resumed run's
        tokens and seconds cover every call of it; the time between calls is not counted)."""
        return self.tokens / self.wall_s if self.wall_s else 0.0


def train(cfg: TrainConfig, features: Any = None) -> TrainResult:
    """Train a draft for cfg.target on cfg.data; return where the run ended. `features`: with
    cfg.features_server, the engine's row fetcher (`training.engine_features.Fetch`, which the caller opens).
    The run folder has one writer: rank 0 holds its lock for the whole run, and a second run on it is refused
    before anything loads."""
    # --- Where we run: one process, or one rank of a torchrun job.
    rank, world, device = _setup_distributed(cfg)
    with hold_folder(cfg.out) if rank == 0 else nullcontext():
        return _train(cfg, rank, world, device, features)


def _train(cfg: TrainConfig, rank: int, world: int, device: torch.device, features: Any) -> TrainResult:
    # A resume with other settings than the checkpoint's is refused before anything loads (training/resume_check.py).
    newest = newest_checkpoint(cfg) if cfg.resume else None
    changed = check_resume(newest, cfg) if newest is not None else {}
    torch.manual_seed(cfg.seed)
    random.seed(cfg.seed)

    # --- Target, tokenizer, data (rendered with the target's chat template, assistant tokens supervised). From a
    # capture's cache (`cfg.cache`) the rows and states are there, and of the target only what the loss needs.
    cache, target, tokenizer, rows, layers = load_inputs(cfg, device, features)
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
        rank, world, lambda: offline_source(cfg, target, rows + heldout, layers, key, tokenizer_hash(tokenizer))) if cfg.mode == "offline" else None
    progress = Progress(cfg.out / "train_log.jsonl", total_steps, enabled=rank == 0, start_step=step,
                        **counted_before)
    loop = TrainLoop(draft=draft, model=model, optimizer=optimizer, scheduler=scheduler, shard=shard, per_epoch=per_epoch,
                     total_steps=total_steps, scorer=fast_target(target) if source is None else target,
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
    selected = loop.selection.restore_best(draft) if loop.selection is not None and rank == 0 else None  # best, not last
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


def load_inputs(cfg: TrainConfig, device: torch.device, features: Any = None
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
        rows = tokenize_file(cfg, tokenizer)
        layers = aux_layers(cfg, target.config.num_hidden_layers)
        layers.validate(target.config.num_hidden_layers)
        return engine_feature_source(cfg.target, features, layers, target), target, tokenizer, rows, layers
    if cfg.cache is not None:
        cache, target, tokenizer = load_cached(cfg)
        rows, layers = cache.rows(), cache_layers(cfg, cache)
    else:
        target, tokenizer = load_target(cfg.target, device, cfg.bf16)
        rows = tokenize_file(cfg, tokenizer)
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
    with attention_kernels(cfg.attention_kernels):  # forward and backward: the backward's attention kernel is chosen by the same rule
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
    """Rank, world size and device; under torchrun, join the process group (NCCL on GPU, gloo on CPU)."""
    if cfg.device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device cuda: no CUDA device is available here (use --device cpu or auto)")
    use_cuda = cfg.device == "cuda" or (cfg.device == "auto" and torch.cuda.is_available())
    if dist.is_torchelastic_launched() and not dist.is_initialized():
        dist.init_process_group(backend="nccl" if use_cuda else "gloo")
    rank, world = (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)
    if use_cuda:
        torch.cuda.set_device(rank % torch.cuda.device_count())
        return rank, world, torch.device("cuda", rank % torch.cuda.device_count())
    return rank, world, torch.device("cpu")


def rank0_first(rank: int, world: int, build: Any) -> Any:
    """Run build() on rank 0 first (it writes a cache), then on the other ranks (they read it)."""
    result = build() if rank == 0 else None
    if world > 1 and dist.get_backend() == "nccl":
        dist.barrier(device_ids=[torch.cuda.current_device()])  # names the GPU, so NCCL need not guess it
    elif world > 1:
        dist.barrier()
    return result if rank == 0 else build()


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


def tokenize_file(cfg: TrainConfig, tokenizer: Any) -> list[TokenizedRow]:
    """Render and mask every row of cfg.data (tools, reasoning mode and tool rendering as the run records them in
    rendering.json); rows with nothing supervised within max_length are dropped."""
    if cfg.data is None:
        raise ConfigError("data is required unless the rows come from a cache (--cache)")
    conversations = load_conversations(cfg.data, cfg.messages_field)
    rendering = run_rendering(conversations, Reasoning(cfg.reasoning) if cfg.reasoning else None,
                              ToolRendering(cfg.tool_rendering) if cfg.tool_rendering else None)
    check_tool_support(tokenizer, conversations, rendering)
    record_rendering(cfg.out, rendering)
    check = check_template(tokenizer, conversations[0][1], conversations[0].tools, rendering)
    if not check.ids_match:  # the mask is derived from renderings; warn when they differ from the template's ids
        logger.warning("chat template check on row %s: %s", conversations[0][0], check.detail)
    fingerprint = tokenizer_hash(tokenizer) + "/" + "/".join(rendering.as_json().values())
    # Kept in the run folder: a resumed run (and a run again on the same data) loads them instead of tokenizing.
    key = cache_key(training_file(cfg.data), cfg.messages_field, fingerprint, cfg.max_length)
    rows = cached_rows(cfg.out, key, lambda: _tokenized(tokenizer, fingerprint, conversations, cfg.max_length,
                                                        rendering))
    kept = [r for r in rows if sum(r.loss_mask) > 0]
    if len(kept) < len(rows):
        logger.warning("dropped %d rows with no supervised token within %d tokens", len(rows) - len(kept),
                       cfg.max_length)
    return kept


# Rendered rows by (tokenizer and rendering, max_length, id, turns and tools): runs in one process over nested
# subsets of the same data (a data-scaling sweep) render each conversation once. Bounded; a miss only costs the
# rendering again.
_TOKENIZED: dict[tuple[str, int, str, str], TokenizedRow] = {}
_TOKENIZED_MAX = 200_000


def _tokenized(tokenizer: Any, fingerprint: str, conversations: list[Conversation], max_length: int,
               rendering: Rendering) -> list[TokenizedRow]:
    """Every conversation rendered and masked: the ones this process has seen from the cache, the rest in one
    batched pass (`tokenize_rows`)."""
    keys = [(fingerprint, max_length, c[0], json.dumps([c[1], c.tools], sort_keys=True)) for c in conversations]
    missing = [i for i, key in enumerate(keys) if key not in _TOKENIZED]
    fresh = dict(zip(missing, tokenize_rows(tokenizer, [conversations[i] for i in missing], max_length, rendering),
                     strict=True))
    for i, row in fresh.items():
        if len(_TOKENIZED) < _TOKENIZED_MAX:
            _TOKENIZED[keys[i]] = row
    return [fresh[i] if i in fresh else _TOKENIZED[key] for i, key in enumerate(keys)]


def _rendering_record(cfg: TrainConfig) -> dict[str, str] | None:
    """How the run rendered its rows (its rendering.json), for the export to record; None when not recorded."""
    rendering = run_folder_rendering(cfg.out)
    return rendering.as_json() if rendering is not None else None


def tokenizer_hash(tokenizer: Any) -> str:
    """A stable fingerprint of the tokenizer's vocabulary and chat template."""
    import hashlib

    blob = json.dumps([sorted(tokenizer.get_vocab().items()), getattr(tokenizer, "chat_template", None)])
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


def build_draft(target: Any, cfg: TrainConfig, vocab: DraftVocab) -> Eagle3Draft:
    """A fresh draft shaped after the target, with its embeddings copied (frozen) and the vocab maps set."""
    draft = new_draft(target, cfg)
    draft.set_vocab(vocab.d2t, vocab.t2d)
    if cfg.head_init == "target":
        init_head_from_target(draft, target)
    return draft


def new_draft(target: Any, cfg: TrainConfig) -> Eagle3Draft:
    """A draft shaped after the target and cfg, with the target's embeddings copied (frozen); vocab maps unset."""
    tc = target.config
    draft_cfg = DraftConfig(
        hidden_size=tc.hidden_size,
        intermediate_size=cfg.draft_intermediate_size or tc.intermediate_size,
        num_attention_heads=tc.num_attention_heads,
        num_key_value_heads=getattr(tc, "num_key_value_heads", tc.num_attention_heads),
        vocab_size=target.get_input_embeddings().weight.shape[0],
        draft_vocab_size=cfg.draft_vocab_size,
        target_hidden_size=tc.hidden_size,
        max_position_embeddings=cfg.serving_context or tc.max_position_embeddings,
        rms_norm_eps=getattr(tc, "rms_norm_eps", 1e-6),
        rope_theta=target_rope_theta(tc),
        head_dim=getattr(tc, "head_dim", None),
    )
    draft = Eagle3Draft(draft_cfg)
    draft.embed_tokens.weight.data.copy_(target_embeddings(target))
    return draft


def init_head_from_target(draft: Eagle3Draft, target: Any) -> None:
    """Warm-start the draft's output side from the target's: lm_head row i is the target's output row of
    target id d2t-mapped i, and the final norm is the target's where both use the Llama convention (Gemma's
    norm scales by 1 + w, so it stays at ones). The draft then starts out reading its hidden state the way
    the target reads its last one; the fused layer-(L-3) state it starts from is already close to that."""
    head, _ = output_head(target)
    rows = draft.draft_to_target(torch.arange(draft.cfg.draft_vocab_size, device=draft.d2t.device))
    draft.lm_head.weight.data.copy_(head.float()[rows.to(head.device)].to(draft.lm_head.weight.device))
    norm = getattr(getattr(target, "model", None), "norm", None)
    model_type = str(getattr(target.config, "model_type", ""))
    weight = getattr(norm, "weight", None)
    if weight is not None and not model_type.startswith("gemma") and weight.shape == draft.norm.weight.shape:
        draft.norm.weight.data.copy_(weight.detach().float())


def export_dtype(cfg: TrainConfig, target: Any) -> str:
    """The dtype to export in: the configured one, else the target's declared dtype (what an engine serves).

    Declared means the folder's config.json, not the loaded model's dtype: on a CPU the target is loaded in
    float32, and a draft exported in float32 for a bfloat16 target would be refused by the preflight (or served
    at half speed)."""
    if cfg.export_dtype != "auto":
        return cfg.export_dtype
    try:
        on_disk = json.loads((cfg.target / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        on_disk = {}
    declared = str(on_disk.get("dtype") or on_disk.get("torch_dtype") or getattr(target.config, "dtype", None)
                   or getattr(target.config, "torch_dtype", None) or "")
    declared = declared.replace("torch.", "")
    return declared if declared in {"bfloat16", "float16", "float32"} else "bfloat16"


def target_rope_theta(config: Any) -> float:
    """The target's RoPE base (full-attention layers where they differ), else Llama's 10000."""
    params = getattr(config, "rope_parameters", None) or {}
    params = params.get("full_attention", params)
    return float(getattr(config, "rope_theta", None) or params.get("rope_theta") or 10000.0)


def warmup_cosine(total_steps: int, warmup_ratio: float) -> Any:
    """LR multiplier: linear warmup over warmup_ratio of the steps, then cosine down to 0."""
    warmup = max(1, int(total_steps * warmup_ratio))

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, total_steps - warmup)
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))

    return factor


def steps_per_epoch(shard: list[TokenizedRow], cfg: TrainConfig, world: int, device: torch.device) -> int:
    """Batches per epoch, the same on every rank: with token budgets the ranks' shards pack into different counts,
    and DDP needs every rank to take every step, so all take the smallest count."""
    count = len(plan_batches(shard, cfg, seed=cfg.seed))
    if world > 1:
        value = torch.tensor([count], device=device)
        dist.all_reduce(value, op=dist.ReduceOp.MIN)
        count = int(value.item())
    return max(1, count)


def plan_batches(rows: list[TokenizedRow], cfg: TrainConfig, seed: int) -> list[tuple[Tensor, Tensor, Tensor]]:
    """One epoch's batches, shuffled: by token budget (cfg.batch_tokens) or by row count (cfg.batch_size)."""
    if cfg.batch_tokens is None:
        return list(batches(rows, cfg.batch_size, seed))
    return token_batches(rows, cfg.batch_tokens, seed)


def token_batches(rows: list[TokenizedRow], budget: int, seed: int) -> list[tuple[Tensor, Tensor, Tensor]]:
    """Rows sorted by length and packed while rows x padded width stays within `budget`; batch order shuffled.

    Sorting keeps padding small (neighbours have nearly equal lengths), so a batch is mostly real tokens and
    every step does about the same work. A row longer than the budget is a batch of its own.
    """
    order = sorted(range(len(rows)), key=lambda i: (len(rows[i].input_ids), i))
    groups: list[list[int]] = []
    for i in order:
        width = len(rows[i].input_ids)  # sorted ascending, so the newest row is the widest
        if groups and (len(groups[-1]) + 1) * width <= budget:
            groups[-1].append(i)
        else:
            groups.append([i])
    random.Random(seed).shuffle(groups)
    return [_pad([rows[i] for i in g]) for g in groups]


def batches(rows: list[TokenizedRow], size: int, seed: int) -> Any:
    """Yield shuffled right-padded (input_ids, attention_mask, loss_mask) batches of `size` rows."""
    order = list(range(len(rows)))
    random.Random(seed).shuffle(order)
    for start in range(0, len(order), size):
        yield _pad([rows[i] for i in order[start : start + size]])


def _pad(chunk: list[TokenizedRow]) -> tuple[Tensor, Tensor, Tensor]:
    width = max(len(r.input_ids) for r in chunk)
    ids = torch.zeros(len(chunk), width, dtype=torch.long)
    attn = torch.zeros(len(chunk), width, dtype=torch.long)
    mask = torch.zeros(len(chunk), width, dtype=torch.long)
    for i, r in enumerate(chunk):
        n = len(r.input_ids)
        ids[i, :n] = torch.tensor(r.input_ids)
        attn[i, :n] = 1
        mask[i, :n] = torch.tensor(r.loss_mask)
    pin = torch.cuda.is_available()
    return (ids.pin_memory(), attn.pin_memory(), mask.pin_memory()) if pin else (ids, attn, mask)


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


def load_cached(cfg: TrainConfig) -> tuple[Any, Any, Any]:
    """Offline mode from a capture: the cache (refused in one line when another target's or tokenizer's, or
    incomplete), the target without its decoder layers, and the tokenizer."""
    from transformers import AutoConfig, AutoTokenizer

    from training.offline_cache import open_cache

    assert cfg.cache is not None
    if cfg.data is not None:
        logger.warning("data %s is not read: the rows trained on are the cache's (%s)", cfg.data, cfg.cache)
    tokenizer = AutoTokenizer.from_pretrained(str(cfg.target))
    cache = open_cache(cfg.cache, cfg.target, tokenizer_hash(tokenizer))
    return cache, cache.head_target(AutoConfig.from_pretrained(str(cfg.target))), tokenizer


def cache_layers(cfg: TrainConfig, cache: Any) -> AuxLayers:
    """The cache's aux layers; a run config asking for others is refused (the states of those are not there)."""
    layers: AuxLayers = cache.layers
    if cfg.aux_layer_ids and tuple(cfg.aux_layer_ids) != layers.ids:
        raise ConfigError(f"aux_layer_ids {list(cfg.aux_layer_ids)} differ from the cache's {list(layers.ids)} "
                          "(input-of-layer): capture those layers, or drop the setting")
    return layers


def offline_source(cfg: TrainConfig, target: Any, rows: list[TokenizedRow], layers: AuxLayers, key: str,
                   tokenizer_fingerprint: str) -> Any:
    """Offline mode without a given cache: capture one in this process, once per (data, tokenizer, layers) key, in
    the format `datahunt capture` writes (in the target's dtype), then serve it."""
    from training.capture import capture_into
    from training.offline_cache import OfflineCache, read_manifest, target_identity

    folder = cfg.out / "hidden_cache" / f"{key}-{'-'.join(map(str, layers.as_input().ids))}"
    manifest = read_manifest(folder) if (folder / "manifest.json").is_file() else None
    if manifest is None or not manifest.get("complete"):
        dtype = "bfloat16" if next(iter(target.parameters())).dtype == torch.bfloat16 else "float32"
        capture_into(folder, target, rows, layers, target_identity(cfg.target), tokenizer_fingerprint, dtype=dtype)
        manifest = read_manifest(folder)
    return OfflineCache(folder, manifest)
