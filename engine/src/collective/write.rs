//! The collective write, for both faces, in four agreed steps (docs/mpi.md, "How a collective
//! write works"): describe the tiles, create the file and its early-allocated dataset on rank 0
//! under a temporary name, write every rank's byte runs through the file's driver
//! (`H5FDwrite`), and rename (or remove) the file on rank 0. A face brings its communicator and
//! a [`Writer`]: what only it can do (check its own tile, create the file with its HDF5 binding,
//! hand its tile's memory to the driver).

use super::agree::{agree_inner, agree_with, Communicator};
use super::description::{decode_all, disagreement, Description, Tile};
use super::driver_file::DriverFile;
use super::error::CollectiveError;
use super::target::{finish, temporary_path, FileStepError};
use super::tile_write::{byte_runs, staged_pieces, write_runs, write_staged, ByteRun};
use super::wire::{Unwire, Wire};
use crate::tiles::{write_boxes, Decomposition};
use crate::{Error, ErrorKind, Result};
use h5gds_route::select::Block;
use h5gds_runtime::hdf5::{hid_t, Hdf5Api};
use h5gds_runtime::staging_ring::{RingStream, StagingRing};
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// What a face does in a collective write; the engine does the rest (the target's real path,
/// its directory, the agreements, the check that the tile's memory holds its bytes).
pub trait Writer {
    /// This rank's checks of its own tile (element type, dataset name, settings), and the tile.
    fn describe(&self) -> Result<Tile>;
    /// Rank 0: creates the HDF5 file `tmp` (its directory exists) holding `dataset` of `shape`,
    /// contiguous, allocated early, never filled, unfiltered, and closes it; the dataset's file
    /// offset (`None` for a dataset without elements, which has no storage).
    fn create(&self, tmp: &Path, dataset: &str, shape: &[u64]) -> Result<Option<u64>>;
    /// Writes this rank's tile into the created file: holding its HDF5 copy's lock, with an access
    /// list selecting the driver its memory goes through (`gds`, or sec2 where the settings stage
    /// it), it calls [`TileFile::write_direct`] or [`TileFile::write_staged`].
    fn write(&self, to: &TileFile) -> Result<()>;
}

/// Where one rank's tile goes: the created file, its end of address and the tile's byte runs.
pub struct TileFile {
    /// The tile's bytes: the memory a face hands over must hold them.
    pub bytes: u64,
    /// Bytes per element.
    pub item: usize,
    name: CString,
    end: u64,
    runs: Vec<ByteRun>,
    path: PathBuf,
    dataset: String,
    rank: (usize, usize),
}

impl TileFile {
    /// Writes the tile's runs from memory the file's driver takes as it is, at `src` (host
    /// memory, or device memory when the driver is `gds`): opens the file through `api`'s HDF5
    /// with the driver `fapl` selects, writes, closes (before the agreement: close-to-open
    /// consistency on NFS-like file systems). `held`: the bytes of the memory the face hands
    /// over, which must be the tile's (the runs then lie inside it).
    ///
    /// # Safety
    /// `src` must be valid for reads of `held` bytes, of a kind the file's driver takes.
    pub unsafe fn write_direct(
        &self,
        api: &'static Hdf5Api,
        (fapl, held): (hid_t, u64),
        src: u64,
    ) -> Result<()> {
        self.write_with(api, (fapl, held), |file| {
            // SAFETY: the runs lie inside the tile's memory (`held`, checked), as the caller
            // guarantees.
            unsafe { write_runs(file, &self.runs, src) }.map(|()| "direct")
        })
    }

    /// [`TileFile::write_direct`] from device memory at `src`, copied to pinned host buffers of
    /// at most `staging` bytes piece by piece first, through the ring `ring` makes for the pieces
    /// (element ranges).
    ///
    /// # Safety
    /// `src` must be device memory valid for reads of `held` bytes.
    pub unsafe fn write_staged<S: RingStream>(
        &self,
        api: &'static Hdf5Api,
        (fapl, held): (hid_t, u64),
        (src, staging): (u64, usize),
        ring: impl FnOnce(&[(u64, u64)]) -> Result<StagingRing<S>>,
    ) -> Result<()> {
        self.write_with(api, (fapl, held), |file| {
            let pieces = staged_pieces(self.bytes / self.item as u64, self.item, staging)?;
            let mut ring = ring(&pieces)?;
            let ring = (&mut ring, &pieces[..]);
            write_staged(file, ring, (src, self.item), &self.runs).map(|()| "staged")
        })
    }

