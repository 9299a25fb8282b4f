//! The engine's dataset handle, what both faces call: a dataset open in some HDF5 copy (its table
//! and id), the memory type its elements move as, and the face's lock on that HDF5 ([`Hdf5Lock`]).
//! [`Dataset::read`] fills host or device memory with any [`Selection`] the way `crate::policy`
//! decides (`host_read`, `device_read`, `gather`); [`Dataset::write`] writes a slab from either;
//! [`Dataset::write_chunks`] writes a new chunked dataset from the one [`Memory`] type (host bytes,
//! or a device array with its stream) encoded where `policy::write` decides. What a face keeps of
//! a dataset across handles is a [`Kept`]: the storage a read-only file's reads take with no HDF5
//! call (resolved once, [`Dataset::reads_stored`]; then read with no handle, [`Kept::read`]), the
//! facts its device transfers are decided over, and the driver's settings of the face's call,
//! loaded at most once ([`CallSettings`]; a handle with no kept call loads its own). The handle
//! supplies the policy's HDF5 side itself (facts, chunk calls, one `H5Dread`), so a face converts
//! its array and selection and maps [`Error`]'s kind.

pub use crate::chunks::Hdf5Lock;
use crate::chunks::{self, ChunkFace, StoredChunks};
use crate::decoded::{self, Decoded, Plan};
use crate::device::DeviceMemory;
use crate::encoded::Target;
use crate::error::Kind;
use crate::facts::{self, StoredLayout};
use crate::policy::device_read;
use crate::policy::gather::{Gather, Hdf5Side, Staging};
use crate::policy::host_read::{self, HostFace};
use crate::policy::settings::CallSettings;
use crate::policy::write::{CompressedWrite, Memory};
use crate::rows::RowPlan;
use crate::stored::{self, Stored};
use crate::transfer::{self, Transfer};
use crate::{Error, Result};
use h5gds_chunk_codec::Hyperslab;
use h5gds_runtime::cuda;
use h5gds_runtime::hdf5::{hid_t, Hdf5Api};
use on_device::DeviceFacts;

mod on_device;
use std::cell::OnceCell;
use std::sync::OnceLock;

/// Where a read puts the elements: host memory, or device memory.
pub enum ReadInto<'a> {
    Host(&'a mut [u8]),
    Device(DeviceMemory<'a>),
}

impl<'a> From<&'a mut [u8]> for ReadInto<'a> {
    fn from(out: &'a mut [u8]) -> Self {
        ReadInto::Host(out)
    }
}

impl<'a> From<&'a mut Vec<u8>> for ReadInto<'a> {
    fn from(out: &'a mut Vec<u8>) -> Self {
        ReadInto::Host(out)
    }
}

impl<'a> From<DeviceMemory<'a>> for ReadInto<'a> {
    fn from(out: DeviceMemory<'a>) -> Self {
        ReadInto::Device(out)
    }
}

/// Where a write takes the elements from: host memory, or device memory.
pub enum WriteFrom<'a> {
    Host(&'a [u8]),
    Device(DeviceMemory<'a>),
}

impl<'a> From<&'a [u8]> for WriteFrom<'a> {
    fn from(data: &'a [u8]) -> Self {
        WriteFrom::Host(data)
    }
}

impl<'a> From<&'a Vec<u8>> for WriteFrom<'a> {
    fn from(data: &'a Vec<u8>) -> Self {
        WriteFrom::Host(data)
    }
}

impl<'a> From<DeviceMemory<'a>> for WriteFrom<'a> {
    fn from(data: DeviceMemory<'a>) -> Self {
        WriteFrom::Device(data)
    }
}

/// Which elements of a dataset a request moves.
#[derive(Clone, Copy, Debug)]
pub enum Selection<'a> {
    /// Every element.
    All,
    /// A hyperslab: per axis, its first element, step and count.
    Slab(Hyperslab<'a>),
    /// Rows along the first axis (each below its length, in any order, repeats allowed), and of
    /// each row the same hyperslab `rest` of the other axes.
    Rows {
        rows: &'a [u64],
        rest: Hyperslab<'a>,
    },
}

