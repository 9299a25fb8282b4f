//! The memory table: every device allocation (plain, managed, or a VMM or pool reservation with
//! its mappings), pinned host allocation and cuFile buffer registration, behind one mutex.
//!
//! Device memory is a memfd mapped twice: the address handed out is a `PROT_NONE` mapping
//! (host code that dereferences it dies of SIGSEGV, as with a real device pointer), and the
//! emulator moves data through a second, read-write "shadow" mapping of the same memfd. A
//! lookup hands out an `Arc` of the allocation, so copies run without the lock and the
//! mappings stay valid until the last copy using them ends, even if the memory is freed
//! meanwhile. Pinned host memory is ordinary anonymous memory, page-aligned. Both kinds are
//! backed when allocated (`MAP_POPULATE`), as on a GPU: no first-touch page faults later.

use crate::consts::{CUresult, CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_OUT_OF_MEMORY};
use crate::counters;
use std::collections::BTreeMap;
use std::ffi::{c_int, c_void};
use std::sync::{Arc, Mutex, MutexGuard};

/// The granularity of VMM mappings and of pool chunks (what `cuMemGetAllocationGranularity`
/// reports on current GPUs: 2 MiB).
pub const GRANULARITY: usize = 2 << 20;

/// What kind of device memory a block is.
#[derive(Debug)]
pub enum Kind {
    /// `cuMemAlloc`: one allocation of the context current when it was made.
    Plain,
    /// `cuMemAllocManaged`: also host-accessible (the address is mapped read-write).
    Managed,
    /// A virtual address reservation (`cuMemAddressReserve`, or the address range of a device's
    /// stream-ordered pool) and the mappings in it, by offset; memory of a device, not a context.
    Reservation {
        mappings: Mutex<BTreeMap<usize, Mapping>>,
    },
}

/// One mapping of physical memory into a reservation (`cuMemMap`).
#[derive(Debug, Clone, Copy)]
pub struct Mapping {
    pub len: usize,
    /// CU_POINTER_ATTRIBUTE_BUFFER_ID of the mapped memory: new for every `cuMemMap`.
    pub id: u64,
    /// `cuMemSetAccess` made it accessible.
    pub accessible: bool,
    pub device: c_int,
}

/// One device allocation.
#[derive(Debug)]
pub struct DeviceBlock {
    /// Plain, managed, or a reservation with mappings.
    pub kind: Kind,
    /// The device address (start of the `PROT_NONE` mapping).
    pub base: usize,
    /// The size asked for; accesses must stay below `base + size`.
    pub size: usize,
    /// The context current when it was allocated.
    pub context: usize,
    /// The device ordinal of that context.
    pub device: c_int,
    /// A process-wide unique id (CU_POINTER_ATTRIBUTE_BUFFER_ID).
    pub id: u64,
    /// Both mappings are this long (size rounded up to pages).
    map_len: usize,
    /// The read-write mapping of the same memory.
    shadow: *mut u8,
}

// SAFETY: the raw pointer is the start of a private mapping owned by this block; the block
// itself is never mutated after creation, and concurrent access to the memory is the callers'
// business as on a real GPU.
unsafe impl Send for DeviceBlock {}
// SAFETY: see Send; all fields are read-only after construction.
unsafe impl Sync for DeviceBlock {}

impl DeviceBlock {
    /// Whether `[addr, addr + len)` lies inside this allocation (`len` may be 0).
    pub fn contains(&self, addr: usize, len: usize) -> bool {
        addr >= self.base
            && addr
                .checked_add(len)
                .is_some_and(|end| end <= self.base + self.size)
            && addr < self.base + self.size
    }

