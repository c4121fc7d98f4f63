"""The values of a recording's small device tensors, kept on the host: what the GPU would have
computed, where the host can compute it, so that a script reads back what it read on the GPU.

The virtual GPU runs no kernel: device memory has nothing behind it, and a value read back
(`.item()`, `bool(t)`, `.tolist()`, `.cpu()`) reads zeros. Libraries branch on such reads:
Hugging Face checks `position_ids` for packed sequences and an attention mask for padding, and
on zeros builds a mask the GPU run never built (another attention path, other allocations).

So the script's own calls to torch are followed on the host (a TorchFunctionMode: the calls as
the script makes them, before PyTorch's dispatcher; what a library function does inside is
one call): for a device tensor of a storage of at most `LARGEST_BYTES` whose every input is
known, the same call runs on CPU copies and its result is kept as the storage's host copy. A
read of a known tensor answers from the copy (it is not a device read: not counted). Anything
not followed (a larger storage, an input not known, random numbers, `empty`, a call that fails
on the CPU) forgets the storage's copy, and reading it reads zeros as before.

The calls themselves run unchanged. (A TorchDispatchMode, below autograd, would see every
operation, but PyTorch's composite operations take other paths while one is active: `linear`
adds its bias out of place, one more allocation each time.) Backward passes are PyTorch's own
calls, never the script's: not followed.

Only the standard library and torch: this runs in the user's interpreter.
"""

from __future__ import annotations

import itertools
from typing import Any

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten, tree_map

LARGEST_BYTES = 256 * 1024  # masks and position ids of a batch: 8 x 1024 int64 is 64 KiB
KEPT_BYTES_LIMIT = 256 * 1024 * 1024  # the host copies together, past which none is added
_T = torch.Tensor
# Reads of device values: answered from the host copy when it is known.
_READS = {_T.item, _T.tolist, _T.__bool__, _T.__int__, _T.__float__, _T.__index__, _T.cpu,
          torch.equal, torch.allclose}  # fmt: skip
# Calls whose values are not determined by their arguments (random ones are found by the
# device's generator moving: _draws).
_UNDETERMINED = {torch.empty, torch.empty_like, torch.empty_strided, _T.new_empty}


class _Unknown(Exception):
    """A value is not known on the host."""


def _on_device(value: object) -> bool:
    return isinstance(value, torch.Tensor) and value.is_cuda


def _followed(tensor: torch.Tensor) -> bool:
    """A device tensor whose values can be kept on the host: a plain dense one (a parameter
    is one); another kind (sparse, quantized, a subclass) is never known."""
    return (
        type(tensor) in (torch.Tensor, torch.nn.Parameter)
        and tensor.layout == torch.strided
        and not tensor.is_quantized
    )


def _on_host(value: object) -> object:
    """A device, or a device's name, in a call's arguments: the CPU."""
    if isinstance(value, torch.device) and value.type == "cuda":
        return torch.device("cpu")
    if isinstance(value, str) and value.split(":")[0] == "cuda":
        return "cpu"
    return value


def _to_host(args: tuple, kwargs: dict) -> bool:
    """Whether `Tensor.to(...)` copies a device tensor to the CPU (a read)."""
    if not args or not _on_device(args[0]):
        return False
    options = {key: value for key, value in kwargs.items() if key != "copy"}  # not parsed
    try:
        device = torch._C._nn._parse_to(*args[1:], **options)[0]
    except Exception:  # arguments `to` itself will refuse: not a read
        return False
    return device is not None and device.type == "cpu"


def _draws() -> tuple[int, ...]:
    """Where each device's random number generator stands: it moves when a call draws."""
    if not torch.cuda.is_initialized():
        return ()
    return tuple(generator.get_offset() for generator in torch.cuda.default_generators)


def _moved(before: tuple[int, ...], after: tuple[int, ...]) -> bool:
    """Whether a generator moved; one that did not exist yet stood at 0 (the device is made on
    the first call that needs it)."""
    return any(b != a for b, a in itertools.zip_longest(before, after, fillvalue=0))


