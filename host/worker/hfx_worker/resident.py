"""Memory the worker has read and no longer needs, handed back to the system
while the worker lives on.

A model folder's weights are the checkpoint's pages: transformers maps the
safetensors file and its parameters view that map. Pages read once (the
float weights quantization replaces) stay in the worker's resident memory
as long as the map does, which is as long as any weight still views it (the
embedding, the norms). `MADV_PAGEOUT` reclaims such pages: a clean page of
a file is dropped and read again from the file if touched; a page the
process wrote (a private copy) is never discarded, so no value changes."""

import bisect
import ctypes
import functools

# linux/mman-common.h; kernels before 5.4 refuse it (EINVAL), and nothing is reclaimed.
MADV_PAGEOUT = 21
PAGE = 4096


@functools.cache
def madvise():
    try:
        call = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    call.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    return call


def file_mappings():
    """[(start, end)] of this process's mappings of files (not anonymous
    memory, not pseudo-files), from /proc/self/maps, in address order."""
    ranges = []
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                fields = line.split(maxsplit=5)
                if len(fields) < 6 or int(fields[4]) == 0 or not fields[5].startswith("/"):
                    continue
                start, end = (int(a, 16) for a in fields[0].split("-"))
                ranges.append((start, end))
    except OSError:
        return []
    return ranges


def page_out(spans, mappings):
    """Reclaims the pages of each (address, bytes) span that lie in one of
    `mappings` (`file_mappings()`): memory the caller no longer reads."""
    call = madvise()
    if call is None:
        return
    for address, size in spans:
        # The mappings are disjoint and in address order: from the last one
        # starting at or before the span, those it reaches.
        first = max(0, bisect.bisect_right(mappings, (address, float("inf"))) - 1)
        for start, end in mappings[first:]:
            if start >= address + size:
                break
            low, high = max(address, start), min(address + size, end)
            if low < high:
                low -= low % PAGE
                high += -high % PAGE
                call(low, min(high, end) - low, MADV_PAGEOUT)


def storage_span(tensor):
    """The (address, bytes) of the memory `tensor`'s storage holds."""
    storage = tensor.untyped_storage()
    return storage.data_ptr(), storage.nbytes()


def buffer_span(buffer):
    """The (address, bytes) of the memory a buffer (`bytes`, a memoryview) holds."""
    import numpy

    view = memoryview(buffer).cast("B")
    return (numpy.frombuffer(view, numpy.uint8).ctypes.data if view.nbytes else 0), view.nbytes
