"""The training-curve figure every trainer writes beside its metrics (and the cards show): one panel per stage or
view, training curves against the step on the left axis, validation points on a right axis when there are any."""

from dataclasses import dataclass, field


@dataclass
class Panel:
    ylabel: str  # the left axis: what the curves measure
    curves: dict  # {label: (steps, values)} drawn as lines
    title: str = ""
    validation: dict = field(default_factory=dict)  # {label: (steps, values)} drawn as points on the right axis
    validation_label: str = "validation"  # the right axis
    validation_limits: tuple | None = None  # the right axis's (low, high), e.g. (0, 1) for a rate


def curve(points, key):
    """(steps, values) of one measure in a history's list of points ({"step": ..., key: ...})."""
    return [point["step"] for point in points], [point[key] for point in points]


def plot_history(panels, path):
    """Write the panels side by side into the image `path` (PNG)."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no display
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels) + (1.5 if len(panels) == 1 else 0), 4),
                                squeeze=False)
    for axis, panel in zip(axes[0], panels):
        for label, (steps, values) in panel.curves.items():
            axis.plot(steps, values, label=label)
        axis.set_title(panel.title), axis.set_xlabel("step"), axis.set_ylabel(panel.ylabel), axis.grid(alpha=0.3)
        if panel.validation:
            twin = axis.twinx()
            for index, (label, (steps, values)) in enumerate(panel.validation.items()):
                twin.plot(steps, values, "os^"[index % 3] + "-", color=f"C{len(panel.curves) + index}", label=label)
            twin.set_ylabel(panel.validation_label)
            if panel.validation_limits:
                twin.set_ylim(*panel.validation_limits)
    figure.legend(loc="lower right")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