    /// Checks the memory's size, opens the file, has `tile` write the runs (returning the way
    /// it took), closes the file and logs the verdict.
    fn write_with(
        &self,
        api: &'static Hdf5Api,
        (fapl, held): (hid_t, u64),
        tile: impl FnOnce(&DriverFile) -> Result<&'static str>,
    ) -> Result<()> {
        if held != self.bytes {
            return Err(Error::invalid(format!(
                "the tile's memory holds {held} bytes, not the {} bytes of its elements",
                self.bytes
            )));
        }
        let file = DriverFile::open(api, &self.name, fapl, self.end)?;
        let way = tile(&file)?;
        file.close()?;
        let ((rank, ranks), path, bytes) = (self.rank, self.path.display(), self.bytes);
        crate::policy::say(format_args!(
            "collective write of {path} {:?}: rank {rank} of {ranks} wrote {bytes} bytes way={way}",
            self.dataset
        ));
        Ok(())
    }
}

fn file_step(e: FileStepError) -> Error {
    let message = format!("{} {}: {}", e.op, e.path.display(), e.source);
    Error::new(ErrorKind::Io, message).with_errno(e.source.raw_os_error())
}

/// This rank's description, once the face's checks and (on rank 0) the path's passed.
fn describe<W: Writer + ?Sized>(
    writer: &W,
    decomposition: &Decomposition,
    rank: usize,
) -> Result<(Tile, Vec<u8>)> {
    let mut tile = writer.describe()?;
    let refused = |m| Err(Error::invalid(m));
    if tile.path.as_os_str().is_empty() {
        return refused("the path is empty: name an HDF5 file such as out/data.h5".into());
    }
    tile.path = real_path(&tile.path);
    let path = tile.path.display();
    if rank == 0 && tile.path.is_dir() {
        let example = tile.path.join("data.h5");
        let example = example.display();
        return refused(format!(
            "{path} is a directory, not an HDF5 file: name one such as {example}"
        ));
    }
    let description = Description::new(&tile, decomposition)?;
    Ok((tile, description.encode()))
}

/// The target as every rank names it: absolute, through symbolic links (so a link's file is
/// replaced, not the link), its part that does not exist yet kept as given.
fn real_path(path: &Path) -> PathBuf {
    let (mut at, mut missing) = (path, Vec::new());
    loop {
        let existing = if at.as_os_str().is_empty() {
            Path::new(".")
        } else {
            at
        };
        if let Ok(real) = existing.canonicalize() {
            return missing.into_iter().rev().fold(real, |p, name| p.join(name));
        }
        match (at.parent(), at.file_name()) {
            (Some(parent), Some(name)) => {
                missing.push(name);
                at = parent;
            }
            _ => return std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf()),
        }
    }
}

/// The global shape and every rank's box, from every rank's description: the same verdict on
/// every rank, with no agreement.
fn plan(
    messages: &[Vec<u8>],
    decomposition: &Decomposition,
) -> std::result::Result<(Vec<u64>, Vec<Block>), CollectiveError> {
    let all = decode_all(messages).map_err(CollectiveError::Exchange)?;
    if let Some(disagreement) = disagreement(&all) {
        return Err(disagreement);
    }
    let claims: Vec<_> = all.into_iter().map(|d| d.claim).collect();
    Ok(write_boxes(decomposition, &claims)?)
}

/// Rank 0: the temporary file holding the dataset, and the dataset's offset; the file removed
/// where the face's creation fails.
fn create<W: Writer + ?Sized>(
    writer: &W,
    tile: &Tile,
    shape: &[u64],
) -> Result<(PathBuf, Option<u64>)> {
    let tmp = temporary_path(&tile.path).map_err(file_step)?;
    if let Some(directory) = tmp.parent() {
        std::fs::create_dir_all(directory).map_err(|source| {
            let message = format!("creating the directory {}: {source}", directory.display());
            Error::new(ErrorKind::Io, message).with_errno(source.raw_os_error())
        })?;
    }
    let created = writer
        .create(&tmp, &tile.dataset, shape)
        .and_then(|offset| {
            if offset.is_none() && shape.iter().product::<u64>() > 0 {
                return Err(Error::hdf5(format!(
                    "{}: HDF5 gave the early-allocated dataset {:?} no file offset",
                    tile.path.display(),
                    tile.dataset
                )));
            }
            Ok(offset)
        });
    match created {
        Ok(offset) => Ok((tmp, offset)),
        Err(failure) => {
            let _ = std::fs::remove_file(&tmp);
            Err(failure)
        }
    }
}

