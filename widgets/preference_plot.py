"""A preference run's headline figure against step, drawn like the loss plot (widgets.loss_plot):
DPO's reward accuracy, KTO's KL estimate, ORPO's log odds ratio, with the held-out eval's value of the
same figure over it and a second figure in its own strip under it, as the loss plot draws the
learning rate (the margin; ORPO's accuracy), its range the bottom border's text. Plain data in: the
run view hands it the series."""

from __future__ import annotations

from collections.abc import Sequence

from cockpit import fmt
from widgets.loss_plot import LossPlot

# objective -> (the main line's figure, the second line's), as PreferenceState names them
PLOTTED = {
    "dpo": ("accuracy", "margins"),
    "kto": ("kl", "margins"),
    "orpo": ("log_odds_ratio", "accuracy"),
}
STRIP = {"margins": "mrg", "accuracy": "acc"}  # the second figure's strip label
WORDS = {
    "accuracy": "reward accuracy",
    "margins": "margin",
    "kl": "KL",
    "log_odds_ratio": "log odds ratio",
}


def title_of(objective: str, with_eval: bool) -> str:
    main, _ = PLOTTED[objective]
    return f"{objective}: {WORDS[main]}" + (" · held-out" if with_eval else "")


def range_text(name: str, points: Sequence[tuple[int, float]], width: int = 0) -> str:
    """The second line's scale and its value now; less of it where `width` is too narrow."""
    if not points:
        return ""
    values = [v for _, v in points]
    low, high, now = (fmt.loss(v) for v in (min(values), max(values), values[-1]))
    word = WORDS[name]
    texts = (f"{word} {low}…{high}, now {now}", f"{word} now {now}", now)
    return next((text for text in texts if not width or len(text) <= width), "")


class PreferencePlot(LossPlot):
    """The objective's figure over the steps; `show()` hands it the series."""

    NOUN = "preference figure"

    def __init__(self, *, name: str | None = None, id: str | None = None, classes: str | None = None):
        super().__init__(name=name, id=id, classes=classes)
        self.second = "margins"

    def show(
        self,
        objective: str,
        series: dict[str, Sequence[tuple[int, float]]],
        evals: Sequence[tuple[int, float]] = (),
    ) -> None:
        """`series`: figure -> (step, value) of the logged steps; `evals`: the held-out values of the
        main figure (step 0: before training)."""
        main, self.second = PLOTTED[objective]
        self.NOUN, self.STRIP_LABEL = WORDS[main], STRIP[self.second]
        self.border_title = title_of(objective, bool(evals))
        self.plot(series.get(main, ()), series.get(self.second, ()), evals)

    def subtitle_text(self, width: int) -> str:
        return range_text(self.second, self.lr_points, width)
