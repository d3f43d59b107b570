"""The run's time and cost from the data's real tokens per epoch, on one card: the card table's
own figures (`cockpit.plan.cards.figures_for`: the speed model at the card's price), not a
second model. The card is `--card`, else this machine's GPU (NVML); the price is
`cost.price_per_hour` when the config sets it, else the card's."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from cockpit.config.schema import TrainConfig
from cockpit.gpus import catalog as catalog_mod
from cockpit.gpus.card import Card
from cockpit.models import memory as est
from cockpit.models import shape as modelshape
from cockpit.plan.cards import figures_for
from cockpit.plan.cards_inputs import CardsError, RunSize
from cockpit.plan.fits import fit_card


def this_machines_card(catalog: catalog_mod.Catalog) -> tuple[Card | None, str]:
    """The catalog card of the first GPU NVML lists here, or (None, why)."""
    from cockpit.preflight import machine_fit, quick

    machine = machine_fit.read_machine(quick.NVML_SOURCE)
    if not machine.gpus:
        return None, machine.describe()
    name = machine.gpus[0][0]
    card = catalog_mod.find_card(name, catalog)
    return card, "" if card is not None else f"this machine's {name} is not in the card catalog"


def run_figures(
    cfg: TrainConfig, tokens_per_epoch: int | None, card_query: str | None = None
) -> dict[str, Any]:
    """Time and cost of the run on the chosen card, with every input stated; or `why_none`."""
    if tokens_per_epoch is None and cfg.training.max_steps is None:
        return {"why_none": "no token count (the tokenizer could not be loaded)"}
    try:
        catalog = catalog_mod.load_catalog()
        found, why, card_from = (catalog.get(card_query), "", "--card") if card_query else (None, "", "")
        if found is None:
            found, why = this_machines_card(catalog)
            card_from = "this machine's GPU"
        if found is None:
            return {"why_none": f"no card: {why}; give --card ID (cockpit cards lists them)"}
        card: Card = found
        shape = modelshape.load_shape(cfg.model.name, cfg.model.revision or "main")
        workload = est.workload_from_config(cfg, shape, "trl")
        size = RunSize(
            dataset_tokens=tokens_per_epoch or None,
            epochs=cfg.training.epochs,
            max_steps=cfg.training.max_steps,
        )
    except (catalog_mod.CatalogError, modelshape.ShapeError, est.EstimateError, CardsError) as exc:
        return {"why_none": str(exc)}
    price_from = "catalog"
    if cfg.cost.price_per_hour is not None:
        card, price_from = replace(card, price_per_hour=cfg.cost.price_per_hour), "cost.price_per_hour"
    elif card.price_is_default:
        price_from = f"default price of {card.price_date}"
    figures = figures_for(workload, card, size)
    fit = fit_card(workload, card)
    return {
        "card": card.id,
        "card_name": card.name,
        "card_from": card_from,
        "fits": fit.verdict,
        "usd_per_hour": card.price_per_hour,
        "price_from": price_from,
        "tokens_per_s": round(figures.speed.tokens_per_s, 1),
        "bound": figures.speed.bound,
        "run": size.describe(workload),
        "run_tokens": figures.tokens,
        "time_s": None if figures.time_s is None else round(figures.time_s, 1),
        "cost_usd": None if figures.cost_usd is None else round(figures.cost_usd, 4),
    }
