"""What a vLLM server says about itself, and its speculative-decoding counters from `/metrics`.

vLLM has no public endpoint for its resolved settings: `GET /version` gives the version, `GET /v1/models` the
served model (`root` is its path, `max_model_len` the context), and `GET /metrics` (Prometheus text) holds the
speculative counters when it speculates: `vllm:spec_decode_num_drafts_total`, `..._num_draft_tokens_total`,
`..._num_accepted_tokens_total` and `..._num_accepted_tokens_per_pos_total{position="i"}`, one per draft
position, so the chain length is the number of positions. Started with `VLLM_SERVER_DEV_MODE=1` it also
answers `GET /server_info?config_format=json` with the whole config (speculative method, draft path, dtype),
at the same path SGLang uses, which is how the two are told apart there.

The answer is normalised into the SGLang-shaped dict the preflight reads (`speculative_algorithm` "EAGLE3",
`speculative_draft_model_path`, `speculative_num_steps`, `context_length`, `dtype`) with `engine: "vllm"`, so
one set of checks serves both engines; where vLLM does not say (no dev mode), the field stays None and the
check says it could not see it. Acceptance is read from the counters differenced around a run: the set's
acceptance length is 1 + accepted / drafts (each draft round yields its accepted tokens and one of the
target's), and position i's share of accepted drafts gives per-position acceptance.
"""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from core.json_types import JSONObject, JSONValue
from core.spec_counters import VllmSpecCounters
from inference.errors import InferenceError

DRAFTS = "vllm:spec_decode_num_drafts"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens"
PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos"
METHODS = {"eagle3": "EAGLE3", "eagle": "EAGLE", "mtp": "NEXTN", "ngram": "NGRAM", "draft_model": "STANDALONE"}


class MetricsError(InferenceError, ValueError):
    """A `/metrics` answer that is not Prometheus text."""


def parse_metrics(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Every sample in Prometheus text by its name (counters keep their `_total` suffix): labels and value."""
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                samples.setdefault(sample.name, []).append((dict(sample.labels), float(sample.value)))
    except ValueError as exc:
        raise MetricsError(f"/metrics is not Prometheus text: {exc}") from None
    return samples


def spec_counters(samples: dict[str, list[tuple[dict[str, str], float]]]) -> VllmSpecCounters | None:
    """vLLM's speculative counters from parsed `/metrics`, None when it runs without speculation."""
    if f"{DRAFTS}_total" not in samples:
        return None

    def total(name: str) -> int:
        return int(sum(value for _, value in samples.get(f"{name}_total", [])))

    positions: dict[int, float] = {}
    for labels, value in samples.get(f"{PER_POSITION}_total", []):
        try:
            index = int(labels.get("position", ""))
        except ValueError:
            continue
        positions[index] = positions.get(index, 0.0) + value
    per_position = tuple(int(positions[i]) for i in sorted(positions))
    return VllmSpecCounters(total(DRAFTS), total(DRAFT_TOKENS), total(ACCEPTED), per_position)


def _object(value: JSONValue) -> JSONObject:
    """`value` when it is a JSON object, else an empty one (a setting vLLM did not give)."""
    return value if isinstance(value, dict) else {}


def normalise(version: JSONValue, models: JSONObject | None, metrics_text: str | None,
              server_info: JSONObject | None = None) -> JSONObject:
    """The SGLang-shaped settings dict the preflight reads, from what a vLLM server answered."""
    listed = (models or {}).get("data")
    model = next((m for m in listed if isinstance(m, dict)), {}) if isinstance(listed, list) else {}
    counters = spec_counters(parse_metrics(metrics_text)) if metrics_text else None
    config = _object((server_info or {}).get("vllm_config"))
    spec, model_config = _object(config.get("speculative_config")), _object(config.get("model_config"))
    spec_steps = spec.get("num_speculative_tokens")
    steps = spec_steps if isinstance(spec_steps, int) and spec_steps else (
        len(counters.per_position) if counters else None)
    method = str(spec.get("method") or "").lower()
    algorithm = METHODS.get(method, method.upper() or None) if spec else ("speculating" if counters else None)
    return {
        "engine": "vllm",
        "version": version,
        "model_path": model.get("root") or model_config.get("model") or model.get("id"),
        "served_model_name": model.get("id"),
        "context_length": model.get("max_model_len") or model_config.get("max_model_len"),
        "dtype": str(model_config.get("dtype")).replace("torch.", "") if model_config.get("dtype") else None,
        "speculative_algorithm": algorithm,
        "speculative_draft_model_path": spec.get("model"),
        "speculative_num_steps": steps,
        "speculative_eagle_topk": 1 if steps else None,
        "speculative_num_draft_tokens": steps + 1 if steps else None,
        "dev_mode": bool(config),
    }
