//! The dataset handle's reads and writes of device memory ([`DeviceMemory`]), for both faces: the
//! facts the policy decides over (how the dataset is stored, in HDF5's and route's words, which
//! driver holds the file, whether HDF5 converts, how h5gds decodes its chunks on the host), read
//! once per handle, then `policy::device_read`'s order for a read (stored way, GPU or host
//! decoding, `route::plan`) and `device::write`'s route for a write. The device side of the
//! transfer (its staging ring on the runtime's streams of the memory's context, its errors, its
//! chunk calls) is `device::OnDevice`, so a face only converts its array and maps [`Error`]'s kind.

use super::{Dataset, Hdf5Lock};
use crate::chunks;
use crate::decoded::{self, Plan};
use crate::device::{self, DeviceMemory, OnDevice, Selected};
use crate::facts::{self, StoredLayout};
use crate::policy::device_read::{self, ReadRoute};
use crate::policy::settings::CallSettings;
use crate::transfer;
use crate::{Error, Result};
use h5gds_chunk_codec::{ChunkIndex, Hyperslab};
use h5gds_route::route::{blocker, Storage, Transfer as RouteFacts};
use h5gds_runtime::settings;
use std::marker::PhantomData;
use std::sync::OnceLock;

/// What a dataset's device transfers are decided over, read once per handle.
pub(crate) struct DeviceFacts {
    layout: StoredLayout,
    storage: Storage,
    conversion: Option<String>,
    other_driver: Option<String>,
    /// How h5gds decodes its chunks on the host's threads, or why it cannot.
    host: std::result::Result<Plan, String>,
    /// A whole listing of its written chunks, made at the first GPU-decoded read touching many.
    index: OnceLock<ChunkIndex>,
}

