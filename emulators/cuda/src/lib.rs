//! A CPU-backed emulator of the CUDA driver API and cuFile, for tests only (never shipped).
//!
//! Built as `target/<profile>/libh5gds_emu.so`. Tests put a directory with the symlinks
//! `libcuda.so.1`, `libcuda.so`, `libcufile.so.0` and `libcufile.so` pointing at it first on
//! `LD_LIBRARY_PATH` (see `tests/support/emulator.rs`), so that code which dlopens the real
//! libraries (cudarc, the cufile-sys loader) gets the emulator; both names resolve to one
//! loaded copy, so cuFile sees the CUDA allocations.
//!
//! # What it exports
//!
//! Exactly these functions, with the C signatures of CUDA 12 and cuFile 1.20, and nothing else
//! of CUDA or cuFile, so an unexpected call fails loudly (missing symbol):
//!
//! * CUDA: `cuInit`, `cuDriverGetVersion`, `cuDeviceGetCount`, `cuDeviceGet`,
//!   `cuDeviceGetName`, `cuDevicePrimaryCtxRetain`, `cuDevicePrimaryCtxRelease_v2`,
//!   `cuCtxSetCurrent`, `cuCtxGetCurrent`, `cuCtxPushCurrent_v2`, `cuCtxPopCurrent_v2`,
//!   `cuCtxSynchronize`, `cuMemAlloc_v2`, `cuMemFree_v2`,
//!   `cuMemHostAlloc`, `cuMemFreeHost`, `cuMemcpyHtoD_v2`, `cuMemcpyDtoH_v2`,
//!   `cuMemcpyDtoD_v2`, `cuMemcpy`, `cuMemcpyHtoDAsync_v2`, `cuMemcpyDtoHAsync_v2`,
//!   `cuMemcpyDtoDAsync_v2`, `cuMemcpy2DAsync_v2`, `cuMemcpy3DAsync_v2` (linear memory only:
//!   host, device or unified ends, no CUDA arrays),
//!   `cuMemsetD8_v2`, `cuPointerGetAttribute`, `cuPointerGetAttributes`,
//!   `cuMemGetAddressRange_v2`, `cuStreamCreate`, `cuStreamDestroy_v2`, `cuStreamSynchronize`,
//!   `cuGetErrorString`, `cuGetErrorName`; and, for cudarc's safe API (`CudaContext`,
//!   `CudaStream`, `CudaSlice`, pinned host slices): `cuDeviceGetAttribute`,
//!   `cuMemsetD8Async`, `cuEventCreate`, `cuEventDestroy_v2`, `cuEventRecord`,
//!   `cuEventQuery`, `cuEventSynchronize`, `cuStreamWaitEvent`; for VMM, pool and managed memory
//!   (`cuda_vmm`): `cuMemAddressReserve`, `cuMemAddressFree`, `cuMemCreate`, `cuMemRelease`,
//!   `cuMemMap`, `cuMemUnmap`, `cuMemSetAccess`, `cuMemAllocAsync`, `cuMemFreeAsync`,
//!   `cuMemAllocManaged`.
//! * cuFile: `cuFileDriverOpen`, `cuFileDriverClose`, `cuFileDriverClose_v2`,
//!   `cuFileDriverGetProperties`, `cuFileGetVersion`, `cuFileSetParameterString`,
//!   `cuFileGetParameterString`, `cuFileGetParameterBool`, `cuFileHandleRegister`,
//!   `cuFileHandleDeregister`, `cuFileBufRegister`, `cuFileBufDeregister`, `cuFileRead`,
//!   `cuFileWrite`.
//! * Not CUDA: `int h5gds_emu_counters(struct h5gds_emu_counters *out)` fills nine `uint64_t`:
//!   live device allocations, their bytes, live pinned host allocations, double frees, bounds
//!   violations, cuFile reads, cuFile writes, host-to-device copies, device-to-host copies
//!   (returns 0, or -1 for a null `out`; works before `cuInit`).
//! * Not CUDA: `int h5gds_emu_report_counter(const char *name, uint64_t *out)` puts the value
//!   the exit report's line `name` (below, without the colon) would show now into `*out`, so a
//!   program can watch any counter while it runs, e.g. "cufile driver opens completed" (returns
//!   0, or -1 for a null argument or an unknown name; works before `cuInit` and in a fork).
//! * Not CUDA: `uint8_t *h5gds_emu_device_shadow(CUdeviceptr addr, size_t len)`, the
//!   host-accessible view of device bytes for the nvCOMP emulator (`emulators/nvcomp`),
//!   which plays code running on the device (NULL and a bounds violation outside an allocation).
//! * Not CUDA: `int h5gds_emu_enqueue(CUstream stream, void (*run)(void *), void *data)`, the
//!   nvCOMP emulator's kernel launch: `run(data)` runs as work on `stream` does, at once or,
//!   with `H5GDS_EMU_DEFER_ASYNC=1`, when the stream is synchronized.
//!
//! # How it behaves
//!
//! * Before a successful `cuInit`, every CUDA function except `cuInit`,
//!   `cuDriverGetVersion`, `cuGetErrorString` and `cuGetErrorName` returns
//!   CUDA_ERROR_NOT_INITIALIZED (3). Allocation, free, copy, memset and stream calls also need
//!   a current context on the calling thread (`cuDevicePrimaryCtxRetain` + `cuCtxSetCurrent`),
//!   else CUDA_ERROR_INVALID_CONTEXT (201), as with the real driver.
//! * Device memory is a memfd mapped twice: the `CUdeviceptr` is a `PROT_NONE` mapping (host
//!   code dereferencing it dies of SIGSEGV), and the emulator copies through a read-write
//!   shadow mapping. New device and pinned host memory is filled with a poison byte (0xA5),
//!   since real device memory starts out as garbage. Copies, memsets and cuFile transfers must
//!   lie inside one allocation (interior pointers are fine), else CUDA_ERROR_INVALID_VALUE (1)
//!   / `-CU_FILE_INVALID_VALUE` and one more bounds violation; passing device memory where
//!   host memory is expected counts too. Freeing an unknown, interior or already freed pointer
//!   is CUDA_ERROR_INVALID_VALUE and counts as a double free.
//! * All copies are synchronous (the `Async` ones too, unless `H5GDS_EMU_DEFER_ASYNC=1`: then
//!   an async copy between device and pinned host memory, or between two places in device
//!   memory, on a non-default stream, and work the nvCOMP emulator launches, run when
//!   that stream or the context is synchronized, the stream destroyed, or memory freed, which
//!   exposes a buffer reused or read before its copy finished; and what the real driver may
//!   leave running on the legacy default stream when a call returns, as NVIDIA's "API
//!   synchronization behavior" page of the Driver API allows (memsets of device memory, copies
//!   from pageable memory to the device, whose bytes are taken at the call, and device-to-device
//!   copies), runs when something synchronizes with the legacy stream: a stream or context
//!   synchronization of it, a synchronous copy to the host or from pinned memory (which waits
//!   for the stream's earlier work), or a free. cuFile transfers and other streams do not wait
//!   for it, so a missing synchronization shows as stale bytes); streams and events are tracked
//!   handles: every event is complete as soon as it is recorded and waits return at once
//!   (unless `H5GDS_EMU_LINK_GBPS` models the link's time: then both follow the modelled
//!   copies, see `timeline`), and an unknown or destroyed stream or event is
//!   CUDA_ERROR_INVALID_HANDLE (400).
//! * `cuDeviceGetAttribute` answers the attributes an emulated device can answer honestly:
//!   unified addressing and host mapping 1, compute capability 8.0, memory pools as
//!   `H5GDS_EMU_POOLS` (0 by default, so cudarc uses `cuMemAlloc_v2`), managed memory 1
//!   (concurrent managed access 0), GPUDirect RDMA as `H5GDS_EMU_GDS`; any other attribute fails with CUDA_ERROR_NOT_SUPPORTED (801), a
//!   negative or zero one with CUDA_ERROR_INVALID_VALUE.
//! * Pointer queries answer as the driver does with unified addressing (see `cuda_pointer`),
//!   VMM, pool and managed memory included (see `cuda_vmm`).
//! * Several devices (`H5GDS_EMU_DEVICES` > 1): streams and memory belong to the context (or,
//!   for VMM and pool memory, the device) they were made in. A copy, memset or stream call on
//!   another context's memory or stream succeeds, as the CUDA documentation says copies do, and
//!   counts as a cross-context use; `cuFileRead`/`cuFileWrite` on device memory of another
//!   context than the current one fail with CU_FILE_CUDA_CONTEXT_MISMATCH (see `context` and
//!   `cufile_api`). Pinned memory is pinned only for its own context unless allocated
//!   CU_MEMHOSTALLOC_PORTABLE; elsewhere its async copies run synchronously and count.
//! * cuFile: see `cufile_api` and `cufile_io`, which follow cuFile 1.20: `cuFileHandleRegister`
//!   takes descriptors with or without `O_DIRECT` (GDS >= 1.7); `cuFileRead`/`cuFileWrite` take
//!   device or host (pageable or pinned) buffers. With GDS "present", transfers bypass the
//!   page cache (`O_DIRECT` through page-aligned 1 MiB bounce buffers; the emulator falls back
//!   to compatibility mode where the file system refuses `O_DIRECT`); in compatibility mode they
//!   go through the page cache and, for device memory, through 1 MiB POSIX bounce buffers
//!   (`per_buffer_cache_size_kb`) and a copy each. Unaligned transfers work in both.
//!   `cuFileDriverOpen` and `cuFileHandleRegister` need a current CUDA context on the calling
//!   thread, else CU_FILE_CUDA_DRIVER_ERROR with `cu_err` CUDA_ERROR_INVALID_CONTEXT (201), as
//!   real cuFile (see `cufile_api::require_context`). Opening the driver writes a line to
//!   `cufile.log` where cuFile would (see `cufile_log`), and costs what
//!   `H5GDS_EMU_CUFILE_OPEN_MS` says. cufile.json's `properties.use_pci_p2pdma` is read from the
//!   file `CUFILE_ENV_PATH_JSON` names, as cuFile reads it, else from the emulated machine's
//!   own configuration (see `cufile_config`); on a PCI P2PDMA machine (`H5GDS_EMU_GDS=p2pdma`)
//!   device data moves GPU-direct only where it is true, else in compatibility mode.
//! * Device and pinned host memory are backed when allocated (`MAP_POPULATE`): the first
//!   transfer into fresh memory pays no page faults, as on a GPU.
//! * fork: once a process has called `cuInit` successfully, every CUDA or cuFile call from
//!   another process (a fork of it) fails (CUDA_ERROR_NOT_INITIALIZED, or
//!   CU_FILE_CUDA_DRIVER_ERROR with it), writes a line on stderr and is counted: CUDA and
//!   cuFile state is undefined in a forked child (see `lifecycle`). A sticky error
//!   (`H5GDS_EMU_STICKY_ERROR`) fails every call after it the same way.
//! * No panic crosses the C boundary: a panic becomes CUDA_ERROR_UNKNOWN (999) /
//!   CU_FILE_INTERNAL_ERROR (5030) and a line on stderr. All state is behind mutexes or
//!   atomics; the locks are not held during copies or file I/O.
//!
//! # Switches (environment variables)
//!
//! Read once, at the first call that needs them (in practice `cuInit` or `cuFileDriverOpen`);
//! `H5GDS_EMU_REPORT` is read at exit. An unparsable value is reported on stderr and ignored.
//! "The Nth call" counts, from 1, only calls that passed their argument checks, and only the
//! Nth fails (once).
//!
//! | variable | effect | default |
//! |---|---|---|
//! | `H5GDS_EMU_DEVICES=N` | devices reported by `cuDeviceGetCount` (0..=64); 0 = no device, and then `cuInit` fails with CUDA_ERROR_NO_DEVICE (100) as the real driver does | 1 |
//! | `H5GDS_EMU_INIT_ERROR=code` | every `cuInit` fails with this `CUresult` (0 = no injection); `cuFileDriverOpen` then fails with CU_FILE_CUDA_DRIVER_ERROR and `cu_err` = code | unset |
//! | `H5GDS_EMU_GDS=0\|1\|p2pdma` | 1: GDS kernel path present (nvfs 2.20, transfers around the page cache; cufile.json's `use_pci_p2pdma` reads true, so the driver's look before opening cuFile under `compat_mode=auto`, which cannot see an emulated `/proc/driver/nvidia-fs`, lets it open); `p2pdma`: the same through PCI P2PDMA (nvfs 0.0, feature flag `CU_FILE_P2P_SUPPORTED`, `use_pci_p2pdma` true); 0: compat mode (nvfs 0.0, POSIX bounce buffers, `use_pci_p2pdma` false: the driver under `compat_mode=auto` never opens cuFile, as on the first real-GPU machine). These `use_pci_p2pdma` values are the emulated machine's `/etc/cufile.json`; a file named by `CUFILE_ENV_PATH_JSON` overrides them, and under `p2pdma` transfers go GPU-direct only where the value is true | 1 |
//! | `H5GDS_EMU_GDS_TARGETS=list` | the storage cuFile reports as GDS targets (`dstatusflags`): comma-separated `lustre`, `wekafs`, `nfs`, `gpfs`, `nvme`, `nvmeof`, `scsi`, `beegfs`, or `none`; a file on a shared file system (NFS, Lustre, GPFS, BeeGFS by `fstatfs`) not listed registers in compatibility mode, silently, as cuFile does | `nvme,nvmeof,scsi` |
//! | `H5GDS_EMU_CUFILE_OPEN_ERROR=code` | every `cuFileDriverOpen` (also the implicit one) fails with this `CUfileOpError` (0 = none) | unset |
//! | `H5GDS_EMU_CUFILE_OPEN_MS=ms` | what opening the cuFile driver costs (0..=60000): `cuFileDriverOpen`, and the implicit open of the first call that needs the driver, sleep this long before they do their work (failing ones too) where the driver is not open yet; the first real-GPU machine (an H200 VM) took about 470. "cufile driver opens completed" counts the opens that have returned | 0 |
//! | `H5GDS_EMU_CUFILE_REGISTER_ERROR=code` | every `cuFileHandleRegister` whose arguments pass its checks fails with this `CUfileOpError` (0 = none), and the log says why, as on the first real-GPU machine (an H200 VM, no nvidia-fs, a virtio disk): 5027 `CU_FILE_HANDLE_NOT_REGISTERED` with "udev property not found: ID_FS_USAGE vda" and "cuFileHandleRegister error, failed to allocate file object" in cufile.log, whatever `allow_compat_mode` says. With `H5GDS_EMU_GDS=0` this is that machine | unset |
//! | `H5GDS_EMU_FAIL_ALLOC=N` | the Nth allocation (`cuMemAlloc_v2` and `cuMemHostAlloc` counted together) fails with CUDA_ERROR_OUT_OF_MEMORY (2) | unset |
//! | `H5GDS_EMU_FAIL_IO=N` | the Nth `cuFileRead`/`cuFileWrite` (counted together) moves nothing and returns -1 with errno | unset |
//! | `H5GDS_EMU_FAIL_IO_ERRNO=E` | the errno of that failure | 5 (EIO) |
//! | `H5GDS_EMU_SHORT_IO=BYTES` | each `cuFileRead`/`cuFileWrite` moves at most BYTES (> 0) | unset |
//! | `H5GDS_EMU_FAIL_COPY=N` | the Nth copy call (any `cuMemcpy*`, all directions, counted together) fails, copying nothing | unset |
//! | `H5GDS_EMU_FAIL_COPY_ERROR=code` | the `CUresult` of that failure | 999 (CUDA_ERROR_UNKNOWN) |
//! | `H5GDS_EMU_POISON=byte\|off` | fill byte of new allocations (decimal or `0xNN`); `off` leaves them zeroed | 0xA5 |
//! | `H5GDS_EMU_REPORT=PATH` | at exit, write the counters to PATH (format below) | unset |
//! | `H5GDS_EMU_TRACE=1` | one stderr line per call: arguments and result | 0 |
//! | `H5GDS_EMU_DEFER_ASYNC=1` | async copies with pinned host memory or within device memory, the nvCOMP emulator's batched calls, and the legacy stream's memsets and early-returning copies, run at synchronization | 0 |
//! | `H5GDS_EMU_POOLS=1` | `CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED` is 1, so cudarc allocates with `cuMemAllocAsync` | 0 |
//! | `H5GDS_EMU_STICKY_ERROR=N` | the Nth `cuPointerGetAttributes` fails with CUDA_ERROR_ILLEGAL_ADDRESS (700), and so does every CUDA or cuFile call after it | unset |
//! | `H5GDS_EMU_CUFILE_IO_ERROR=code` | every `cuFileRead`/`cuFileWrite` of device memory returns this `CUfileOpError` (> 5000), negated | unset |
//! | `H5GDS_EMU_LINK_GBPS=pinned[,pageable]` | models the host-device link's time (see `timeline`): each copy between host and device memory takes its direction's copy engine for bytes / rate (GB/s, 10^9 bytes/s; pageable host memory at the second rate, else the first), after its stream's earlier work; async pinned copies return at once, other copies when they end; stream, context and event synchronization, frees, `cuEventQuery` (CUDA_ERROR_NOT_READY) and `cuStreamWaitEvent` follow the timeline; device-memory cuFile transfers take the link too. The first real-GPU machine (an H200 on PCIe Gen5) measured `55.4,7.6`; a rate scaled to a slow machine's own file I/O shows whether copies overlap it | unset |
//! | `H5GDS_EMU_REFUSE_STRIDED_DTOD=1` | 2-D and 3-D copies within device memory fail with CUDA_ERROR_INVALID_VALUE, as CUDA says they may for pitches not from `cuMemAllocPitch` | 0 |
//!
//! The report has nineteen lines (a forked child that exits normally writes its own, to
//! `PATH.forked-PID`):
//!
//! ```text
//! leaked device allocations: N (bytes B)
//! leaked pinned host allocations: N
//! double frees: N
//! bounds violations: N
//! cufile reads: N
//! cufile writes: N
//! copies htod: N
//! copies dtoh: N
//! cufile posix bounce copies: N
//! cufile o_direct requests: N
//! cufile driver open calls: N
//! cufile driver opens completed: N
//! cufile handle register calls: N
//! cross-context uses: N
//! cufile failed transfers: N
//! calls from a forked child: N
//! pointer queries: N
//! copies dtod: N
//! pinned host bytes allocated: N
//! ```
//!
//! "cufile reads/writes" count calls that returned a byte count (0 included); "copies" count
//! completed copies by direction ("copies dtod" within device memory; host-to-host ones are not
//! counted; a 2-D or 3-D copy counts once);
//! "posix bounce copies" count the 1 MiB bounce-buffer pieces of compatibility-mode device
//! transfers, "o_direct requests" the `O_DIRECT` requests of GDS transfers, "driver open calls" and
//! "handle register calls" every call of `cuFileDriverOpen` and `cuFileHandleRegister`, failed
//! ones included (whether a program touches cuFile at all), "driver opens completed" the driver
//! opens, explicit or implied, that have returned (an open under way has not), "failed transfers" the
//! `cuFileRead`/`cuFileWrite` calls that returned an error, "calls from a forked child" the
//! calls refused because they came from a fork of the process that called `cuInit`, "pointer
//! queries" the `cuPointerGetAttributes` calls (what classifying a buffer costs a program), "pinned
//! host bytes allocated" the bytes of every `cuMemHostAlloc` (what pinning costs it).

#![deny(unsafe_op_in_unsafe_fn)]
#![allow(non_snake_case)]

mod consts;
mod context;
mod copies;
mod counters;
mod cuda_device;
mod cuda_events;
mod cuda_memory;
mod cuda_pointer;
mod cuda_vmm;
mod cufile_api;
mod cufile_config;
mod cufile_handles;
mod cufile_io;
mod cufile_log;
mod device_access;
mod errors;
mod ffi;
mod lifecycle;
mod memory;
mod report;
mod stderr;
mod switches;
mod timeline;
