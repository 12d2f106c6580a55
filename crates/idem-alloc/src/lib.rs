//! idem's global allocator: mimalloc, asked for an alignment only when a type needs one.
//!
//! `mimalloc::MiMalloc` passes every allocation to `mi_malloc_aligned`, even with the
//! 8- or 16-byte alignment that plain `mi_malloc` already guarantees. In mimalloc 3 the
//! aligned entry point takes its fast path only for blocks up to 1 KiB; a larger block of
//! a size that is not a power of two (a boxed future, a read buffer) goes to the generic
//! path and is *over-allocated* by its alignment. callgrind counted ~18 such allocations
//! per fresh intent in idem, ~160 instructions each (its docs/benchmarks.md). This wrapper
//! applies the rule std's own `System` allocator uses: a plain allocation when the
//! alignment is at most the allocator's minimum and at most the size, the aligned entry
//! points otherwise. Frees need no such choice: `mi_free` takes both kinds.
//!
//! It is a crate of its own so that idem itself can keep `unsafe_code = "forbid"`.

use std::alloc::{GlobalAlloc, Layout};
use std::ffi::c_void;

use libmimalloc_sys as ffi;

/// The alignment every `mi_malloc` block has (`MI_MAX_ALIGN_SIZE`, x86-64 and aarch64's
/// `max_align_t`), for blocks at least that large.
const MIN_ALIGN: usize = 16;

/// mimalloc with plain calls for ordinary alignments; see the module docs.
pub struct Allocator;

/// Whether `mi_malloc(size)` already returns memory aligned for `layout`.
#[inline]
fn plain(align: usize, size: usize) -> bool {
    align <= MIN_ALIGN && align <= size
}

/// A new block for `layout` from the plain or the aligned entry point of one family
/// (`mi_malloc`/`mi_malloc_aligned`, or the zeroing `mi_zalloc`/`mi_zalloc_aligned`).
#[inline]
fn new_block(
    layout: Layout,
    plain_entry: unsafe extern "C" fn(usize) -> *mut c_void,
    aligned_entry: unsafe extern "C" fn(usize, usize) -> *mut c_void,
) -> *mut u8 {
    // SAFETY: C allocation calls, valid for any size and power-of-two alignment (which
    // `Layout` guarantees).
    unsafe {
        if plain(layout.align(), layout.size()) {
            plain_entry(layout.size()) as *mut u8
        } else {
            aligned_entry(layout.size(), layout.align()) as *mut u8
        }
    }
}

unsafe impl GlobalAlloc for Allocator {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        new_block(layout, ffi::mi_malloc, ffi::mi_malloc_aligned)
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        new_block(layout, ffi::mi_zalloc, ffi::mi_zalloc_aligned)
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        // SAFETY: `ptr` came from this allocator (GlobalAlloc's contract); `mi_free`
        // accepts blocks from the plain and the aligned entry points alike.
        unsafe { ffi::mi_free(ptr as *mut c_void) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr` came from this allocator; mimalloc reallocates a block from either
        // entry point, and the new block is aligned for `layout.align()` by the same rule.
        unsafe {
            if plain(layout.align(), new_size) {
                ffi::mi_realloc(ptr as *mut c_void, new_size) as *mut u8
            } else {
                ffi::mi_realloc_aligned(ptr as *mut c_void, new_size, layout.align()) as *mut u8
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every size/alignment pair a program meets (tiny, small, past 1 KiB, odd sizes,
    /// over-aligned types like tokio's 128-byte task cells) comes back aligned, and
    /// realloc keeps the contents across the plain/aligned boundary.
    #[test]
    fn blocks_are_aligned_and_reallocs_keep_their_bytes() {
        let sizes = [
            1, 7, 8, 15, 16, 24, 100, 1023, 1024, 1025, 3000, 5000, 70_000,
        ];
        let aligns = [1, 2, 4, 8, 16, 32, 64, 128, 4096];
        for &size in &sizes {
            for &align in &aligns {
                let layout = Layout::from_size_align(size, align).unwrap();
                unsafe {
                    let p = Allocator.alloc(layout);
                    assert!(!p.is_null());
                    assert_eq!(p as usize % align, 0, "alloc {size}/{align}");
                    for i in 0..size {
                        p.add(i).write(i as u8);
                    }
                    let grown = size * 3 + 1;
                    let q = Allocator.realloc(p, layout, grown);
                    assert_eq!(q as usize % align, 0, "realloc {size}->{grown}/{align}");
                    for i in 0..size {
                        assert_eq!(q.add(i).read(), i as u8);
                    }
                    Allocator.dealloc(q, Layout::from_size_align(grown, align).unwrap());

                    let z = Allocator.alloc_zeroed(layout);
                    assert_eq!(z as usize % align, 0, "zeroed {size}/{align}");
                    assert!((0..size).all(|i| z.add(i).read() == 0));
                    Allocator.dealloc(z, layout);
                }
            }
        }
    }
}