impl<L: Hdf5Lock> Dataset<'_, L> {
    /// The facts of [`DeviceFacts`], asked of HDF5 at the first device transfer of the handle.
    fn device_facts(&self) -> Result<&DeviceFacts> {
        if let Some(known) = self.device_kept().device.get() {
            return Ok(known);
        }
        self.lock.enter()?;
        let name = self.name()?;
        let (api, id, mem_type) = (self.api, self.id, self.mem_type()?);
        let (found, other_driver, rank) = L::call(|| -> Result<_> {
            let found = facts::dataset_facts(api, id, mem_type)?;
            Ok((
                found,
                facts::other_driver(api, id)?,
                facts::dimensions(api, id)?.len(),
            ))
        })?;
        let conversion = (!found.same_type).then(|| {
            format!(
                "the stored type of dataset {name} differs from the memory type in HDF5's terms \
                 (byte order, padding or string padding), so HDF5 converts in the buffer itself"
            )
        });
        let listed = |chunk: &[u64]| {
            let index =
                L::call(|| chunks::index(api, id, chunk)).map_err(|e| e.in_dataset(name))?;
            Ok::<_, Error>(index.offsets().into_iter().collect())
        };
        let storage = device::storage(&found.layout, found.stored_size, listed)?;
        let host = match &found.layout {
            StoredLayout::Chunked { filters, .. } if !filters.is_empty() => {
                let (threads, item) = (self.settings().nthreads()?, self.element);
                decoded::plan(&found.layout, conversion.as_deref(), rank, item, threads)?
            }
            _ => Err("its chunks are not filtered".to_string()),
        };
        let known = DeviceFacts {
            layout: found.layout,
            storage,
            conversion,
            other_driver,
            host,
            index: OnceLock::new(),
        };
        Ok(self.device_kept().device.get_or_init(|| known))
    }

    /// Reads the slab `sel` into device memory `out` in `policy::device_read`'s order: a storage
    /// the face's kept has resolved is tried first, with no HDF5 call (its facts are its own).
    pub(crate) fn read_device(&self, sel: Hyperslab, out: &DeviceMemory) -> Result<()> {
        let (path, settings) = (out.path()?, self.settings());
        let route_of = |conversion, other_driver| RouteFacts {
            staged_by_settings: !settings::goes_through_gds(path),
            checked_bytes: out.bools,
            conversion,
            other_driver,
        };
        let resolved = self.stored_resolved();
        if let Some(kept) = resolved {
            let route = route_of(None, kept.other_driver.clone());
            let stored = || Ok(Some(&kept.stored));
            if device_read::stored_way(stored, (&sel, out, &route, path), settings)? {
                return Ok(());
            }
        }
        let facts = self.device_facts()?;
        let route = route_of(facts.conversion.clone(), facts.other_driver.clone());
        // (Not asked again where the storage was resolved already, and tried above.)
        let stored = || match resolved {
            Some(_) => Ok(None),
            None => Ok(self.stored()?.map(|kept| &kept.stored)),
        };
        if device_read::stored_way(stored, (&sel, out, &route, path), settings)? {
            return Ok(());
        }
        let name = self.name()?;
        let staging_size = out.staging_size()?;
        let Some(prepared) = self.prepared(false, sel, out)? else {
            return Ok(());
        };
        let io = Selected {
            prepared: &prepared,
            selection: sel,
            item: self.element,
            address: out.address,
            staging_size,
        };
        let read = ReadRoute {
            dataset: name,
            layout: &facts.layout,
            storage: &facts.storage,
            facts: &route,
            path,
            host: (facts.host.as_ref())
                .map(|p| p.decoding().pipeline)
                .map_err(Clone::clone),
        };
        let face = self.on_device(name, out, settings, false);
        // SAFETY: the face's contract (`DeviceMemory`): `nbytes` of writable device memory in
        // `context`, alive for the call; `prepare` checked they hold the selection.
        unsafe { device_read::read(&face, &io, &read) }
    }

    /// Writes the slab `sel` from device memory `data`: straight through the `gds` driver, or
    /// staged through pinned host memory where `route::plan` says (the file's driver, the
    /// settings, a conversion, or storage HDF5 copies itself). Bools are not checked on their
    /// way out, so they do not stage a write.
    pub(crate) fn write_device(&self, sel: Hyperslab, data: &DeviceMemory) -> Result<()> {
        let (facts, settings) = (self.device_facts()?, self.settings());
        let route = RouteFacts {
            staged_by_settings: !settings::goes_through_gds(data.path()?),
            checked_bytes: false,
            conversion: facts.conversion.clone(),
            other_driver: facts.other_driver.clone(),
        };
        // HDF5 allocates contiguous storage never written before it writes into it.
        let storage = match &facts.storage {
            Storage::Contiguous { .. } => &Storage::Contiguous { allocated: true },
            storage => storage,
        };
        let staged = device::staged_reason(storage, &device::spanned(&sel), blocker(&route));
        let name = self.name()?;
        let staging_size = match staged {
            Some(_) => data.staging_size()?,
            None => 0,
        };
        let Some(prepared) = self.prepared(true, sel, data)? else {
            return Ok(());
        };
        let io = Selected {
            prepared: &prepared,
            selection: sel,
            item: self.element,
            address: data.address,
            staging_size,
        };
        let face = self.on_device(name, data, settings, true);
        // SAFETY: the face's contract (`DeviceMemory`): `nbytes` of device memory in `context`,
        // alive for the call; `prepare` checked they hold the selection.
        unsafe { device::write(&face, &io, name, staged.as_deref()) }
    }

    /// The checked transfer of `sel` to or from `memory` (None: it moves nothing).
    fn prepared(
        &self,
        write: bool,
        sel: Hyperslab,
        memory: &DeviceMemory,
    ) -> Result<Option<transfer::Prepared>> {
        let t = self.slab_transfer(write, sel, memory.address as usize, memory.nbytes)?;
        L::call(|| transfer::prepare(self.api, &t))
    }

    fn on_device<'h>(
        &'h self,
        name: &'h str,
        memory: &'h DeviceMemory<'h>,
        settings: &'h CallSettings,
        write: bool,
    ) -> OnDevice<'h, L> {
        OnDevice {
            api: self.api,
            id: self.id,
            name,
            memory,
            settings,
            write,
            index: self.device_kept().device.get().map(|f| &f.index),
            lock: PhantomData,
        }
    }
}
