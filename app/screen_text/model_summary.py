"""What the model manager says about one GGUF file, worked out from its inventory (and, for
"Trained as", from its header's general.* keys: engine.model.model_purpose).

Why apart from the window: the wording ("MoE 128×8", "Q4_K 81% · Q6_K 17%") and
the sub-layer breakdown are decisions about the model, not about widgets, so
they are computed here as plain values a dialog, the CLI or a test can read.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from app.screen_text.units import format_bytes, format_count
from app.stores.model_files import kind_label
from engine.errors import ModelFileError
from engine.model.inventory import ModelInventory, SubLayerKind
from engine.model.model_purpose import purpose_of_file

# How each sub-layer kind is named to a person; one table, in SubLayerKind's order.
SUBLAYER_LABELS: dict[SubLayerKind, str] = {
    SubLayerKind.ATTENTION: "Attention",
    SubLayerKind.DENSE_FFN: "Feed-forward (dense)",
    SubLayerKind.MOE_ROUTER: "MoE router",
    SubLayerKind.ROUTED_EXPERTS: "Routed experts",
    SubLayerKind.SHARED_EXPERTS: "Shared experts",
    SubLayerKind.TOKEN_EMBEDDING: "Token embedding",
    SubLayerKind.OUTPUT_NORM: "Output norm",
    SubLayerKind.OUTPUT_HEAD: "Output head",
    SubLayerKind.VISION_ENCODER: "Vision encoder",
    SubLayerKind.VISION_PROJECTOR: "Vision projector",
    SubLayerKind.OTHER: "Other",
}


@dataclass(frozen=True)
class SizeShare:
    """One part of the file (a sub-layer kind or a quant type) and its share of the tensors."""

    label: str
    n_bytes: int
    fraction: float  # of all tensor bytes, 0..1

    @property
    def size_text(self) -> str:
        return format_bytes(self.n_bytes)

    @property
    def percent_text(self) -> str:
        return percent_text(self.fraction)


@dataclass(frozen=True)
class ModelSummary:
    """The manager's view of one model file: facts to list and parts to tabulate."""

    name: str  # general.name as the file states it
    architecture: str
    kind: str
    n_params: int
    file_bytes: int
    context_length: int | None
    n_layer: int
    kv_bytes_per_token: int
    tied_output: bool
    quant_mix: tuple[SizeShare, ...]  # largest first
    breakdown: tuple[SizeShare, ...]  # bytes per sub-layer kind, largest first
    trained_as: str = ""  # "base model (...)": engine.model.model_purpose; "" when not read

    def facts(self) -> list[tuple[str, str]]:
        """(label, text) rows in reading order, for a details pane."""
        rows = [
            ("Name in file", self.name),
            ("Architecture", self.architecture),
            ("Kind", self.kind),
            *([("Trained as", self.trained_as)] if self.trained_as else []),
            ("Parameters", format_count(self.n_params)),
            ("File size", format_bytes(self.file_bytes)),
            ("Context length", context_text(self.context_length)),
            ("Layers", str(self.n_layer)),
            ("Quantisation", quant_text(self.quant_mix)),
        ]
        if self.kv_bytes_per_token:
            rows.append(("KV cache", f"{format_bytes(self.kv_bytes_per_token)} per token"))
        if self.tied_output:
            rows.append(("Output head", "tied to the token embedding"))
        return rows


def summarize(inventory: ModelInventory) -> ModelSummary:
    """The summary of one inventory; cheap, the slow part was reading the inventory."""
    total = inventory.tensor_bytes
    return ModelSummary(
        name=inventory.name,
        architecture=inventory.architecture,
        kind=kind_label(inventory),
        n_params=inventory.n_params,
        file_bytes=inventory.file_bytes,
        context_length=inventory.context_length,
        n_layer=inventory.n_layer,
        kv_bytes_per_token=inventory.kv_bytes_per_token,
        tied_output=inventory.tied_output and not inventory.is_vision_projector,
        quant_mix=_shares(inventory.quant_bytes.items(), total),
        breakdown=_shares(
            ((SUBLAYER_LABELS[kind], n) for kind, n in inventory.bytes_by_kind().items()), total
        ),
        trained_as=_trained_as(inventory),
    )


def _trained_as(inventory: ModelInventory) -> str:
    """What the file says the model was trained for, read from its header (a projector writes
    no prompts; a file gone since its inventory was read says nothing)."""
    if inventory.is_vision_projector:
        return ""
    try:
        return purpose_of_file(inventory.path).describe()
    except ModelFileError:
        return ""


def context_text(context_length: int | None) -> str:
    return "not stated" if not context_length else f"{context_length:,} tokens"


def quant_text(quant_mix: tuple[SizeShare, ...]) -> str:
    """'Q4_1 67% · Q8_0 31% · F32 <1%'; at most four types, the rest as 'other'."""
    shown = [f"{share.label} {share.percent_text}" for share in quant_mix[:4]]
    if len(quant_mix) > 4:
        rest = sum(share.fraction for share in quant_mix[4:])
        shown.append(f"other {percent_text(rest)}")
    return " · ".join(shown) or "no tensors"


def percent_text(fraction: float) -> str:
    """Whole percents, except that a real but tiny part reads "<1%" rather than "0%"."""
    percent = fraction * 100
    return "<1%" if 0 < percent < 1 else f"{percent:.0f}%"


def _shares(parts: Iterable[tuple[str, int]], total: int) -> tuple[SizeShare, ...]:
    """(label, bytes) pairs as shares of `total`, largest first; empty parts dropped."""
    shares = [
        SizeShare(label, n_bytes, n_bytes / total if total else 0.0)
        for label, n_bytes in parts
        if n_bytes
    ]
    return tuple(sorted(shares, key=lambda share: (-share.n_bytes, share.label)))