    /// The mappings of a reservation (`None` for other kinds).
    fn mappings(&self) -> Option<MutexGuard<'_, BTreeMap<usize, Mapping>>> {
        match &self.kind {
            Kind::Reservation { mappings, .. } => {
                Some(mappings.lock().unwrap_or_else(|p| p.into_inner()))
            }
            _ => None,
        }
    }

    pub fn is_managed(&self) -> bool {
        matches!(self.kind, Kind::Managed)
    }

    pub fn is_reservation(&self) -> bool {
        matches!(self.kind, Kind::Reservation { .. })
    }

    /// The mapping holding `addr` (start address, length, device); the whole block for memory
    /// that is not a reservation; `None` for an unmapped address of a reservation.
    pub fn mapping_at(&self, addr: usize) -> Option<(usize, usize, c_int)> {
        self.mapping_and_id(addr)
            .map(|(start, len, device, _)| (start, len, device))
    }

    /// The device the memory at `addr` is on (a reservation's mapping's, else the block's).
    pub fn owner_device(&self, addr: usize) -> c_int {
        self.mapping_at(addr)
            .map_or(self.device, |(_, _, device)| device)
    }

    /// `mapping_at`, and the buffer id of the memory there.
    pub fn mapping_and_id(&self, addr: usize) -> Option<(usize, usize, c_int, u64)> {
        let Some(mappings) = self.mappings() else {
            return self
                .contains(addr, 0)
                .then_some((self.base, self.size, self.device, self.id));
        };
        let offset = addr.checked_sub(self.base)?;
        let (&start, m) = mappings.range(..=offset).next_back()?;
        (offset < start + m.len).then_some((self.base + start, m.len, m.device, m.id))
    }

    /// Whether `[addr, addr + len)` is usable memory: inside the block and, for a reservation,
    /// mapped and made accessible all through (adjacent mappings together).
    pub fn usable(&self, addr: usize, len: usize) -> bool {
        if !self.contains(addr, len) {
            return false;
        }
        let Some(mappings) = self.mappings() else {
            return true;
        };
        let (mut at, end) = (addr - self.base, addr - self.base + len.max(1));
        while at < end {
            match mappings.range(..=at).next_back() {
                Some((&start, m)) if at < start + m.len && m.accessible => at = start + m.len,
                _ => return false,
            }
        }
        true
    }

    /// Whether `[addr, addr + len)` lies in one mapping (for memory that is not a reservation:
    /// in the block).
    pub fn in_one_mapping(&self, addr: usize, len: usize) -> bool {
        self.mapping_at(addr)
            .is_some_and(|(start, size, _)| addr + len <= start + size)
    }

    /// Adds a mapping of `len` bytes at `offset` of a reservation; false if it is no
    /// reservation, or the range leaves it or overlaps a mapping.
    pub fn map(&self, offset: usize, len: usize, device: c_int) -> bool {
        let Some(mut mappings) = self.mappings() else {
            return false;
        };
        let end = offset + len;
        let overlaps = mappings
            .range(..end)
            .next_back()
            .is_some_and(|(&start, m)| start + m.len > offset);
        if len == 0 || end > self.size || overlaps {
            return false;
        }
        static NEXT_MAPPING_ID: std::sync::atomic::AtomicU64 =
            std::sync::atomic::AtomicU64::new(1 << 32);
        let id = NEXT_MAPPING_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let accessible = false;
        mappings.insert(
            offset,
            Mapping {
                len,
                id,
                accessible,
                device,
            },
        );
        true
    }

    /// Removes the mappings that start in `[offset, offset + len)`; false if there was none.
    pub fn unmap(&self, offset: usize, len: usize) -> bool {
        let Some(mut mappings) = self.mappings() else {
            return false;
        };
        let starts: Vec<usize> = mappings
            .range(offset..offset + len)
            .map(|(&s, _)| s)
            .collect();
        for start in &starts {
            mappings.remove(start);
        }
        !starts.is_empty()
    }

    /// Makes the mappings that overlap `[offset, offset + len)` accessible; false if none.
    pub fn set_access(&self, offset: usize, len: usize) -> bool {
        let Some(mut mappings) = self.mappings() else {
            return false;
        };
        let mut any = false;
        for (&start, m) in mappings.iter_mut() {
            if start < offset + len && start + m.len > offset {
                m.accessible = true;
                any = true;
            }
        }
        any
    }

    /// The shadow (host-accessible) address of device address `addr`, which must lie inside.
    pub fn shadow_of(&self, addr: usize) -> *mut u8 {
        debug_assert!(self.contains(addr, 0));
        self.shadow.wrapping_add(addr - self.base)
    }
}

impl Drop for DeviceBlock {
    fn drop(&mut self) {
        // SAFETY: both mappings were created by `map_device` with length map_len and are
        // unmapped only here, once.
        unsafe {
            libc::munmap(self.base as *mut c_void, self.map_len);
            libc::munmap(self.shadow.cast(), self.map_len);
        }
    }
}