/// Every rank: its tile (its box `mine` of the array of `shape`, stored from `offset`) into the
/// temporary file `tmp`.
fn write_tile<W: Writer + ?Sized>(
    writer: &W,
    (tile, tmp): (&Tile, &Path),
    (offset, shape, mine): (Option<u64>, &[u64], &Block),
    rank: (usize, usize),
) -> Result<()> {
    let Some(offset) = offset.filter(|_| !mine.is_empty()) else {
        return Ok(());
    };
    // Its box has the tile's shape (`write_boxes` places the described shapes), so the runs lie
    // inside the tile's memory, which the face checks holds `bytes`.
    let name = CString::new(tmp.as_os_str().as_bytes())
        .map_err(|_| Error::invalid("the path contains a NUL byte"))?;
    let item = tile.item as u64;
    let to = TileFile {
        bytes: mine.len() * item,
        item: tile.item,
        name,
        end: offset + shape.iter().product::<u64>() * item,
        runs: byte_runs(mine, shape, offset, item),
        path: tile.path.clone(),
        dataset: tile.dataset.clone(),
        rank,
    };
    writer.write(&to).map_err(|e| {
        e.during(format_args!(
            "{}: dataset {:?}",
            tile.path.display(),
            tile.dataset
        ))
    })
}

/// The collective write of every rank's tile under `decomposition`, as one contiguous dataset
/// of a new file replacing the target; collective. A failed call leaves the target as it was,
/// and every rank returns the same error, naming each failed rank and its cause, of the kind the
/// failed ranks share ([`ErrorKind::Collective`] where they differ).
pub fn write<C: Communicator + ?Sized, W: Writer + ?Sized>(
    comm: &C,
    writer: &W,
    decomposition: &Decomposition,
) -> Result<()> {
    protocol(comm, writer, decomposition).map_err(Error::from)
}

fn protocol<C: Communicator + ?Sized, W: Writer + ?Sized>(
    comm: &C,
    writer: &W,
    decomposition: &Decomposition,
) -> std::result::Result<(), CollectiveError> {
    let (rank, ranks) = (comm.rank(), comm.size());
    let described = describe(writer, decomposition, rank);
    let ((tile, _), messages) =
        agree_with(comm, "describing the tiles", described, |(_, m)| m.clone())?;
    let (shape, boxes) = plan(&messages, decomposition)?;

    let created = if rank == 0 {
        create(writer, &tile, &shape)
    } else {
        Ok((PathBuf::new(), None))
    };
    let (_, created) = agree_with(comm, "creating the file", created, |(tmp, offset)| {
        Wire::default()
            .text(&tmp.to_string_lossy())
            .u64(offset.map_or(0, |o| o + 1))
            .finish()
    })?;
    let mut from_rank0 = Unwire::new(&created[0]);
    let (tmp, offset) = match (from_rank0.text(), from_rank0.u64()) {
        (Ok(tmp), Ok(offset)) => (PathBuf::from(tmp), offset.checked_sub(1)),
        (Err(reason), _) | (_, Err(reason)) => return Err(CollectiveError::Exchange(reason)),
    };

    let placed = (offset, &shape[..], &boxes[rank]);
    let wrote = write_tile(writer, (&tile, &tmp), placed, (rank, ranks));
    let written = agree_inner(comm, "writing the tiles", wrote);

    let finished = if rank == 0 {
        finish(&tmp, &tile.path, written.is_ok()).map_err(file_step)
    } else {
        Ok(())
    };
    let finished = agree_inner(comm, "finishing the file", finished);
    written.and(finished)
}

#[cfg(test)]
mod tests {
    use super::super::agree::tests::{sent, Ranks};
    use super::*;
    use std::cell::{Cell, RefCell};

    /// A face whose steps are recorded; its tile never reaches a file (no rank gets that far).
    struct Face {
        tile: Tile,
        created: Cell<bool>,
    }

