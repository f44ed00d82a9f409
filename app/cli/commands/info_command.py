"""`shardchat info MODEL`: a model's inventory as a table or as JSON."""

from __future__ import annotations

import argparse
import json

from app.cli.commands.devices_report import run_devices
from app.screen_text.units import format_bytes, format_count
from app.stores.model_library import prompt_format_for
from engine.errors import BadInputError
from engine.model.default_model import default_model_path
from engine.model.inventory import ModelInventory, SubLayerKind, read_inventory
from engine.model.model_naming import readable_model_name
from engine.model.model_purpose import ModelPurpose, purpose_of_file
from engine.model.prompt_format import PromptFormat
from engine.runtime.loaded_model import prompt_format_of_file

_BLOCK_COLUMNS = (
    SubLayerKind.ATTENTION,
    SubLayerKind.DENSE_FFN,
    SubLayerKind.MOE_ROUTER,
    SubLayerKind.ROUTED_EXPERTS,
    SubLayerKind.SHARED_EXPERTS,
)


def run_info(args: argparse.Namespace) -> int:
    if args.devices:
        if args.model is not None:
            raise BadInputError("info --devices takes no MODEL")
        return run_devices(args)
    if args.model is None:
        raise BadInputError("info needs a MODEL (a GGUF file, or 'default'), or --devices")
    path = default_model_path() if args.model == "default" else args.model
    inventory = read_inventory(path)
    chosen, purpose = None, None  # a projector writes no prompts
    if not inventory.is_vision_projector:
        chosen = prompt_format_of_file(path, prompt_format_for(path, args.prompt_format))
        purpose = purpose_of_file(path)
    if args.json:
        data = inventory.to_dict()
        data["readable_name"] = readable_model_name(path, inventory.name)
        if chosen is not None:
            data["prompt_format"] = {
                "name": chosen.name, "kind": chosen.kind.value, "reason": chosen.reason
            }  # fmt: skip
        if purpose is not None:
            data["trained_as"] = {"kind": purpose.purpose.value, "evidence": purpose.evidence}
        print(json.dumps(data, indent=2, default=str))
    else:
        name = readable_model_name(path, inventory.name)
        print(render_inventory(inventory, chosen, name, purpose))
    return 0


def render_inventory(
    inventory: ModelInventory,
    prompt_format: PromptFormat | None = None,
    readable_name: str = "",
    purpose: ModelPurpose | None = None,
) -> str:
    """The summary lines (with what the model was trained for and the prompt format it gets,
    and why), then one row per block and the global sub-layers. `readable_name` is made from
    the path as given: the inventory's is resolved, and a Hugging Face cache link resolves
    to a hash-named blob."""
    summary = _summary(inventory, readable_name or readable_model_name(inventory.path))
    if purpose is not None:
        summary.append(f"trained as     {purpose.describe()}")
    if prompt_format is not None:
        summary.append(f"prompt format  {prompt_format.describe()}")
    return "\n".join([*summary, "", *_block_table(inventory), *_globals(inventory)])


def _summary(inv: ModelInventory, readable_name: str) -> list[str]:
    kind = "vision projector" if inv.is_vision_projector else "MoE" if inv.is_moe else "dense"
    lines = [
        f"file           {inv.path} ({format_bytes(inv.file_bytes)})",
        f"name           {inv.name}",
        f"shown as       {readable_name}",
        f"architecture   {inv.architecture} ({kind})",
        f"parameters     {format_count(inv.n_params)}",
        f"context        {inv.context_length or '?'} tokens",
        f"layers         {inv.n_layer}, width {inv.n_embd}, heads {inv.n_head}/{inv.n_head_kv} kv",
        f"quant types    {_quant_mix(inv)}",
        f"weights        {_kind_mix(inv)}",
        f"KV cache       {format_bytes(inv.kv_bytes_per_token)} per token (f16)",
    ]
    if inv.is_moe:
        lines.append(
            f"experts        {inv.expert_count} routed ({inv.expert_used_count} used per token), "
            f"{inv.expert_shared_count} shared"
        )
    if inv.is_vision_projector:
        lines.append(f"projector      {inv.projector_type or 'unknown'}")
    return lines


def _quant_mix(inv: ModelInventory) -> str:
    total = sum(inv.quant_bytes.values()) or 1
    return ", ".join(f"{q} {_percent(b, total)}" for q, b in inv.quant_bytes.items())


def _kind_mix(inv: ModelInventory) -> str:
    by_kind = sorted(inv.bytes_by_kind().items(), key=lambda item: -item[1])
    parts = ", ".join(f"{kind.value} {format_bytes(n)}" for kind, n in by_kind)
    return f"{format_bytes(inv.tensor_bytes)}: {parts}"


def _percent(part: int, total: int) -> str:
    share = 100 * part / total
    return "<1%" if 0 < share < 1 else f"{share:.0f}%"


def _block_table(inv: ModelInventory) -> list[str]:
    columns = [k for k in _BLOCK_COLUMNS if any(b.sublayer(k) for b in inv.blocks)]
    if not columns:
        return []
    header = f"{'block':>5}  " + "".join(f"{k.value:>16}" for k in columns) + f"{'kv/token':>12}"
    rows = [header, "-" * len(header)]
    for block in inv.blocks:
        cells = "".join(f"{_size(block.sublayer(k)):>16}" for k in columns)
        swa = "*" if block.sliding_window else ""
        rows.append(f"{block.index:>5}  {cells}{format_bytes(block.kv_bytes_per_token) + swa:>12}")
    if any(b.sliding_window for b in inv.blocks):
        window = next(b.sliding_window for b in inv.blocks if b.sliding_window)
        rows.append(f"* sliding-window layer: KV cache capped at {window} tokens")
    return rows


def _globals(inv: ModelInventory) -> list[str]:
    lines = [""]
    for sub in inv.globals:
        lines.append(
            f"{sub.kind.value:<18}{format_bytes(sub.n_bytes):>12}  {', '.join(sub.quant_types)}"
        )
    if inv.tied_output and not inv.is_vision_projector:
        lines.append(f"{'output_head':<18}{'(tied)':>12}  shares the token embedding")
    return lines


def _size(sub: object) -> str:
    return "-" if sub is None else format_bytes(sub.n_bytes)  # type: ignore[attr-defined]
