//! Weights as slices of memory maps: where a slice lies in its map, and its
//! pages released once it is written (the kernel reads them from the file
//! again if they are touched).

/// Where `bytes` start inside `map`, if they lie there.
pub fn offset_in(map: &[u8], bytes: &[u8]) -> Option<usize> {
    let (start, base) = (bytes.as_ptr() as usize, map.as_ptr() as usize);
    (start >= base && start + bytes.len() <= base + map.len()).then(|| start - base)
}

/// `MADV_DONTNEED` on the whole pages of `bytes` inside `map`, if it lies there.
pub fn release_from(map: &memmap2::Mmap, bytes: &[u8]) {
    const PAGE: usize = 4096;
    let Some(offset) = offset_in(map, bytes) else { return };
    let first = offset.next_multiple_of(PAGE);
    let end = (offset + bytes.len()) / PAGE * PAGE;
    if end > first {
        // SAFETY: a read-only private mapping of a file nobody writes while it
        // is mapped: dropped pages are read from the file again when touched,
        // so every slice of the map keeps its contents.
        let _ = unsafe {
            map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, first, end - first)
        };
    }
}
