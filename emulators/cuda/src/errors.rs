//! Names and descriptions of `CUresult` codes, for `cuGetErrorName` / `cuGetErrorString`.
//! The names are the enumerator names of `cuda.h`; the descriptions are short English texts in
//! the spirit of the driver's own. Codes not listed are "unrecognized", as with the real driver.

use crate::consts::CUresult;
use std::ffi::CStr;

/// One known code: `(code, name, description)`.
type Entry = (CUresult, &'static CStr, &'static CStr);

const TABLE: &[Entry] = &[
    (0, c"CUDA_SUCCESS", c"no error"),
    (1, c"CUDA_ERROR_INVALID_VALUE", c"invalid argument"),
    (2, c"CUDA_ERROR_OUT_OF_MEMORY", c"out of memory"),
    (3, c"CUDA_ERROR_NOT_INITIALIZED", c"initialization error"),
    (4, c"CUDA_ERROR_DEINITIALIZED", c"driver shutting down"),
    (
        34,
        c"CUDA_ERROR_STUB_LIBRARY",
        c"CUDA driver is a stub library",
    ),
    (
        35,
        c"CUDA_ERROR_INSUFFICIENT_DRIVER",
        c"CUDA driver version is insufficient for CUDA runtime version",
    ),
    (
        100,
        c"CUDA_ERROR_NO_DEVICE",
        c"no CUDA-capable device is detected",
    ),
    (101, c"CUDA_ERROR_INVALID_DEVICE", c"invalid device ordinal"),
    (
        201,
        c"CUDA_ERROR_INVALID_CONTEXT",
        c"invalid device context",
    ),
    (
        214,
        c"CUDA_ERROR_ECC_UNCORRECTABLE",
        c"uncorrectable ECC error encountered",
    ),
    (
        304,
        c"CUDA_ERROR_OPERATING_SYSTEM",
        c"OS call failed or operation not supported on this OS",
    ),
    (
        400,
        c"CUDA_ERROR_INVALID_HANDLE",
        c"invalid resource handle",
    ),
    (500, c"CUDA_ERROR_NOT_FOUND", c"named symbol not found"),
    (600, c"CUDA_ERROR_NOT_READY", c"device not ready"),
    (
        700,
        c"CUDA_ERROR_ILLEGAL_ADDRESS",
        c"an illegal memory access was encountered",
    ),
    (
        709,
        c"CUDA_ERROR_CONTEXT_IS_DESTROYED",
        c"context is destroyed",
    ),
    (
        712,
        c"CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED",
        c"part or all of the requested memory range is already mapped",
    ),
    (
        713,
        c"CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED",
        c"pointer does not correspond to a registered memory region",
    ),
    (
        719,
        c"CUDA_ERROR_LAUNCH_FAILED",
        c"unspecified launch failure",
    ),
    (800, c"CUDA_ERROR_NOT_PERMITTED", c"operation not permitted"),
    (801, c"CUDA_ERROR_NOT_SUPPORTED", c"operation not supported"),
    (
        802,
        c"CUDA_ERROR_SYSTEM_NOT_READY",
        c"system not yet initialized",
    ),
    (
        803,
        c"CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
        c"system has unsupported display driver / cuda driver combination",
    ),
    (999, c"CUDA_ERROR_UNKNOWN", c"unknown error"),
];

fn entry(code: CUresult) -> Option<&'static Entry> {
    TABLE.iter().find(|(known, _, _)| *known == code)
}

/// The enumerator name of `code`, if the emulator knows it.
pub fn name(code: CUresult) -> Option<&'static CStr> {
    entry(code).map(|(_, name, _)| *name)
}

/// The description of `code`, if the emulator knows it.
pub fn description(code: CUresult) -> Option<&'static CStr> {
    entry(code).map(|(_, _, text)| *text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_unique_and_names_match_the_header_spelling() {
        for (i, (code, name, _)) in TABLE.iter().enumerate() {
            assert!(TABLE[i + 1..].iter().all(|(other, _, _)| other != code));
            assert!(name.to_str().unwrap().starts_with("CUDA_"));
        }
        assert_eq!(name(2), Some(c"CUDA_ERROR_OUT_OF_MEMORY"));
        assert_eq!(
            description(100),
            Some(c"no CUDA-capable device is detected")
        );
        assert_eq!(name(12345), None);
    }
}