/// One dataset as the engine moves it: see the module's doc.
pub struct Dataset<'a, L: Hdf5Lock> {
    pub(crate) api: &'static Hdf5Api,
    pub(crate) id: hid_t,
    mem_type: OnceCell<hid_t>,
    /// Makes the memory type where the face makes it at its first HDF5 call.
    make_mem_type: Option<&'a dyn Fn() -> Result<hid_t>>,
    pub(crate) element: usize,
    pub(crate) lock: L,
    /// What the handle learns of the dataset: the face's ([`Dataset::keeping`]), else its own.
    kept: Option<&'a Kept>,
    own: Kept,
    /// The face call whose settings the handle shares ([`Dataset::with_settings_of`]).
    call: Option<&'a Kept>,
    /// The driver's settings where neither holds any (one per handle).
    settings: CallSettings,
    name: OnceCell<String>,
}

/// What a face keeps of a dataset across handles ([`Dataset::keeping`]): the storage its reads
/// take with no HDF5 call where its file is read-only, what its device transfers are decided
/// over, and, kept for one face call ([`Kept::default`]: array-io's read or batches), the
/// driver's settings of that call. Kept across calls ([`Kept::across_calls`]: Python's, for the
/// life of an h5py dataset), each call loads its settings anew.
pub struct Kept {
    pub(crate) device: OnceLock<DeviceFacts>,
    stored: OnceLock<Option<KeptStored>>,
    settings: Option<CallSettings>,
}

/// A read-only file's dataset as its reads with no HDF5 call take it: its storage, and the driver
/// its file is open with where not `gds` (sec2, which reads only into host memory).
pub(crate) struct KeptStored {
    pub(crate) stored: Stored,
    pub(crate) other_driver: Option<String>,
}

impl Default for Kept {
    /// Kept for one face call: its settings loaded at most once for all of its handles.
    fn default() -> Self {
        Kept {
            device: OnceLock::new(),
            stored: OnceLock::new(),
            settings: Some(CallSettings::default()),
        }
    }
}

impl Kept {
    /// Kept across face calls: each handle (each [`Kept::read`]) loads the settings of its own
    /// call, which may differ from the last one's.
    pub fn across_calls() -> Kept {
        Kept {
            settings: None,
            ..Kept::default()
        }
    }

    /// The dataset's shape, where its storage for reads with no HDF5 call is resolved.
    pub fn shape(&self) -> Option<&[u64]> {
        Some(self.stored.get()?.as_ref()?.stored.shape())
    }

    /// Reads the slab `sel` into `out` (its elements row-major, in the memory type the storage
    /// was resolved for) with no HDF5 call and no handle, where the storage resolved here serves
    /// it (`policy::host_read::read_stored`; into device memory, `policy::device_read`'s stored
    /// way); false, nothing read, where the driver or HDF5 is to read it (or none is resolved).
    /// The selection and the size of `out` are checked first.
    pub fn read<'o>(&self, sel: Hyperslab, out: impl Into<ReadInto<'o>>) -> Result<bool> {
        self.read_in(self, sel, out)
    }

    /// [`Kept::read`] with the settings of the face call `call` (a [`Kept::default`] the call's
    /// handle shares through [`Dataset::with_settings_of`]): a read tried here first, with no
    /// lock, then by the handle under it, loads them once.
    pub fn read_in<'o>(
        &self,
        call: &Kept,
        sel: Hyperslab,
        out: impl Into<ReadInto<'o>>,
    ) -> Result<bool> {
        let Some(Some(kept)) = self.stored.get() else {
            return Ok(false);
        };
        let fresh;
        let settings = match &call.settings {
            Some(settings) => settings,
            None => {
                fresh = CallSettings::default();
                &fresh
            }
        };
        match out.into() {
            ReadInto::Host(out) => host_read::read_stored(&kept.stored, &sel, out, settings),
            ReadInto::Device(out) => {
                let driver = kept.other_driver.as_deref();
                device_read::read_stored(&kept.stored, driver, &sel, &out, settings)
            }
        }
    }
}

