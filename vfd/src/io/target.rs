//! Which storage a file lives on, as far as GPUDirect Storage cares. cuFile moves a file
//! GPU-direct only where its file system (or the block device beneath a local one) is a GDS
//! target; for any other file `cuFileHandleRegister` still succeeds and quietly does POSIX I/O
//! through host bounce buffers ("cuFileHandleRegister GDS not supported or disabled by config,
//! using cuFile posix read/write with compat mode enabled", cufile.log in NVIDIA/gds-nvidia-fs
//! issue #62). cuFile reports which shared file systems it supports in
//! `CUfileDrvProps_t::nvfs.dstatusflags` (`CU_FILE_NFS_SUPPORTED`, ...); for local file systems
//! it decides by the block device itself (same issue: "Unsupported block device: /dev/dm-0"),
//! which the driver names but leaves to cuFile.

use h5gds_runtime::cufile::sys::CUfileDriverStatusFlags as Flag;
use std::os::fd::RawFd;

/// Where a file's bytes live.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Storage {
    /// A network or distributed file system: a GDS target only where cuFile reports `flag`.
    Shared { name: &'static str, flag: Flag },
    /// A local file system (its name) on a block device (its kernel name).
    Local { fs: String, device: String },
}

impl std::fmt::Display for Storage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Storage::Shared { name, .. } => f.write_str(name),
            Storage::Local { fs, device } => write!(f, "{fs} on {device}"),
        }
    }
}

/// `statfs` magic numbers (`linux/magic.h` and the file systems' own headers) of the shared file
/// systems cuFile lists in `CUfileDriverStatusFlags`, with their flags.
const SHARED: [(i64, &str, Flag); 4] = [
    (0x6969, "NFS", Flag::CU_FILE_NFS_SUPPORTED),
    (0x0BD0_0BD0, "Lustre", Flag::CU_FILE_LUSTRE_SUPPORTED),
    (0x4750_4653, "GPFS", Flag::CU_FILE_GPFS_SUPPORTED),
    (0x1983_0326, "BeeGFS", Flag::CU_FILE_BEEGFS_SUPPORTED),
];

/// Names of common local file systems, by `statfs` magic.
const LOCAL: [(i64, &str); 7] = [
    (0xEF53, "ext4"),
    (0x5846_5342, "xfs"),
    (0x9123_683E, "btrfs"),
    (0x0102_1994, "tmpfs"),
    (0x794C_7630, "overlayfs"),
    (0x6573_5546, "FUSE"),
    (0x2FC1_2FC1, "ZFS"),
];

/// The storage of the open file `fd`; `None` if the kernel will not say.
pub(crate) fn storage_of(fd: RawFd) -> Option<Storage> {
    // SAFETY: zeroed statfs/stat are valid values for the kernel to overwrite.
    let (mut fs, mut st): (libc::statfs, libc::stat) = unsafe { std::mem::zeroed() };
    // SAFETY: valid out-pointers; fstatfs/fstat only write them.
    if unsafe { libc::fstatfs(fd, &mut fs) } != 0 || unsafe { libc::fstat(fd, &mut st) } != 0 {
        return None;
    }
    // f_type's width differs between targets (i64 on 64-bit Linux).
    #[allow(clippy::unnecessary_cast)]
    let magic = fs.f_type as i64;
    if let Some(&(_, name, flag)) = SHARED.iter().find(|(m, ..)| *m == magic) {
        return Some(Storage::Shared { name, flag });
    }
    let fs = LOCAL
        .iter()
        .find(|(m, _)| *m == magic)
        .map_or_else(|| format!("file system {magic:#x}"), |(_, n)| n.to_string());
    let (major, minor) = (libc::major(st.st_dev), libc::minor(st.st_dev));
    // /sys/dev/block/MAJ:MIN links to the device's sysfs directory, named as in /dev.
    let device = std::fs::read_link(format!("/sys/dev/block/{major}:{minor}"))
        .ok()
        .and_then(|link| Some(link.file_name()?.to_string_lossy().into_owned()))
        .unwrap_or_else(|| format!("device {major}:{minor}"));
    Some(Storage::Local { fs, device })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn a_local_file_names_its_file_system_and_device() {
        let file = tempfile::tempfile().unwrap();
        match storage_of(file.as_raw_fd()) {
            Some(Storage::Local { fs, device }) => {
                assert!(!fs.is_empty() && !device.is_empty(), "{fs} on {device}");
            }
            other => panic!("a temporary file on shared storage? {other:?}"),
        }
        assert_eq!(storage_of(-1), None);
        let nfs = Storage::Shared {
            name: "NFS",
            flag: Flag::CU_FILE_NFS_SUPPORTED,
        };
        assert_eq!(nfs.to_string(), "NFS");
    }
}
