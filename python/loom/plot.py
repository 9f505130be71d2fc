"""plot_losses: a training run's loss (and validation loss) per step, drawn with matplotlib when
it is installed, else as a text chart."""

import sys


def plot_losses(steps, path=None, file=None, use_matplotlib=None, width=50):
    """STEPS: Step events. With matplotlib (USE_MATPLOTLIB None: when importable) the curves go to
    PATH (an image file) or a window; without it a text chart, one line per step, goes to FILE
    (default stdout). Returns the file written, or None."""
    steps = list(steps)
    if not steps:
        raise ValueError("no steps to plot")
    if use_matplotlib is not False:
        try:
            import matplotlib
            if path is not None:
                matplotlib.use("Agg")
            import matplotlib.pyplot as pyplot
        except ImportError:
            if use_matplotlib:
                raise
        else:
            figure, axes = pyplot.subplots()
            axes.plot([s.step for s in steps], [s.loss for s in steps], label="loss")
            evaluated = [s for s in steps if s.validation_loss is not None]
            if evaluated:
                axes.plot([s.step for s in evaluated], [s.validation_loss for s in evaluated],
                          "o-", label="val_loss")
            axes.set_xlabel("step")
            axes.legend()
            if path is None:
                pyplot.show()
                return None
            figure.savefig(path)
            pyplot.close(figure)
            return path
    out = file if file is not None else sys.stdout
    values = [s.loss for s in steps] + [s.validation_loss for s in steps
                                        if s.validation_loss is not None]
    low, high = min(values), max(values)
    scale = (width - 1) / (high - low) if high > low else 0.0
    out.write(f"loss from {low:.4f} (left) to {high:.4f} (right); * loss, o val_loss\n")
    for step in steps:
        line = [" "] * width
        line[round((step.loss - low) * scale)] = "*"
        if step.validation_loss is not None:
            line[round((step.validation_loss - low) * scale)] = "o"
        extra = (f"  val_loss {step.validation_loss:.4f}"
                 if step.validation_loss is not None else "")
        out.write(f"{step.step:6d} |{''.join(line)}| {step.loss:.4f}{extra}\n")
    return None
