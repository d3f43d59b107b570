"""A preference run in words (docs/preference.md): the setup line, the eval line, and what the
status line adds to the loss (`--no-ui`'s step lines; the run view's figures)."""

from __future__ import annotations

from typing import Any

from cockpit import fmt
from cockpit.run.preference_state import PreferenceState


def status_parts(pref: PreferenceState) -> list[str]:
    """`acc 0.75  margin +0.42` (dpo, orpo), `kl 0.31` (kto), `log-odds -0.52` (orpo): the last
    logged step's; nothing for an SFT run."""
    last = pref.last
    if not last:
        return []
    parts = []
    if "accuracy" in last:
        parts.append(f"acc {last['accuracy']:.2f}")
    if "margins" in last:
        parts.append(f"margin {last['margins']:+.3g}")
    if "kl" in last:
        parts.append(f"kl {last['kl']:.3g}")
    if "log_odds_ratio" in last:
        parts.append(f"log-odds {last['log_odds_ratio']:+.3g}")
    return parts


def figures_text(item: dict[str, Any]) -> str:
    """The figures of a preference_log or preference_eval event, each with its name."""
    said = []
    if item.get("accuracy") is not None:
        said.append(f"reward accuracy {fmt.share(item['accuracy'])}")
    if item.get("margins") is not None:
        said.append(f"margin {item['margins']:+.4g}")
    if item.get("rewards_chosen") is not None and item.get("rewards_rejected") is not None:
        said.append(
            f"rewards chosen {item['rewards_chosen']:+.4g} / rejected {item['rewards_rejected']:+.4g}"
        )
    if item.get("kl") is not None:
        said.append(f"kl {item['kl']:.4g}")
    if item.get("log_odds_ratio") is not None:
        said.append(f"log odds ratio {item['log_odds_ratio']:+.4g}")
    if item.get("nll_loss") is not None:
        said.append(f"nll {fmt.loss(item['nll_loss'])}")
    return ", ".join(said)


def setup_line(item: dict[str, Any]) -> str:
    """`dpo: reference the base with the adapter disabled ...; 328 pairs, beta 0.1, ...`."""
    objective = item.get("objective")
    rows = item.get("rows")
    what = "pairs" if item.get("sequences_per_row") == 2 else "completions"
    cuts = []
    if item.get("prompts_cut"):
        cuts.append(f"{item['prompts_cut']} prompts cut to {item.get('max_prompt_length')}")
    if item.get("answers_cut"):
        cuts.append(f"{item['answers_cut']} answers cut at {item.get('max_length')}")
    if item.get("rows_dropped_by_length"):
        cuts.append(f"{item['rows_dropped_by_length']} rows dropped (no room for the answer)")
    start = f", from {item['init_from']}" if item.get("init_from") else ""
    return (
        f"{objective}: {rows} {what}, beta {item.get('beta')}, loss {item.get('loss_type')}{start}; "
        f"reference: {item.get('reference_note')}" + (f"; {', '.join(cuts)}" if cuts else "")
    )


def eval_line(item: dict[str, Any]) -> str:
    """`dpo eval: step 20: reward accuracy 75%, margin +0.31, ... on 17 held-out rows`."""
    where = "before step 1" if item.get("stage") == "base" else f"step {item.get('step')}"
    figures = figures_text(item) or f"loss {fmt.loss(item.get('eval_loss'))}"
    return f"{item.get('objective')} eval: {where}: {figures} on {item.get('eval_rows')} held-out rows"
