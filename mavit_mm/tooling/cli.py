"""What the tools' command lines share: argparse types that refuse what cannot
run, with a message naming the option's problem (argparse adds the option),
and the device a tool runs on."""
from __future__ import annotations

import argparse

from mmengine.config import DictAction

# The coarsest feature map is 1/32 of the input: below one cell a side the
# necks and heads have nothing to work on.
MIN_IMAGE_SIDE = 32


def int_at_least(minimum: int):
    """An argparse type: an integer not under ``minimum``."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f'expected an integer, got {text!r}') from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f'must be at least {minimum}, got {value}')
        return value
    parse.__name__ = f'integer >= {minimum}'   # argparse's "invalid ... value" names it
    return parse


def image_side(text: str) -> int:
    """An argparse type: one side of an input image, in pixels."""
    return int_at_least(MIN_IMAGE_SIDE)(text)


def image_size(text: str) -> tuple[int, int]:
    """An argparse type: ``HEIGHTxWIDTH``, e.g. ``512x2048``."""
    parts = text.lower().split('x')
    if len(parts) != 2:
        raise argparse.ArgumentTypeError(f'sizes are HEIGHTxWIDTH, e.g. 512x2048; got {text!r}')
    return image_side(parts[0]), image_side(parts[1])


def device_option(text: str) -> str:
    """An argparse type: a device torch knows by name (``cpu``, ``cuda``,
    ``cuda:1``, ...); whether this machine has it is :func:`resolve_device`'s."""
    import torch
    try:
        torch.device(text)
    except RuntimeError:
        raise argparse.ArgumentTypeError(
            f'expected a torch device such as cpu, cuda or cuda:1; got {text!r}') from None
    return text


class ConfigOptions(DictAction):
    """mmengine's ``--cfg-options`` action (``KEY=VALUE`` items merged into the
    config, values parsed as mmengine parses them), refusing through argparse,
    which names the option, an item without a key and ``=`` or a value whose
    brackets or quotes do not pair; mmengine's own ends those in a traceback."""

    def __call__(self, parser, namespace, values, option_string=None):
        for item in values or ():
            key, equals, _ = item.partition('=')
            if not equals or not key.strip():
                raise argparse.ArgumentError(
                    self, f'expected KEY=VALUE, e.g. train_cfg.max_iters=100; got {item!r}')
            try:   # one item at a time, so that the error names it
                super().__call__(parser, namespace, [item], option_string)
            except (AssertionError, ValueError, IndexError):
                raise argparse.ArgumentError(
                    self, f'cannot parse the value of {item!r}: its brackets and quotes '
                          f'must pair, e.g. model.backbone.depths=[2,2,6,2]') from None


def resolve_device(name: str | None):
    """``torch.device(name)``, by default CUDA where there is one, else the CPU;
    a ValueError for a CUDA device this machine does not have."""
    import torch

    device = torch.device(name or ('cuda' if torch.cuda.is_available() else 'cpu'))
    if device.type == 'cuda' and not torch.cuda.is_available():
        raise ValueError(f'device {name}: this machine has no CUDA device (torch '
                         f'{torch.__version__}); use --device cpu')
    if device.type == 'cuda' and device.index is not None \
            and device.index >= torch.cuda.device_count():
        raise ValueError(f'device {name}: there are {torch.cuda.device_count()} CUDA devices')
    return device


# What a user's input can raise: a missing file, a checkpoint, config or
# argument that does not fit (ConfigCheckError is a ValueError).
USER_ERRORS = (FileNotFoundError, NotADirectoryError, ValueError)


def run_tool(main, prog: str, argv=None):
    """``main(argv)``; a user's mistake (:data:`USER_ERRORS`) ends the process
    as argparse ends it, ``prog: error: ...`` (status 2), not with a traceback
    through the libraries. The line names where the error was raised, so that
    one raised by a bug can still be found."""
    import sys
    import traceback
    try:
        return main(argv)
    except USER_ERRORS as error:
        frame = traceback.extract_tb(error.__traceback__)[-1]
        print(f'{prog}: error: {error} (raised at {frame.filename}:{frame.lineno})',
              file=sys.stderr)
        raise SystemExit(2) from None