class HostValues(TorchFunctionMode):
    """Host copies of small device storages, kept by following the script's torch calls."""

    def __init__(self) -> None:
        super().__init__()
        # storage address -> (a weak reference to the storage, its bytes on the host)
        self._copies: dict[int, tuple[StorageWeakRef, torch.Tensor]] = {}
        self._kept_bytes = 0

    # --- host copies ---

    def _host_view(self, tensor: torch.Tensor) -> torch.Tensor | None:
        """The tensor's value on the host (a view of its storage's copy), or None: unknown."""
        if tensor.numel() == 0:
            return torch.empty(tensor.shape, dtype=tensor.dtype)
        storage = tensor.untyped_storage()
        entry = self._copies.get(storage.data_ptr())
        if entry is None or entry[0].expired() or entry[1].numel() != storage.nbytes():
            return None
        return torch.empty(0, dtype=tensor.dtype).set_(
            entry[1].untyped_storage(), tensor.storage_offset(), tensor.shape, tensor.stride()
        )

    def _known(self, tensor: torch.Tensor) -> torch.Tensor:
        found = self._host_view(tensor) if _followed(tensor) else None
        if found is None:
            raise _Unknown
        return found

    def _keep(self, tensor: torch.Tensor) -> torch.Tensor | None:
        """A host view the tensor's value can be written into (a new copy starts as zeros, what
        the stand-in's memory reads), or None when its storage is not followed."""
        if not _followed(tensor):
            return None
        found = self._host_view(tensor)
        if found is not None:
            return found
        storage = tensor.untyped_storage()
        nbytes = storage.nbytes()
        if nbytes > LARGEST_BYTES or not self._room_for(nbytes):
            self._forget(tensor)
            return None
        copy = torch.zeros(nbytes, dtype=torch.uint8)
        self._copies[storage.data_ptr()] = (StorageWeakRef(storage), copy)
        self._kept_bytes += nbytes
        return self._host_view(tensor)

    def _room_for(self, nbytes: int) -> bool:
        if self._kept_bytes + nbytes <= KEPT_BYTES_LIMIT:
            return True
        for address, (storage, copy) in list(self._copies.items()):  # storages freed since
            if storage.expired():
                del self._copies[address]
                self._kept_bytes -= copy.numel()
        return self._kept_bytes + nbytes <= KEPT_BYTES_LIMIT

    def _forget(self, tensor: torch.Tensor) -> None:
        if not _followed(tensor) or tensor.numel() == 0:
            return
        entry = self._copies.pop(tensor.untyped_storage().data_ptr(), None)
        if entry is not None:
            self._kept_bytes -= entry[1].numel()

    # --- the script's calls ---

    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        kwargs = kwargs or {}
        if torch.compiler.is_compiling():  # torch.compile tracing: its graph holds the calls only
            return func(*args, **kwargs)
        try:
            if func in _READS or (func is _T.to and _to_host(args, kwargs)):
                return self._on_host(func, args, kwargs)
        except Exception:  # not known: the device is read (zeros, counted)
            pass
        try:
            device_in = [t for t in tree_flatten((args, kwargs))[0] if _on_device(t)]
            draws = _draws()
        except Exception:
            return self._unfollowed(func(*args, **kwargs))
        out = func(*args, **kwargs)  # the call itself, as the script made it
        try:
            self._after(func, args, kwargs, out, device_in, draws)
        except Exception:
            return self._unfollowed(out)
        return out

    def _unfollowed(self, out: object) -> object:
        """Hipmem's own following failed: nothing is known any more (reads read zeros, as with
        no following), and the script goes on as if nothing was followed."""
        self._copies.clear()
        self._kept_bytes = 0
        return out

    def _after(
        self, func: Any, args: tuple, kwargs: dict, out: object, device_in: list, draws: tuple
    ) -> None:
        written = self._written(func, device_in, out)
        if not written:
            return
        try:
            if _moved(draws, _draws()):  # random numbers drawn on the device: unknown
                raise _Unknown
            self._follow(func, args, kwargs, out, written)
        except Exception:  # not followed: what it wrote is unknown
            for tensor in written:
                self._forget(tensor)

    def _written(self, func: Any, device_in: list[torch.Tensor], out: object) -> list[torch.Tensor]:
        """The device tensors a call may have written: its device outputs, and its device
        arguments when it changes them in place (`add_`, `__setitem__`, `__iadd__`)."""
        outputs = [t for t in tree_flatten(out)[0] if _on_device(t)]
        name = getattr(func, "__name__", "")
        in_place = (name.endswith("_") and not name.startswith("__")) or name in (
            "__setitem__", "__iadd__", "__isub__", "__imul__", "__itruediv__", "__ior__",
            "__iand__", "__ixor__",
        )  # fmt: skip
        # which of its device arguments an in-place call changes is not known here (a foreach
        # call changes a list): all of them are followed or forgotten
        mutated = device_in if in_place else []
        return mutated + [t for t in outputs if not any(t is m for m in mutated)]

    def _on_host(self, func: Any, args: tuple, kwargs: dict) -> Any:
        """The call run on the host copies of its device arguments (raises _Unknown)."""

        def host(value: object) -> object:
            return self._known(value) if _on_device(value) else _on_host(value)

        host_args, host_kwargs = tree_map(host, (args, kwargs))
        with torch._C.DisableTorchFunction():  # no other mode: a factory makes CPU tensors
            if func is _T.cuda:
                return host_args[0].clone()
            return func(*host_args, **host_kwargs)

    def _follow(
        self, func: Any, args: tuple, kwargs: dict, out: object, written: list[torch.Tensor]
    ) -> None:
        """Run the call on the host copies and keep what it wrote."""
        if func in _UNDETERMINED or any(
            t.untyped_storage().nbytes() > LARGEST_BYTES for t in written
        ):
            raise _Unknown
        if func in (_T.__setitem__, _T.copy_, _T.fill_, _T.zero_) and _on_device(args[0]):
            self._keep(args[0])  # the elements it writes need no old value
        result = self._on_host(func, args, kwargs)  # what it changes in place changes in copies
        outputs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        results = [t for t in tree_flatten(result)[0] if isinstance(t, torch.Tensor)]
        if len(outputs) != len(results):
            raise _Unknown
        for device_tensor, host_tensor in zip(outputs, results, strict=True):
            if not _on_device(device_tensor) or device_tensor.numel() == 0:
                continue
            view = self._keep(device_tensor)
            if view is None or view.shape != host_tensor.shape:
                raise _Unknown
            if view.data_ptr() != host_tensor.data_ptr():
                view.copy_(host_tensor)


def start() -> HostValues:
    """Follow the script's calls from here on, for the rest of the process."""
    mode = HostValues()
    mode.__enter__()
    return mode
