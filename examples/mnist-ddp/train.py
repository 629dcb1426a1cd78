"""Row-by-row LSTM digit classifier trained with DistributedDataParallel (the kiban demo).

Launch with torchrun, which sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT.
Data: MNIST IDX files from ``--data-dir`` if present, else scikit-learn's bundled 8x8 digits
(never downloads). If ``KIBAN_CHECKPOINT_DIR`` is set, rank 0 checkpoints after every epoch
and every rank resumes from that checkpoint on start.
"""

from __future__ import annotations

import argparse
import gzip
import math
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

SEED = 1234
IDX_DTYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
MNIST_FILES = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)
# What torchrun would set, so that a plain `python train.py` runs as a world of one.
SINGLE_PROCESS_ENV = {
    "RANK": "0",
    "WORLD_SIZE": "1",
    "LOCAL_RANK": "0",
    "MASTER_ADDR": "127.0.0.1",
    "MASTER_PORT": "29500",
}


def read_idx(path: str | Path) -> np.ndarray:
    """Read an IDX file (``.gz`` too) into a numpy array.

    Layout: magic ``00 00 TT NN`` (TT the data type, 0x08 for uint8; NN the number of dims),
    then NN big-endian uint32 sizes, then the data, big-endian, row-major.
    """
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        raw = f.read()
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in IDX_DTYPES:
        raise ValueError(f"{path}: not an IDX file (bad magic number {raw[:4].hex() or 'empty'})")
    ndim = raw[3]
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise ValueError(f"{path}: truncated IDX header ({ndim} dimensions declared)")
    dims = tuple(int(d) for d in np.frombuffer(raw, dtype=">u4", count=ndim, offset=4))
    dtype = np.dtype(IDX_DTYPES[raw[2]])
    expected = int(np.prod(dims, dtype=np.int64)) * dtype.itemsize
    if len(raw) - header != expected:
        got = len(raw) - header
        raise ValueError(f"{path}: IDX data is {got} bytes but dims {dims} need {expected}")
    data = np.frombuffer(raw, dtype=dtype, offset=header).reshape(dims)
    return data.astype(dtype.newbyteorder("="))  # native byte order, writable copy


def find_mnist(data_dir: str | Path) -> list[Path] | None:
    """The four MNIST IDX files in ``data_dir`` (plain or ``.gz``), or None if any is missing."""
    found = []
    for name in MNIST_FILES:
        candidates = [Path(data_dir) / name, Path(data_dir) / f"{name}.gz"]
        path = next((p for p in candidates if p.is_file()), None)
        if path is None:
            return None
        found.append(path)
    return found


def load_data(data_dir: str | None) -> tuple[str, TensorDataset, TensorDataset]:
    """Return (name, train, test); images are float (N, rows, cols) in [0, 1], labels int64."""
    paths = find_mnist(data_dir) if data_dir else None
    if paths is not None:
        xtr, ytr, xte, yte = (read_idx(p) for p in paths)
        name, scale = "mnist", 255.0
    else:
        from sklearn.datasets import load_digits
        from sklearn.model_selection import train_test_split

        digits = load_digits()
        xtr, xte, ytr, yte = train_test_split(
            digits.images, digits.target, test_size=0.2, random_state=SEED, stratify=digits.target
        )
        name, scale = "digits-8x8", 16.0

    def tensors(x: np.ndarray, y: np.ndarray) -> TensorDataset:
        images = torch.tensor(np.asarray(x, dtype=np.float32) / scale)
        return TensorDataset(images, torch.tensor(np.asarray(y, dtype=np.int64)))

    return name, tensors(xtr, ytr), tensors(xte, yte)


class RowLSTM(nn.Module):
    """Reads an image one row per time step and classifies it from the last hidden state."""

    def __init__(self, width: int, hidden: int, classes: int = 10) -> None:
        super().__init__()
        self.lstm = nn.LSTM(width, hidden, batch_first=True)
        self.head = nn.Linear(hidden, classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        _, (h, _) = self.lstm(images)
        return self.head(h[-1])


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=8, help="per process")
    p.add_argument("--lr", type=float, default=0.03, help="peak; decays to 0 (cosine)")
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--data-dir", default=None, help="directory with MNIST IDX files")
    p.add_argument("--limit-train", type=int, default=None, help="use at most N training samples")
    return p.parse_args()