impl<'a, L: Hdf5Lock> Dataset<'a, L> {
    /// The dataset `id` of the HDF5 copy `api`, its elements moved as `mem_type` (of `element`
    /// bytes), its calls under `lock`.
    pub fn new(api: &'static Hdf5Api, id: hid_t, mem_type: hid_t, element: usize, lock: L) -> Self {
        Dataset {
            api,
            id,
            mem_type: OnceCell::from(mem_type),
            make_mem_type: None,
            element,
            lock,
            kept: None,
            own: Kept::across_calls(),
            call: None,
            settings: CallSettings::default(),
            name: OnceCell::new(),
        }
    }

    /// As [`Dataset::new`], the memory type made by `make` where a request first needs it (a
    /// read served with no HDF5 call never does).
    pub fn made_as(
        api: &'static Hdf5Api,
        id: hid_t,
        make: &'a dyn Fn() -> Result<hid_t>,
        element: usize,
        lock: L,
    ) -> Self {
        Dataset {
            mem_type: OnceCell::new(),
            make_mem_type: Some(make),
            ..Dataset::new(api, id, 0, element, lock)
        }
    }

    /// The memory type, made now where the face makes it.
    pub(crate) fn mem_type(&self) -> Result<hid_t> {
        match (self.mem_type.get(), self.make_mem_type) {
            (Some(&id), _) => Ok(id),
            (None, Some(make)) => {
                self.lock.enter()?;
                let id = make()?;
                Ok(*self.mem_type.get_or_init(|| id))
            }
            (None, None) => Err(Error::invalid("the dataset handle has no memory type")),
        }
    }

    /// The same handle, naming the dataset `name` in its log lines (else HDF5's name for it).
    pub fn named(self, name: &str) -> Self {
        let _ = self.name.set(name.to_string());
        self
    }

    /// The same handle, keeping what it learns of the dataset in `kept` for the face's next
    /// handles on it (a call's batches; Python's calls on one h5py dataset): the storage its reads
    /// take with no HDF5 call, resolved there at the first read that may take it (a host read or
    /// gather; a device read the driver would stage anyway), and its device facts. A handle with
    /// no kept reads through HDF5 (or the driver) only.
    pub fn keeping(mut self, kept: &'a Kept) -> Self {
        self.kept = Some(kept);
        self
    }

    /// The handle's settings are those of the face call `call` (a [`Kept::default`], see
    /// [`Kept::read_in`]).
    pub fn with_settings_of(mut self, call: &'a Kept) -> Self {
        self.call = Some(call);
        self
    }

    /// What the handle learns of the dataset.
    pub(crate) fn kept(&self) -> &Kept {
        self.kept.unwrap_or(&self.own)
    }

    /// Where the handle keeps the facts its device transfers are decided over: the face's kept
    /// where it serves one call, else its own (they are planned over the call's settings).
    pub(crate) fn device_kept(&self) -> &Kept {
        match self.kept {
            Some(kept) if kept.settings.is_some() => kept,
            _ => &self.own,
        }
    }

    /// The storage already resolved in the face's kept, with no HDF5 call.
    pub(crate) fn stored_resolved(&self) -> Option<&KeptStored> {
        self.kept?.stored.get()?.as_ref()
    }

    /// The driver's settings of the face's call: its kept's, else the handle's own.
    pub(crate) fn settings(&self) -> &CallSettings {
        (self.call.and_then(|call| call.settings.as_ref()))
            .or_else(|| self.kept.and_then(|kept| kept.settings.as_ref()))
            .unwrap_or(&self.settings)
    }

