"""`TrajectoryWindows`: a `torch.utils.data.Dataset` over the files of `warpsph dataset`
(or any dataset in LagrangeBench's layout), with the samples of LagrangeBench's H5Dataset.

Two modes, chosen by the split as LagrangeBench chooses them:

* ``"windows"`` (train): every window of ``L = inputLength + 1 + extraLength`` consecutive
  frames, stride 1, so ``T - L + 1`` per trajectory, trajectory by trajectory. The first
  ``inputLength`` frames are the input history (``inputLength - 1`` velocities), the next
  one the target of a one-step model (its acceleration is the second difference of the last
  three positions), ``extraLength`` more for push-forward unrolls.
* ``"rollout"`` (valid, test): each trajectory cut into ``T // L`` non-overlapping
  sub-trajectories of ``L = inputLength + extraLength`` frames (``extraLength`` >= 1: the
  rollout steps to compare), starting at frame 0.

An item is a `Window` of torch tensors in LagrangeBench's particle-major layout (time on axis
1): ``history [N, inputLength, d]``, ``target [N, L - inputLength, d]`` and
``particleType [N]`` (int64); ``torch.cat((history, target), 1)`` is LagrangeBench's sample
array. The file is opened lazily, once per process (safe with DataLoader workers).
"""

from __future__ import annotations

import bisect
import json
from pathlib import Path
from typing import NamedTuple

import torch

from .cases import SPLITS

__all__ = ["Window", "TrajectoryWindows", "MODES"]

#: the sample modes of `TrajectoryWindows`
MODES = ("windows", "rollout")


class Window(NamedTuple):
    """One sample of `TrajectoryWindows` (module docstring)."""

    history: torch.Tensor
    target: torch.Tensor
    particleType: torch.Tensor


class TrajectoryWindows(torch.utils.data.Dataset):
    """Windows (or rollout sub-trajectories) of one split of a dataset folder (module
    docstring).

    Args:
        path: the dataset folder (``train.h5``, ``valid.h5``, ``test.h5``; ``metadata.json``
            is read when present).
        split: ``"train"``, ``"valid"`` or ``"test"``.
        inputLength: frames of the input history (LagrangeBench's input_seq_length,
            default 6, >= 2: one velocity).
        extraLength: frames after the target (windows: push-forward unrolls) or after the
            history (rollout: steps to compare, >= 1).
        mode: ``"windows"`` or ``"rollout"``; None: windows for train, rollout otherwise.

    Attributes:
        metadata: the dict of ``metadata.json`` (empty without one).
        keys: the trajectory groups, in file order.
        sequenceLength: T, the frames per trajectory.
        length: L, the frames of one sample.
    """

    def __init__(self, path, split: str = "train", inputLength: int = 6,
                 extraLength: int = 0, mode: str | None = None):
        from .generate import _requireH5py

        h5py = _requireH5py()
        self.path = Path(path)
        if split not in SPLITS:
            raise ValueError(f"TrajectoryWindows: split={split!r}; accepted: "
                             f"{', '.join(SPLITS)}")
        mode = ("windows" if split == "train" else "rollout") if mode is None else mode
        if mode not in MODES:
            raise ValueError(f"TrajectoryWindows: mode={mode!r}; accepted: {', '.join(MODES)}")
        if isinstance(inputLength, bool) or not isinstance(inputLength, int) or inputLength < 2:
            raise ValueError(f"TrajectoryWindows: inputLength={inputLength!r}; accepted: an "
                             "int >= 2 (at least one velocity)")
        minimum = 1 if mode == "rollout" else 0
        if isinstance(extraLength, bool) or not isinstance(extraLength, int) \
                or extraLength < minimum:
            raise ValueError(f"TrajectoryWindows: extraLength={extraLength!r}; accepted: an int "
                             f">= {minimum} in mode {mode!r}")
        self.file = self.path / f"{split}.h5"
        if not self.file.exists():
            raise FileNotFoundError(f"TrajectoryWindows: {self.file} does not exist; a dataset "
                                    "folder holds train.h5, valid.h5 and test.h5 (warpsph "
                                    "dataset CASE --out DIR)")
        meta = self.path / "metadata.json"
        self.metadata = json.loads(meta.read_text()) if meta.exists() else {}
        self.split, self.mode = split, mode
        self.inputLength, self.extraLength = inputLength, extraLength
        with h5py.File(self.file, "r") as f:
            self.keys = list(f.keys())
            if not self.keys:
                raise ValueError(f"TrajectoryWindows: {self.file} holds no trajectory")
            lengths = {f[k]["position"].shape[0] for k in self.keys}
        if len(lengths) != 1:
            raise ValueError(f"TrajectoryWindows: {self.file} has trajectories of lengths "
                             f"{sorted(lengths)}; accepted: one length T per split")
        self.sequenceLength = lengths.pop()
        if mode == "windows":
            self.length = inputLength + 1 + extraLength
            perTrajectory = self.sequenceLength - self.length + 1
        else:
            self.length = inputLength + extraLength
            perTrajectory = self.sequenceLength // self.length
        if perTrajectory < 1:
            raise ValueError(f"TrajectoryWindows: {self.file} has T = {self.sequenceLength} "
                             f"frames per trajectory, fewer than the {self.length} of one "
                             f"{mode} sample (inputLength {inputLength}, extraLength "
                             f"{extraLength}); use shorter lengths or longer trajectories")
        self.perTrajectory = perTrajectory
        self._ends = [perTrajectory * (k + 1) for k in range(len(self.keys))]
        self._h5 = None

    def __len__(self) -> int:
        return self._ends[-1]

    def locate(self, index: int) -> tuple[str, int]:
        """The trajectory group and first frame of sample `index`.

        Args:
            index: a sample index (negative counts from the end).

        Returns:
            ``(key, start)``: the sample is frames ``start .. start + length - 1`` of
            ``key``.
        """
        n = len(self)
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError(f"TrajectoryWindows: index {index} out of range for {n} samples")
        k = bisect.bisect_right(self._ends, index)
        within = index - (self._ends[k - 1] if k else 0)
        step = 1 if self.mode == "windows" else self.length
        return self.keys[k], within * step

    def _open(self):
        if self._h5 is None:
            from .generate import _requireH5py

            self._h5 = _requireH5py().File(self.file, "r")
        return self._h5

    def __getitem__(self, index: int) -> Window:
        key, start = self.locate(index)
        group = self._open()[key]
        x = group["position"][start:start + self.length]
        x = torch.from_numpy(x.transpose(1, 0, 2).copy())
        types = torch.from_numpy(group["particle_type"][()].astype("int64"))
        return Window(x[:, :self.inputLength], x[:, self.inputLength:], types)

    def close(self) -> None:
        """Close the file (it reopens on the next item)."""
        if self._h5 is not None:
            self._h5.close()
            self._h5 = None

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_h5"] = None  # each process opens its own handle
        return state

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