    impl Writer for Face {
        fn describe(&self) -> Result<Tile> {
            Ok(self.tile.clone())
        }
        fn create(&self, tmp: &Path, _: &str, _: &[u64]) -> Result<Option<u64>> {
            std::fs::write(tmp, b"partial").unwrap();
            self.created.set(true);
            Err(Error::hdf5("HDF5 refused"))
        }
        fn write(&self, _: &TileFile) -> Result<()> {
            unreachable!("no rank writes after a failed creation")
        }
    }

    fn tile(path: &Path, element: &str, shape: &[u64]) -> Tile {
        Tile {
            path: path.to_path_buf(),
            dataset: "/x".into(),
            element: element.into(),
            item: 4,
            shape: shape.to_vec(),
        }
    }

    fn description(t: &Tile) -> Vec<u8> {
        sent(Ok(Description::new(t, &Decomposition::LeadingAxis)
            .unwrap()
            .encode()))
    }

    #[test]
    fn rank_0_names_a_directory_and_ranks_that_disagree_are_named_alike_everywhere() {
        let dir = tempfile::tempdir().unwrap();
        let face = |t: Tile| Face {
            tile: t,
            created: Cell::new(false),
        };
        let lead = &Decomposition::LeadingAxis;
        let (at_dir, others) = (tile(dir.path(), "f32", &[2]), vec![vec![]]);
        let comm = Ranks {
            rank: 0,
            others: RefCell::new(others),
        };
        let err = write(&comm, &face(at_dir), lead).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArgument);
        assert!(err
            .to_string()
            .starts_with("describing the tiles failed on rank 0 of 1: "));
        assert!(err.to_string().contains("is a directory"), "{err}");

        let path = dir.path().join("t.h5");
        let other = description(&tile(&path, "i32", &[2]));
        let comm = Ranks {
            rank: 0,
            others: RefCell::new(vec![vec![other]]),
        };
        let err = write(&comm, &face(tile(&path, "f32", &[2])), lead).unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid decomposition: rank 1 has a tile of i32, rank 0 f32"
        );
        let wide = description(&tile(&path, "f32", &[2, 4]));
        let comm = Ranks {
            rank: 1,
            others: RefCell::new(vec![vec![wide]]),
        };
        let err = write(&comm, &face(tile(&path, "f32", &[2, 3])), lead).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArgument);
        assert!(
            err.to_string().contains("rank 1's tile has shape [2, 3]"),
            "{err}"
        );
    }

    #[test]
    fn the_target_is_named_through_its_links_with_its_missing_part_kept() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().canonicalize().unwrap();
        std::fs::write(real.join("file.h5"), b"old").unwrap();
        std::os::unix::fs::symlink(real.join("file.h5"), real.join("link.h5")).unwrap();
        assert_eq!(real_path(&dir.path().join("link.h5")), real.join("file.h5"));
        let missing = dir.path().join("new/sub/x.h5");
        assert_eq!(real_path(&missing), real.join("new/sub/x.h5"));
        let cwd = std::env::current_dir().unwrap().canonicalize().unwrap();
        assert_eq!(real_path(Path::new("no-such.h5")), cwd.join("no-such.h5"));
    }

    #[test]
    fn a_failed_creation_removes_the_temporary_file_and_leaves_the_target() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.h5");
        std::fs::write(&path, b"old").unwrap();
        let mine = tile(&path, "f32", &[2]);
        let theirs = description(&tile(&path, "f32", &[3]));
        // Rank 1 answers the creation's, the write's and the finish's agreements with success.
        let ok = sent(Ok(Vec::new()));
        let others = vec![vec![theirs], vec![ok.clone()], vec![ok.clone()], vec![ok]];
        let comm = Ranks {
            rank: 0,
            others: RefCell::new(others),
        };
        let face = Face {
            tile: mine,
            created: Cell::new(false),
        };
        let err = write(&comm, &face, &Decomposition::LeadingAxis).unwrap_err();
        assert!(face.created.get());
        assert_eq!(
            err.to_string(),
            "creating the file failed on rank 0 of 2: rank 0: HDF5 refused"
        );
        assert_eq!(std::fs::read(&path).unwrap(), b"old");
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(left.len(), 1, "{left:?}");
    }
}