/// One pinned host allocation (the mapping is unmapped by `free_host`).
#[derive(Debug, Clone)]
pub struct HostBlock {
    pub base: usize,
    pub size: usize,
    pub context: usize,
    pub device: c_int,
    /// Allocated CU_MEMHOSTALLOC_PORTABLE: pinned for every context, not only `context`.
    pub portable: bool,
    pub id: u64,
    map_len: usize,
}

impl HostBlock {
    fn contains(&self, addr: usize) -> bool {
        addr >= self.base && addr < self.base + self.size
    }
}

/// What an address is, as far as the emulator knows.
#[derive(Debug, Clone)]
pub enum Region {
    Device(Arc<DeviceBlock>),
    PinnedHost(HostBlock),
    Unknown,
}

struct Tables {
    device: BTreeMap<usize, Arc<DeviceBlock>>,
    host: BTreeMap<usize, HostBlock>,
    /// cuFileBufRegister'ed ranges: base -> length.
    registered: BTreeMap<usize, usize>,
    next_id: u64,
}

static TABLES: Mutex<Tables> = Mutex::new(Tables {
    device: BTreeMap::new(),
    host: BTreeMap::new(),
    registered: BTreeMap::new(),
    next_id: 1,
});

/// The table, even if a thread panicked while holding it (the table stays consistent: every
/// update is a single insert or remove).
fn tables() -> MutexGuard<'static, Tables> {
    TABLES
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn page_size() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if page > 0 {
        page as usize
    } else {
        4096
    }
}

fn round_to_pages(size: usize) -> Option<usize> {
    let page = page_size();
    Some(size.checked_add(page - 1)? / page * page)
}

/// Maps `map_len` bytes of a fresh memfd twice; returns (device address, shadow address). The
/// device address is `PROT_NONE` unless `host_access` (managed memory); reservations are not
/// populated up front (`populate` false): only their mapped parts are ever touched.
fn map_device(
    map_len: usize,
    host_access: bool,
    populate: bool,
) -> Result<(usize, *mut u8), CUresult> {
    // SAFETY: the name is a valid C string; memfd_create has no other preconditions.
    let fd = unsafe { libc::memfd_create(c"h5gds-emu-device".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(CUDA_ERROR_OUT_OF_MEMORY);
    }
    let result = (|| {
        let len = libc::off_t::try_from(map_len).map_err(|_| CUDA_ERROR_OUT_OF_MEMORY)?;
        // SAFETY: fd is the memfd just created.
        if unsafe { libc::ftruncate(fd, len) } != 0 {
            return Err(CUDA_ERROR_OUT_OF_MEMORY);
        }
        let device_prot = if host_access {
            libc::PROT_READ | libc::PROT_WRITE
        } else {
            libc::PROT_NONE
        };
        // SAFETY: a new shared mapping of our memfd at an address the kernel picks.
        let device = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                device_prot,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if device == libc::MAP_FAILED {
            return Err(CUDA_ERROR_OUT_OF_MEMORY);
        }
        // SAFETY: as above, read-write this time. MAP_POPULATE backs every page now, as
        // cuMemAlloc does on a GPU (only managed memory is demand-paged there), so the first
        // transfer into fresh memory pays no page faults a GPU would not.
        let shadow = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | if populate { libc::MAP_POPULATE } else { 0 },
                fd,
                0,
            )
        };
        if shadow == libc::MAP_FAILED {
            // SAFETY: unmapping the mapping created just above.
            unsafe { libc::munmap(device, map_len) };
            return Err(CUDA_ERROR_OUT_OF_MEMORY);
        }
        Ok((device as usize, shadow.cast::<u8>()))
    })();
    // SAFETY: the mappings keep the memory alive; the descriptor is no longer needed.
    unsafe { libc::close(fd) };
    result
}

/// Allocates `size` bytes of device memory for `context` on `device`, filled with `poison`
/// (zeros if `None`). Returns the device address.
pub fn alloc_device(
    size: usize,
    context: usize,
    device: c_int,
    poison: Option<u8>,
) -> Result<usize, CUresult> {
    alloc_block(size, context, device, poison, Kind::Plain)
}