def setup_distributed() -> tuple[int, int, str, torch.device]:
    """Join the process group torchrun describes; return (rank, world size, backend, device)."""
    for key, value in SINGLE_PROCESS_ENV.items():
        os.environ.setdefault(key, value)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if torch.cuda.is_available():  # CUDA_VISIBLE_DEVICES may show fewer GPUs than local ranks
        backend = "nccl"
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]) % torch.cuda.device_count())
        torch.cuda.set_device(device)
    else:
        backend, device = "gloo", torch.device("cpu")
    dist.init_process_group(backend=backend)
    return rank, world, backend, device


def evaluate(model: nn.Module, data: TensorDataset, device: torch.device) -> float:
    """Accuracy of ``model`` over all of ``data``."""
    model.eval()
    correct = 0
    with torch.no_grad():
        for images, labels in DataLoader(data, batch_size=1024):
            correct += int((model(images.to(device)).argmax(1) == labels.to(device)).sum())
    return correct / len(data)


def main() -> None:
    args = parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(SEED)
    rank, world, backend, device = setup_distributed()

    def log(message: str) -> None:
        if rank == 0:
            print(message, flush=True)

    name, train_set, test_set = load_data(args.data_dir)
    if args.limit_train is not None:
        train_set = TensorDataset(*(t[: args.limit_train] for t in train_set.tensors))
    log(
        f"dataset {name}  train {len(train_set)}  test {len(test_set)}  "
        f"world {world}  backend {backend}  device {device}"
    )

    model = RowLSTM(train_set.tensors[0].shape[2], args.hidden).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    start_epoch = 0
    ckpt_dir = os.environ.get("KIBAN_CHECKPOINT_DIR")
    ckpt_path = Path(ckpt_dir) / "checkpoint.pt" if ckpt_dir else None
    if ckpt_path is not None and ckpt_path.is_file():
        state = torch.load(ckpt_path, map_location=device)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start_epoch = state["epoch"]
        log(f"resumed from epoch {start_epoch}")
    dist.barrier()  # all have loaded before rank 0 can overwrite the checkpoint
    ddp = DistributedDataParallel(model, device_ids=[device.index] if backend == "nccl" else None)

    sampler = DistributedSampler(train_set, num_replicas=world, rank=rank, shuffle=True, seed=SEED)
    loader = DataLoader(train_set, batch_size=args.batch_size, sampler=sampler)
    for epoch in range(start_epoch, args.epochs):
        began = time.perf_counter()
        sampler.set_epoch(epoch)
        ddp.train()
        loss_sum, correct, seen = 0.0, 0, 0
        for step, (images, labels) in enumerate(loader):
            progress = (epoch + step / len(loader)) / args.epochs  # cosine decay, resume-safe
            for group in optimizer.param_groups:
                group["lr"] = args.lr * 0.5 * (1 + math.cos(math.pi * progress))
            images, labels = images.to(device), labels.to(device)
            optimizer.zero_grad(set_to_none=True)
            logits = ddp(images)
            loss = nn.functional.cross_entropy(logits, labels)
            loss.backward()  # DDP averages the gradients over all ranks here
            nn.utils.clip_grad_norm_(ddp.parameters(), 1.0)
            optimizer.step()
            loss_sum += loss.item() * len(labels)
            correct += int((logits.argmax(1) == labels).sum())
            seen += len(labels)
        totals = torch.tensor([loss_sum, correct, seen], dtype=torch.float64, device=device)
        dist.all_reduce(totals)  # epoch metrics over every rank's shard
        loss_avg, acc = (totals[0] / totals[2]).item(), (totals[1] / totals[2]).item()
        log(
            f"epoch {epoch + 1}/{args.epochs}  loss {loss_avg:.4f}  train-acc {acc:.3f}  "
            f"({time.perf_counter() - began:.1f}s)"
        )
        if rank == 0 and ckpt_path is not None:
            ckpt_path.parent.mkdir(parents=True, exist_ok=True)
            tmp = ckpt_path.with_name(ckpt_path.name + ".tmp")
            state = {"model": model.state_dict(), "optimizer": optimizer.state_dict()}
            torch.save({**state, "epoch": epoch + 1}, tmp)
            os.replace(tmp, ckpt_path)  # atomic: a reader never sees a half-written file

    if rank == 0:  # the whole test set on one process: exact, and small
        print(f"test accuracy: {evaluate(model, test_set, device):.4f}", flush=True)
    dist.barrier()  # every rank is done communicating
    if backend == "nccl":
        dist.destroy_process_group()
    else:
        # Tearing down a gloo group while peers on other nodes close their sockets can abort
        # ("terminate called without an active exception", seen once in about ten runs of the demo
        # with torch 2.15); after the barrier nothing is in flight, so leave without it.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


if __name__ == "__main__":
    main()