    /// The storage the handle's reads take with no HDF5 call: resolved once in what the face
    /// keeps (see [`Dataset::keeping`]); None where the face keeps nothing.
    pub(crate) fn stored(&self) -> Result<Option<&KeptStored>> {
        match self.kept {
            Some(kept) => self.stored_in(kept),
            None => Ok(None),
        }
    }

    /// The storage resolved in `kept`, resolved now if it is not yet.
    fn stored_in<'k>(&self, kept: &'k Kept) -> Result<Option<&'k KeptStored>> {
        if let Some(resolved) = kept.stored.get() {
            return Ok(resolved.as_ref());
        }
        let resolved = self.resolve_stored()?;
        Ok(kept.stored.get_or_init(|| resolved).as_ref())
    }

    /// Whether reads of the dataset take a storage with no HDF5 call, resolved now (once) in what
    /// the handle keeps ([`Dataset::keeping`], else its own): no where the file is writable or
    /// read for SWMR, or open with a driver other than sec2 or `gds` (whose addresses are the
    /// file's offsets), HDF5 converts the elements, the dataset is a scalar, or its storage is not
    /// the file's own bytes in a form h5gds reads. The kept then reads with no handle
    /// ([`Kept::read`]).
    pub fn reads_stored(&self) -> Result<bool> {
        Ok(self.stored_in(self.kept())?.is_some())
    }

    /// The face's lock, as the handle holds it.
    pub fn lock(&self) -> &L {
        &self.lock
    }

    /// The dataset's name: as the face named it, else as HDF5 names it ("None": anonymous).
    pub fn name(&self) -> Result<&str> {
        if let Some(name) = self.name.get() {
            return Ok(name);
        }
        self.lock.enter()?;
        let found = L::call(|| facts::object_name(self.api, self.id));
        Ok(self
            .name
            .get_or_init(|| found.unwrap_or_else(|| "None".into())))
    }

    /// The storage a read takes with no HDF5 call (`crate::stored`), or None where HDF5 reads
    /// it ([`Dataset::reads_stored`] says when).
    fn resolve_stored(&self) -> Result<Option<KeptStored>> {
        let name = self.name()?.to_string();
        let (api, id, mem_type) = (self.api, self.id, self.mem_type()?);
        L::call(|| {
            if !facts::read_only_file(api, id)? {
                return Ok(None);
            }
            let shape = facts::dimensions(api, id)?;
            let facts = facts::dataset_facts(api, id, mem_type)?;
            if shape.is_empty() || !facts.same_type || !stored::own_bytes(&facts.layout) {
                return Ok(None);
            }
            let other_driver = facts::other_driver(api, id)?;
            let at_addresses = matches!(other_driver.as_deref(), None | Some("sec2"));
            let Some(source) = at_addresses.then(|| stored::byte_source(api, id)).flatten() else {
                return Ok(None);
            };
            let index = |chunk: &[u64]| chunks::index(api, id, chunk);
            let element = self.element;
            let found = Stored::resolve(name, source, shape, element, facts.layout, index, log)?;
            Ok(found.map(|stored| KeptStored {
                stored,
                other_driver,
            }))
        })
    }

    /// Reads `sel` into `out` (its elements in the memory type, row-major; one row per index for
    /// [`Selection::Rows`]) the way `crate::policy` decides: `host_read` or `device_read` for a
    /// slab, `gather` for rows (into device memory through host memory, then one copy up). The
    /// driver's settings are the face call's ([`Kept`]), loaded where a step needs them.
    pub fn read<'o>(&self, sel: Selection, out: impl Into<ReadInto<'o>>) -> Result<()> {
        let named = |e: Error| match self.name.get() {
            Some(name) => e.in_dataset(name),
            None => e,
        };
        let out = match out.into() {
            ReadInto::Host(out) => out,
            ReadInto::Device(device) => {
                let slab = match sel {
                    Selection::Slab(slab) => slab,
                    Selection::All => return self.whole(|all| self.read_device(all, &device)),
                    Selection::Rows { rows, rest } => {
                        return self.gather_device(rows, rest, &device).map_err(named)
                    }
                };
                return self.read_device(slab, &device).map_err(named);
            }
        };
        let (dims, zeros, ones);
        let slab = match sel {
            Selection::Rows { rows, rest } => return self.gather(rows, rest, out),
            Selection::Slab(slab) => slab,
            Selection::All => {
                dims = self.dimensions()?;
                (zeros, ones) = (vec![0; dims.len()], vec![1; dims.len()]);
                Hyperslab {
                    start: &zeros,
                    step: &ones,
                    count: &dims,
                }
            }
        };
        host_read::read(self, slab, out, self.settings())
            .map(drop)
            .map_err(named)
    }

    /// Writes `data` (the selection's elements in the memory type, row-major) into the slab `sel`
    /// of the dataset: from host memory one checked `H5Dwrite`; from device memory straight
    /// through the `gds` driver or staged, as `route::plan` says (`crate::on_device`).
    pub fn write<'d>(&self, sel: Hyperslab, data: impl Into<WriteFrom<'d>>) -> Result<()> {
        let data = match data.into() {
            WriteFrom::Host(data) => data,
            WriteFrom::Device(device) => return self.write_device(sel, &device),
        };
        // SAFETY: `data`, borrowed for the call, holds `data.len()` bytes; HDF5 only reads a
        // write's buffer.
        unsafe { self.transfer(true, sel, data.as_ptr() as usize, data.len()) }
    }

    /// One plain checked `H5Dwrite` (`write`) or `H5Dread` of the slab `sel` from or into the
    /// `nbytes` at `buffer` (the selection's elements in the memory type: the size, the ids and
    /// the selection are checked before a byte moves), with no decision of the policy: the
    /// pointer reaches HDF5 untouched, so it may be device memory the `gds` driver takes. An
    /// empty selection moves nothing.
    ///
    /// # Safety
    /// `buffer` must be valid for `nbytes` bytes in the transfer's direction for the call.
    pub unsafe fn transfer(
        &self,
        write: bool,
        sel: Hyperslab,
        buffer: usize,
        nbytes: usize,
    ) -> Result<()> {
        let t = self.slab_transfer(write, sel, buffer, nbytes)?;
        L::call(|| {
            let Some(prepared) = transfer::prepare(self.api, &t)? else {
                return Ok(());
            };
            // SAFETY: the caller's contract: the buffer is valid for the checked size.
            let done = self.lock.unlocked(|| unsafe { prepared.run() });
            let call = if write { "H5Dwrite" } else { "H5Dread" };
            done.map_err(|m| Error::hdf5(format!("{call} failed: {m}")))
        })
    }

    /// The transfer of the slab `sel` of this dataset to or from the `nbytes` at `buffer` (its
    /// shape in memory the slab's), the face's lock entered: what `transfer::prepare` checks.
    pub(crate) fn slab_transfer<'s>(
        &self,
        write: bool,
        sel: Hyperslab<'s>,
        buffer: usize,
        nbytes: usize,
    ) -> Result<Transfer<'s>> {
        self.lock.enter()?;
        Ok(Transfer {
            write,
            dataset: self.id,
            mem_type: self.mem_type()?,
            start: sel.start,
            step: sel.step,
            count: sel.count,
            mem_shape: sel.count,
            buffer,
            nbytes,
        })
    }

    /// Writes every chunk of a new chunked dataset from `memory` (its elements row-major, as
    /// `w` describes them), encoded where `crate::policy::write` decides; the number of chunks
    /// written. The ids, `w`'s shape against the dataset's extent and the memory's size against
    /// the elements are checked first, as for one write of the whole dataset (nothing is written
    /// through it): a mismatch is an error naming it, with nothing written; an empty dataset
    /// writes no chunk.
    pub fn write_chunks(&self, w: &CompressedWrite, memory: Memory) -> Result<usize> {
        let (buffer, nbytes) = match &memory {
            Memory::Host(bytes) => (bytes.as_ptr() as usize, bytes.len()),
            Memory::Device(array, nbytes) => (array.address as usize, *nbytes),
        };
        let (zeros, ones) = (vec![0; w.shape.len()], vec![1; w.shape.len()]);
        let sel = Hyperslab {
            start: &zeros,
            step: &ones,
            count: w.shape,
        };
        let whole = self.slab_transfer(true, sel, buffer, nbytes)?;
        if L::call(|| transfer::prepare(self.api, &whole).map(|p| p.is_none()))? {
            return Ok(0);
        }
        let name = self.name()?;
        let face = self.chunk_face(name);
        let target = Target {
            api: self.api,
            dataset: self.id,
            name,
            face: &face,
            refused: &|e| e,
        };
        let threads = self.settings().nthreads()?;
        crate::policy::write::write(target, w, memory, threads)
    }

    /// Runs `f` with the selection of every element.
    fn whole<R>(&self, f: impl FnOnce(Hyperslab) -> Result<R>) -> Result<R> {
        let dims = self.dimensions()?;
        let (zeros, ones) = (vec![0; dims.len()], vec![1; dims.len()]);
        f(Hyperslab {
            start: &zeros,
            step: &ones,
            count: &dims,
        })
    }

    /// The dataset's dimensions: the stored storage's where the handle has resolved it, else
    /// HDF5's.
    fn dimensions(&self) -> Result<Vec<u64>> {
        if let Some(KeptStored { stored, .. }) = self.stored_resolved() {
            return Ok(stored.shape().to_vec());
        }
        self.lock.enter()?;
        Ok(L::call(|| facts::dimensions(self.api, self.id))?)
    }

    /// Reads the rows `rows` (of each, `rest` of the other axes) into `out`, one row per index,
    /// the way `crate::policy::gather` decides.
    fn gather(&self, rows: &[u64], rest: Hyperslab, out: &mut [u8]) -> Result<()> {
        let stored = self.stored()?;
        let extent = match self.dimensions()?.first() {
            Some(&extent) => extent,
            None => return Err(Error::invalid("is a scalar: it has no rows to read")),
        };
        let plan = self
            .lock
            .unlocked(|| RowPlan::of(rows, extent))
            .map_err(Error::invalid)?;
        let row_bytes = rest.count.iter().product::<u64>() as usize * self.element;
        let gather = (&plan, rest, row_bytes, self.settings());
        if let Some(KeptStored { stored, .. }) = stored {
            let read = || with_gather(gather, |g| g.stored(stored, &mut *out));
            if self.lock.unlocked(read)? {
                return Ok(());
            }
        }
        self.lock.enter()?;
        let name = self.name()?;
        let (api, id, mem_type) = (self.api, self.id, self.mem_type()?);
        let facts = L::call(|| facts::dataset_facts(api, id, mem_type))?;
        let conversion = (!facts.same_type).then_some("HDF5 converts its elements");
        let declined = decoded::declined(conversion)?;
        let face = self.chunk_face(name);
        self.lock.unlocked(|| {
            let side = Hdf5Side {
                api,
                dataset: id,
                mem_type,
                name,
                layout: &facts.layout,
                declined,
                face,
                failed: &|e| e,
            };
            with_gather(gather, |g| g.through_hdf5(side, out))
        })
    }

    /// Reads the rows `rows` (of each, `rest`) into device memory `out`: gathered into host
    /// memory first (`policy::gather::Staging`: the rows come from all over the file), checked
    /// where they are bools, then copied up in one piece.
    fn gather_device(&self, rows: &[u64], rest: Hyperslab, out: &DeviceMemory) -> Result<()> {
        let nbytes = out.nbytes;
        let mut staging = Staging::new(nbytes);
        // SAFETY: the staging buffer holds `nbytes` bytes, this call's alone, alive through it.
        let host = unsafe { std::slice::from_raw_parts_mut(staging.as_mut_ptr(), nbytes) };
        self.gather(rows, rest, host)?;
        if out.bools {
            Error::check_bools(host, self.name()?)?;
        }
        if nbytes == 0 {
            return Ok(());
        }
        let (to, from) = (out.address as usize, host.as_ptr() as usize);
        // SAFETY: `out` holds `nbytes` of device memory in its context (the face's contract); the
        // staging buffer holds them, and the copy has finished when this returns.
        let copied = self
            .lock
            .unlocked(|| unsafe { cuda::copy_any(out.context, to, from, nbytes) });
        copied.map_err(|e| Error::new(Kind::Device, format!("copying the rows up: {e}")))
    }

    /// The dataset's chunk calls as the engine's stored chunks make them.
    fn chunk_face<'n>(&self, name: &'n str) -> ChunkFace<'n, L> {
        ChunkFace::new(self.api, self.id, name)
    }
}

