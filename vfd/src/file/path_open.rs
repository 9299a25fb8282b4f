//! Opening a file's path as sec2 does, but leaving the file system as it was until the open is
//! accepted: no `O_TRUNC` at open, creation only through `O_EXCL` (so the file this open created,
//! if any, is known for certain, also through a dangling symbolic link), and removal of that very
//! file alone when the open is refused.

use crate::abi::{H5F_ACC_CREAT, H5F_ACC_EXCL};
use std::ffi::{c_int, CStr, CString};
use std::fs::File;
use std::io;
use std::os::fd::FromRawFd;
use std::os::unix::ffi::OsStrExt;

/// `open(2)` of `path` with `flags` and sec2's mode, close-on-exec.
pub(super) fn open_fd(path: &CStr, flags: c_int) -> io::Result<File> {
    // SAFETY: path is a valid C string; the mode is sec2's (0666 less the umask).
    let fd = unsafe {
        libc::open(
            path.as_ptr(),
            flags | libc::O_CLOEXEC,
            0o666 as libc::c_uint,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd was just opened and is owned by nothing else.
    Ok(unsafe { File::from_raw_fd(fd) })
}

/// Opens `path` as sec2 would for HDF5 access `flags`, but without changing the file system
/// beyond creating a file that did not exist: no O_TRUNC (the caller truncates once the open is
/// accepted), and creation only through O_EXCL, so the path returned with the file says for
/// certain which file this open created, if any (`path`, or the file a dangling symbolic link at
/// `path` names, which sec2's O_CREAT creates too).
pub(super) fn open_untouched(
    path: &CStr,
    access: c_int,
    flags: u32,
) -> io::Result<(File, Option<CString>)> {
    let create = libc::O_CREAT | libc::O_EXCL;
    if flags & H5F_ACC_CREAT == 0 {
        return open_fd(path, access).map(|f| (f, None));
    }
    if flags & H5F_ACC_EXCL != 0 {
        return open_fd(path, access | create).map(|f| (f, Some(path.to_owned())));
    }
    // Open if it exists, else create: retried while another process creates or removes the
    // same name between the two calls (a few times suffice; each round makes progress unless
    // the other process keeps flipping the name).
    let mut last = io::Error::from_raw_os_error(libc::EEXIST);
    for _ in 0..16 {
        match open_fd(path, access) {
            Err(err) if err.kind() == io::ErrorKind::NotFound => {}
            other => return other.map(|f| (f, None)),
        }
        match open_fd(path, access | create) {
            Err(err) if err.kind() == io::ErrorKind::AlreadyExists => {
                // O_EXCL does not follow a symbolic link, so a dangling one is "there".
                if let Some(target) = dangling_link_target(path) {
                    return open_fd(&target, access | create).map(|f| (f, Some(target)));
                }
                last = err;
            }
            other => return other.map(|f| (f, Some(path.to_owned()))),
        }
    }
    Err(last)
}

/// The path that the chain of symbolic links starting at `path` ends in, where that names nothing;
/// None where `path` is not a symbolic link, or its chain ends in something, or is too long.
fn dangling_link_target(path: &CStr) -> Option<CString> {
    use std::os::unix::ffi::OsStringExt;
    let mut at = std::path::PathBuf::from(path_os(path));
    // (Linux follows at most 40 links in one lookup.)
    for _ in 0..40 {
        match std::fs::symlink_metadata(&at) {
            Ok(meta) if meta.file_type().is_symlink() => {
                let target = std::fs::read_link(&at).ok()?;
                let dir = at
                    .parent()
                    .map(std::path::Path::to_path_buf)
                    .unwrap_or_default();
                at = dir.join(target); // (an absolute target replaces `dir`)
            }
            Err(err)
                if err.kind() == io::ErrorKind::NotFound && at.as_os_str() != path_os(path) =>
            {
                return CString::new(at.into_os_string().into_vec()).ok();
            }
            _ => return None,
        }
    }
    None
}

fn path_os(path: &CStr) -> &std::ffi::OsStr {
    std::ffi::OsStr::from_bytes(path.to_bytes())
}

/// Removes the file this open created, after a refusal: only if `path` still names that very
/// file (same device and inode), so a file another process put there meanwhile stays.
pub(super) fn remove_if_same(path: &CStr, file: &File) {
    use std::os::unix::fs::MetadataExt;
    let Ok(ours) = file.metadata() else { return };
    let name = std::path::Path::new(path_os(path));
    match std::fs::symlink_metadata(name) {
        Ok(now) if now.dev() == ours.dev() && now.ino() == ours.ino() => {
            if let Err(err) = std::fs::remove_file(name) {
                tracing::warn!("could not remove {name:?}, created by a refused open: {err}");
            }
        }
        _ => tracing::debug!("{name:?} is no longer the file a refused open created; left alone"),
    }
}
