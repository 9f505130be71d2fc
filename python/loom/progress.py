"""A progress display of a training job's steps, for terminals and notebooks: tqdm's bar
(tqdm.auto: a widget in Jupyter) when tqdm is installed (Debian's python3-tqdm), else one plain
line per step ("step 3/20  loss 4.1234  0.012 s/step  52,000 tokens/s", with "val_loss 4.3210"
after the loss in the steps that evaluate), rewritten in place on a terminal; the bar shows the
last validation loss until the next. Run.progress() uses it."""

import sys


def _plain_line(step):
    line = f"step {step.step}/{step.num_steps}  loss {step.loss:.4f}  "
    if step.validation_loss is not None:
        line += f"val_loss {step.validation_loss:.4f}  "
    line += f"{step.step_time_seconds:.3f} s/step"
    if step.tokens_per_second is not None:
        line += f"  {step.tokens_per_second:,.0f} tokens/s"
    for name, value in step.scalars.items():
        line += f"  {name} {value:.4g}"
    return line


class StepProgress:
    """update(step) per Step event; close() at the end. USE_TQDM None: tqdm when importable."""

    def __init__(self, total=None, description="", file=None, use_tqdm=None):
        self.file = file if file is not None else sys.stderr
        self.bar = None
        self.description = description
        self.last_length = 0
        # The bar's postfix keeps the last validation loss (evaluations are every few steps).
        self.last_validation_loss = None
        if use_tqdm is not False:
            try:
                from tqdm.auto import tqdm
            except ImportError:
                if use_tqdm:
                    raise
            else:
                self.bar = tqdm(total=total or None, desc=description or None, file=self.file,
                                unit="step", dynamic_ncols=True)
        self.in_place = self.bar is None and hasattr(self.file, "isatty") and self.file.isatty()

    def update(self, step):
        if self.bar is not None:
            if step.num_steps and self.bar.total != step.num_steps:
                self.bar.total = step.num_steps
            self.bar.update(step.step - self.bar.n)
            postfix = {"loss": f"{step.loss:.4f}"}
            if step.validation_loss is not None:
                self.last_validation_loss = step.validation_loss
            if self.last_validation_loss is not None:
                postfix["val_loss"] = f"{self.last_validation_loss:.4f}"
            if step.tokens_per_second is not None:
                postfix["tokens/s"] = f"{step.tokens_per_second:,.0f}"
            self.bar.set_postfix(postfix, refresh=False)
            return
        line = (f"{self.description}: " if self.description else "") + _plain_line(step)
        if self.in_place:
            self.file.write("\r" + line.ljust(self.last_length))
            self.last_length = len(line)
        else:
            self.file.write(line + "\n")
        self.file.flush()

    def close(self):
        if self.bar is not None:
            self.bar.close()
        elif self.in_place and self.last_length:
            self.file.write("\n")
            self.file.flush()

    def __enter__(self):
        return self

    def __exit__(self, *exception):
        self.close()