/// Runs `read` with the engine's gather of `plan` (of each row, `rest`: `row_bytes`), made on the
/// thread that runs it: its thread count is asked through a closure that stays there.
fn with_gather<R>(
    (plan, rest, row_bytes, settings): (&RowPlan, Hyperslab, usize, &CallSettings),
    read: impl FnOnce(&Gather) -> R,
) -> R {
    let threads = || settings.nthreads().map_err(|e| e.to_string());
    read(&Gather {
        plan,
        rest,
        row_bytes,
        threads: &threads,
    })
}

/// The engine's debug lines about a stored dataset (`crate::stored`'s log).
fn log(line: std::fmt::Arguments<'_>) {
    crate::policy::say(format_args!("stored: {line}"));
}

impl<L: Hdf5Lock> HostFace for Dataset<'_, L> {
    type Error = Error;

    fn name(&self) -> String {
        Dataset::name(self).unwrap_or("the dataset").to_string()
    }

    fn stored(&self) -> Result<Option<&Stored>> {
        Ok(Dataset::stored(self)?.map(|kept| &kept.stored))
    }

    fn facts(&self) -> Result<(StoredLayout, Option<String>)> {
        self.lock.enter()?;
        let (api, id, mem_type) = (self.api, self.id, self.mem_type()?);
        let facts = L::call(|| facts::dataset_facts(api, id, mem_type))?;
        let conversion = (!facts.same_type).then(|| {
            let name = Dataset::name(self).unwrap_or("the dataset");
            format!("HDF5 converts the stored type of dataset {name} to the memory type")
        });
        Ok((facts.layout, conversion))
    }

    fn decode(&self, plan: &Plan, sel: Hyperslab, out: &mut [u8]) -> Result<Decoded> {
        let name = Dataset::name(self)?;
        let (api, id, mem_type) = (self.api, self.id, self.mem_type()?);
        let face = self.chunk_face(name);
        self.lock.unlocked(|| {
            let open = |touched| StoredChunks::new(api, id, plan.chunk(), touched, face);
            decoded::read_hyperslab(&plan.decoding(), mem_type, sel, open, out)
        })
    }

    fn hdf5(&self, sel: Hyperslab, out: &mut [u8]) -> Result<()> {
        // SAFETY: `out`, borrowed mutably for the call, holds `out.len()` bytes.
        unsafe { self.transfer(false, sel, out.as_mut_ptr() as usize, out.len()) }
    }

    fn unlocked<R: Send>(&self, work: impl FnOnce() -> R + Send) -> R {
        self.lock.unlocked(work)
    }

    fn error(&self, e: Error) -> Error {
        e
    }
}