/// Allocates a device block of `kind`; reservations (context 0) are neither poisoned nor
/// counted as allocations (pool allocations in them are, by `cuda_vmm`).
pub fn alloc_block(
    size: usize,
    context: usize,
    device: c_int,
    poison: Option<u8>,
    kind: Kind,
) -> Result<usize, CUresult> {
    if size == 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let map_len = round_to_pages(size).ok_or(CUDA_ERROR_OUT_OF_MEMORY)?;
    let reservation = matches!(kind, Kind::Reservation { .. });
    let managed = matches!(kind, Kind::Managed);
    let (base, shadow) = map_device(map_len, managed, !reservation)?;
    let poison = poison.filter(|_| !reservation);
    if let Some(byte) = poison {
        // SAFETY: the shadow mapping is map_len >= size bytes, read-write, and ours alone.
        unsafe { std::ptr::write_bytes(shadow, byte, size) };
    }
    let mut tables = tables();
    let id = tables.next_id;
    tables.next_id += 1;
    let block = DeviceBlock {
        kind,
        base,
        size,
        context,
        device,
        id,
        map_len,
        shadow,
    };
    tables.device.insert(base, Arc::new(block));
    if !reservation {
        counters::bump(&counters::LIVE_DEVICE_ALLOCATIONS);
        counters::LIVE_DEVICE_BYTES.fetch_add(size as u64, std::sync::atomic::Ordering::Relaxed);
    }
    Ok(base)
}

/// Frees the device allocation starting at `base`. Anything else (an unknown pointer, an
/// interior pointer, a second free) is CUDA_ERROR_INVALID_VALUE and counts as a double free.
pub fn free_device(base: usize) -> Result<(), CUresult> {
    free_block(base, false)
}

/// Frees the block at `base`: a reservation only if `reservation` (`cuMemAddressFree`), any
/// other kind only if not (`cuMemFree`).
pub fn free_block(base: usize, reservation: bool) -> Result<(), CUresult> {
    let mut tables = tables();
    let matches = |b: &Arc<DeviceBlock>| b.is_reservation() == reservation;
    let Some(block) = tables.device.get(&base).filter(|b| matches(b)).cloned() else {
        counters::bump(&counters::DOUBLE_FREES);
        return Err(CUDA_ERROR_INVALID_VALUE);
    };
    tables.device.remove(&base);
    let end = block.base + block.size;
    let stale: Vec<usize> = tables
        .registered
        .range(block.base..end)
        .map(|(&start, _)| start)
        .collect();
    for start in stale {
        tables.registered.remove(&start);
    }
    drop(tables);
    if !reservation {
        counters::drop_by(&counters::LIVE_DEVICE_ALLOCATIONS, 1);
        counters::drop_by(&counters::LIVE_DEVICE_BYTES, block.size as u64);
    }
    // The mappings go away when the last Arc (possibly held by a copy in flight) is dropped.
    drop(block);
    Ok(())
}

/// Allocates `size` bytes of page-aligned pinned host memory, filled with `poison`.
pub fn alloc_host(
    size: usize,
    context: usize,
    device: c_int,
    portable: bool,
    poison: Option<u8>,
) -> Result<usize, CUresult> {
    if size == 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let map_len = round_to_pages(size).ok_or(CUDA_ERROR_OUT_OF_MEMORY)?;
    // SAFETY: a new private anonymous mapping at an address the kernel picks. Populated now:
    // cuMemHostAlloc returns page-locked memory, which is resident from the start.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            map_len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
            -1,
            0,
        )
    };
    if ptr == libc::MAP_FAILED {
        return Err(CUDA_ERROR_OUT_OF_MEMORY);
    }
    if let Some(byte) = poison {
        // SAFETY: the mapping is map_len >= size bytes, read-write, and ours alone.
        unsafe { std::ptr::write_bytes(ptr.cast::<u8>(), byte, size) };
    }
    let base = ptr as usize;
    let mut tables = tables();
    let id = tables.next_id;
    tables.next_id += 1;
    tables.host.insert(
        base,
        HostBlock {
            base,
            size,
            context,
            device,
            portable,
            id,
            map_len,
        },
    );
    counters::bump(&counters::LIVE_PINNED_HOST_ALLOCATIONS);
    counters::PINNED_HOST_BYTES.fetch_add(size as u64, std::sync::atomic::Ordering::Relaxed);
    Ok(base)
}

