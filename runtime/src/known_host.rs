//! Buffers known to be host memory without asking CUDA: the part of the calling thread's stack in
//! use, and the brk heap. Device and managed allocations are mappings CUDA makes in address ranges
//! it reserves, never inside the stack or heap mappings, so a buffer valid there is host memory.
//! Small transfers are mostly from such buffers (HDF5's own, a caller's locals, small NumPy arrays),
//! and for them the `cuPointerGetAttributes` query was the driver's largest cost per callback on a
//! machine where CUDA works (issue 22: small writes through gds 0.95-0.98x sec2).

use std::cell::Cell;
use std::sync::OnceLock;

/// Whether the buffer starting at `ptr` is certainly host memory. False means "ask CUDA".
pub fn certainly_host(ptr: usize) -> bool {
    on_this_stack(ptr) || in_brk_heap(ptr)
}

thread_local! {
    /// This thread's stack as (lowest, top) address; (0, 0) until asked, (1, 1) where unknown.
    static STACK: Cell<(usize, usize)> = const { Cell::new((0, 0)) };
}

/// Whether `ptr` lies between the current frame and the top of this thread's stack: that part of
/// the stack is mapped (it is in use) and belongs to this thread's live frames. Code running on a
/// stack of its own (coroutines, signal stacks) is outside the thread's stack and gets false.
fn on_this_stack(ptr: usize) -> bool {
    let marker = 0u8;
    let here = std::hint::black_box(&marker) as *const u8 as usize;
    let (low, top) = STACK.with(|s| {
        if s.get() == (0, 0) {
            s.set(thread_stack().unwrap_or((1, 1)));
        }
        s.get()
    });
    (low..top).contains(&here) && (here..top).contains(&ptr)
}

/// The calling thread's stack, from glibc (for the main thread it reads the process's mappings,
/// once per thread).
fn thread_stack() -> Option<(usize, usize)> {
    // SAFETY: `attr` is initialised by pthread_getattr_np before it is read and destroyed after;
    // the out-pointers are valid locals.
    unsafe {
        let mut attr: libc::pthread_attr_t = std::mem::zeroed();
        if libc::pthread_getattr_np(libc::pthread_self(), &mut attr) != 0 {
            return None;
        }
        let mut addr: *mut libc::c_void = std::ptr::null_mut();
        let mut size: libc::size_t = 0;
        let got = libc::pthread_attr_getstack(&attr, &mut addr, &mut size);
        libc::pthread_attr_destroy(&mut attr);
        (got == 0 && !addr.is_null()).then(|| (addr as usize, addr as usize + size))
    }
}

/// Whether `ptr` lies in the brk heap, `[start_brk, brk)`: one mapping the kernel grows only
/// where nothing else is mapped.
fn in_brk_heap(ptr: usize) -> bool {
    let Some(start) = start_brk() else {
        return false;
    };
    if ptr < start {
        return false;
    }
    // SAFETY: sbrk(0) changes nothing; it returns the current break.
    let end = unsafe { libc::sbrk(0) } as usize;
    end != usize::MAX && ptr < end
}

/// Where the brk heap starts: field 47 of `/proc/self/stat` (Linux 3.3+), read once.
fn start_brk() -> Option<usize> {
    static START: OnceLock<Option<usize>> = OnceLock::new();
    *START.get_or_init(|| {
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        // The command name (field 2) may hold spaces and parentheses; fields after it follow
        // the last ')'. Field 3 is the first after it, so field 47 is the 45th.
        let rest = &stat[stat.rfind(')')? + 1..];
        rest.split_whitespace()
            .nth(44)?
            .parse::<usize>()
            .ok()
            .filter(|&s| s > 0)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locals_and_the_brk_heap_are_host_and_mappings_elsewhere_are_not() {
        let local = [7u8; 64];
        assert!(certainly_host(local.as_ptr() as usize));
        // Memory the break was just moved over (left to the process: malloc copes with foreign
        // sbrk calls, and giving it back could cut into malloc's own heap).
        // SAFETY: grows the break by one page, which nothing else owns yet.
        let grown = unsafe { libc::sbrk(4096) } as usize;
        assert_ne!(grown, usize::MAX, "sbrk failed");
        assert!(certainly_host(grown));
        assert!(certainly_host(grown + 4095));
        // A fresh anonymous mapping (what CUDA's reservations are) is neither.
        // SAFETY: a new private mapping, unmapped below.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                1 << 20,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(map, libc::MAP_FAILED);
        assert!(!certainly_host(map as usize));
        // SAFETY: the mapping made above.
        unsafe { libc::munmap(map, 1 << 20) };
    }

    #[test]
    fn another_threads_stack_is_not_this_threads() {
        let local = [0u8; 16];
        let addr = local.as_ptr() as usize;
        // Frames of a finished call, and another thread's stack, are not the caller's frames.
        let elsewhere = std::thread::spawn(move || on_this_stack(addr))
            .join()
            .unwrap();
        assert!(!elsewhere);
        assert!(on_this_stack(addr));
        let _ = local;
    }

    #[test]
    fn start_brk_is_read_from_proc() {
        let start = start_brk().expect("start_brk in /proc/self/stat");
        // SAFETY: sbrk(0) changes nothing.
        let end = unsafe { libc::sbrk(0) } as usize;
        assert!(
            start <= end,
            "start_brk {start:#x} above the break {end:#x}"
        );
    }
}