/// Frees the pinned host allocation starting at `base`; anything else is
/// CUDA_ERROR_INVALID_VALUE and counts as a double free.
pub fn free_host(base: usize) -> Result<(), CUresult> {
    let Some(block) = tables().host.remove(&base) else {
        counters::bump(&counters::DOUBLE_FREES);
        return Err(CUDA_ERROR_INVALID_VALUE);
    };
    counters::drop_by(&counters::LIVE_PINNED_HOST_ALLOCATIONS, 1);
    // SAFETY: the mapping was created by alloc_host with this length and was just removed
    // from the table, so it is unmapped once. Host code still using it is the caller's bug,
    // as with the real cuMemFreeHost.
    unsafe { libc::munmap(block.base as *mut c_void, block.map_len) };
    Ok(())
}

/// What `addr` points into.
pub fn find(addr: usize) -> Region {
    let tables = tables();
    if let Some((_, block)) = tables.device.range(..=addr).next_back() {
        if block.contains(addr, 0) {
            return Region::Device(Arc::clone(block));
        }
    }
    if let Some((_, block)) = tables.host.range(..=addr).next_back() {
        if block.contains(addr) {
            return Region::PinnedHost(block.clone());
        }
    }
    Region::Unknown
}

/// The device allocation holding all of `[addr, addr + len)`, if any (in a reservation: mapped
/// and accessible all through).
pub fn device_range(addr: usize, len: usize) -> Option<Arc<DeviceBlock>> {
    match find(addr) {
        Region::Device(block) if block.usable(addr, len) => Some(block),
        _ => None,
    }
}

/// Whether `[addr, addr + len)` overlaps any device allocation.
pub fn overlaps_device(addr: usize, len: usize) -> bool {
    let end = addr.saturating_add(len.max(1));
    let tables = tables();
    tables
        .device
        .range(..end)
        .next_back()
        .is_some_and(|(_, block)| block.base + block.size > addr)
}

/// Records a cuFileBufRegister of `[base, base + len)`; false if `base` is registered already.
pub fn register_buffer(base: usize, len: usize) -> bool {
    let mut tables = tables();
    if tables.registered.contains_key(&base) {
        return false;
    }
    tables.registered.insert(base, len);
    true
}

/// Forgets the registration starting at `base`; false if there was none.
pub fn deregister_buffer(base: usize) -> bool {
    tables().registered.remove(&base).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_memory_is_tracked_bounds_checked_and_freed_once() {
        let base = alloc_device(10_000, 0, 0, Some(0x5A)).unwrap();
        let block = device_range(base, 10_000).expect("whole block is inside");
        assert!(device_range(base + 9_999, 1).is_some());
        assert!(device_range(base + 1, 10_000).is_none());
        assert!(device_range(base + 10_000, 0).is_none());
        assert!(overlaps_device(base + 9_000, 5_000));
        assert!(overlaps_device(base.saturating_sub(10), 11));
        assert!(!overlaps_device(base.saturating_sub(10), 10));
        // SAFETY: the shadow of an interior address of a live block is readable.
        let byte = unsafe { *block.shadow_of(base + 5) };
        assert_eq!(byte, 0x5A);
        assert!(matches!(find(base + 123), Region::Device(_)));
        drop(block);
        assert_eq!(free_device(base), Ok(()));
        assert_eq!(free_device(base), Err(CUDA_ERROR_INVALID_VALUE));
        assert!(matches!(
            find(base),
            Region::Unknown | Region::PinnedHost(_)
        ));
    }

    #[test]
    fn pinned_host_memory_is_writable_and_freed_once() {
        let base = alloc_host(100, 0, 0, false, None).unwrap();
        assert_eq!(base % page_size(), 0);
        // SAFETY: 100 bytes of read-write pinned memory start at base.
        unsafe { std::ptr::write_bytes(base as *mut u8, 7, 100) };
        assert!(matches!(find(base + 99), Region::PinnedHost(_)));
        assert_eq!(free_host(base), Ok(()));
        assert_eq!(free_host(base), Err(CUDA_ERROR_INVALID_VALUE));
    }

    #[test]
    fn zero_sized_allocations_are_invalid() {
        assert_eq!(alloc_device(0, 0, 0, None), Err(CUDA_ERROR_INVALID_VALUE));
        assert_eq!(
            alloc_host(0, 0, 0, false, None),
            Err(CUDA_ERROR_INVALID_VALUE)
        );
    }
}
