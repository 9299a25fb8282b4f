//! The emulator's switches: environment variables read once, at the first emulator call that
//! needs one (in practice `cuInit` or `cuFileDriverOpen`). A value that does not parse is
//! reported on stderr and the default is used. `H5GDS_EMU_REPORT` is read at exit instead
//! (see `report.rs`). The crate documentation lists the semantics.

use crate::consts::{CUresult, CUDA_ERROR_UNKNOWN};
use std::ffi::c_int;
use std::sync::OnceLock;

/// The settings, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Switches {
    /// `H5GDS_EMU_DEVICES`: devices present (0 = none: `cuInit` fails with NO_DEVICE).
    pub devices: c_int,
    /// `H5GDS_EMU_INIT_ERROR`: `cuInit` fails with this code (0 or unset: no injection).
    pub init_error: Option<CUresult>,
    /// `H5GDS_EMU_GDS`: whether a GDS kernel path (nvidia-fs, or PCI P2PDMA) is "present".
    pub gds: bool,
    /// `H5GDS_EMU_GDS=p2pdma`: that path is PCI P2PDMA, without nvidia-fs.
    pub p2pdma: bool,
    /// `H5GDS_EMU_GDS_TARGETS`: the `CUfileDriverStatusFlags` bits cuFile reports.
    pub gds_targets: u32,
    /// `H5GDS_EMU_CUFILE_OPEN_ERROR`: `cuFileDriverOpen` fails with this `CUfileOpError`.
    pub cufile_open_error: Option<u32>,
    /// `H5GDS_EMU_CUFILE_OPEN_MS`: what opening the cuFile driver costs, in milliseconds.
    pub cufile_open_ms: u64,
    /// `H5GDS_EMU_CUFILE_REGISTER_ERROR`: `cuFileHandleRegister` fails with this `CUfileOpError`
    /// for every file (a VM whose disk cuFile cannot read the attributes of: 5027).
    pub cufile_register_error: Option<u32>,
    /// `H5GDS_EMU_FAIL_ALLOC`: the Nth allocation (device and pinned host, from 1) fails.
    pub fail_alloc: Option<u64>,
    /// `H5GDS_EMU_FAIL_IO`: the Nth `cuFileRead`/`cuFileWrite` (from 1) fails with -1/errno.
    pub fail_io: Option<u64>,
    /// `H5GDS_EMU_FAIL_IO_ERRNO`: the errno of that failure.
    pub fail_io_errno: c_int,
    /// `H5GDS_EMU_SHORT_IO`: cuFile transfers move at most this many bytes per call.
    pub short_io: Option<usize>,
    /// `H5GDS_EMU_FAIL_COPY`: the Nth `cuMemcpy*` call (from 1) fails.
    pub fail_copy: Option<u64>,
    /// `H5GDS_EMU_FAIL_COPY_ERROR`: the `CUresult` of that failure.
    pub fail_copy_error: CUresult,
    /// `H5GDS_EMU_POISON`: byte written over fresh allocations, `None` = leave them zeroed.
    pub poison: Option<u8>,
    /// `H5GDS_EMU_TRACE`: one stderr line per call.
    pub trace: bool,
    /// `H5GDS_EMU_DEFER_ASYNC`: async copies between device and pinned host memory run only
    /// when their stream is synchronized (a real GPU may run them any time before then).
    pub defer_async: bool,
    /// `H5GDS_EMU_POOLS`: devices report stream-ordered pool support.
    pub pools: bool,
    /// `H5GDS_EMU_STICKY_ERROR`: the Nth `cuPointerGetAttributes` (from 1) fails with
    /// CUDA_ERROR_ILLEGAL_ADDRESS, and every call after it.
    pub sticky_error: Option<u64>,
    /// `H5GDS_EMU_CUFILE_IO_ERROR`: every `cuFileRead`/`cuFileWrite` of device memory returns
    /// this `CUfileOpError`, negated.
    pub cufile_io_error: Option<u32>,
    /// `H5GDS_EMU_REFUSE_STRIDED_DTOD`: 2-D and 3-D copies within device memory fail with
    /// CUDA_ERROR_INVALID_VALUE, as CUDA says they "may" for pitches not from cuMemAllocPitch.
    pub refuse_strided_dtod: bool,
    /// `H5GDS_EMU_LINK_GBPS`: the modelled rates of the host-device link (`timeline`); `None`:
    /// copies cost only what moving their bytes here costs.
    pub link: Option<LinkRates>,
}

impl Default for Switches {
    fn default() -> Self {
        Switches {
            devices: 1,
            init_error: None,
            gds: true,
            p2pdma: false,
            gds_targets: DEFAULT_GDS_TARGETS,
            cufile_open_error: None,
            cufile_open_ms: 0,
            cufile_register_error: None,
            fail_alloc: None,
            fail_io: None,
            fail_io_errno: libc::EIO,
            short_io: None,
            fail_copy: None,
            fail_copy_error: CUDA_ERROR_UNKNOWN,
            poison: Some(DEFAULT_POISON),
            trace: false,
            defer_async: false,
            pools: false,
            sticky_error: None,
            cufile_io_error: None,
            refuse_strided_dtod: false,
            link: None,
        }
    }
}

/// The longest `H5GDS_EMU_CUFILE_OPEN_MS` accepted (a minute): a cost, never a hang.
pub const MAX_CUFILE_OPEN_MS: u64 = 60_000;

/// The byte fresh allocations are filled with unless `H5GDS_EMU_POISON` says otherwise.
pub const DEFAULT_POISON: u8 = 0xA5;

/// The switches of this process, read from the environment on first use.
pub fn get() -> &'static Switches {
    static SWITCHES: OnceLock<Switches> = OnceLock::new();
    SWITCHES.get_or_init(|| {
        let (switches, complaints) = Switches::parse(|key| std::env::var(key).ok());
        for complaint in complaints {
            crate::stderr::stderr_line(&format!("h5gds-emu: {complaint}"));
        }
        switches
    })
}

impl Switches {
    /// Parses the switches from `lookup` (an environment). Returns them and one complaint per
    /// value that was ignored.
    pub fn parse(lookup: impl Fn(&str) -> Option<String>) -> (Switches, Vec<String>) {
        let mut out = Switches::default();
        let mut complaints = Vec::new();
        let mut read = |key: &str, accept: &dyn Fn(&str) -> bool| -> Option<String> {
            let value = lookup(key)?;
            let value = value.trim().to_string();
            if accept(&value) {
                Some(value)
            } else {
                complaints.push(format!("ignoring invalid {key}={value:?}"));
                None
            }
        };
        let positive = |v: &str| v.parse::<u64>().is_ok_and(|n| n > 0);
        let int = |v: &str| v.parse::<c_int>().is_ok();

        if let Some(v) = read("H5GDS_EMU_DEVICES", &|v| {
            v.parse::<c_int>().is_ok_and(|n| (0..=64).contains(&n))
        }) {
            out.devices = v.parse().unwrap_or(1);
        }
        if let Some(v) = read("H5GDS_EMU_INIT_ERROR", &int) {
            out.init_error = v.parse().ok().filter(|&code: &CUresult| code != 0);
        }
        if let Some(v) = read("H5GDS_EMU_GDS", &|v| matches!(v, "0" | "1" | "p2pdma")) {
            out.gds = v != "0";
            out.p2pdma = v == "p2pdma";
        }
        if let Some(v) = read("H5GDS_EMU_GDS_TARGETS", &|v| parse_targets(v).is_some()) {
            out.gds_targets = parse_targets(&v).unwrap_or(DEFAULT_GDS_TARGETS);
        }
        if let Some(v) = read("H5GDS_EMU_CUFILE_OPEN_ERROR", &|v| v.parse::<u32>().is_ok()) {
            out.cufile_open_error = v.parse().ok().filter(|&code: &u32| code != 0);
        }
        if let Some(v) = read("H5GDS_EMU_CUFILE_OPEN_MS", &|v| {
            v.parse::<u64>().is_ok_and(|ms| ms <= MAX_CUFILE_OPEN_MS)
        }) {
            out.cufile_open_ms = v.parse().unwrap_or(0);
        }
        if let Some(v) = read("H5GDS_EMU_CUFILE_REGISTER_ERROR", &|v| {
            v.parse::<u32>().is_ok()
        }) {
            out.cufile_register_error = v.parse().ok().filter(|&code: &u32| code != 0);
        }
        if let Some(v) = read("H5GDS_EMU_FAIL_ALLOC", &positive) {
            out.fail_alloc = v.parse().ok();
        }
        if let Some(v) = read("H5GDS_EMU_FAIL_IO", &positive) {
            out.fail_io = v.parse().ok();
        }
        if let Some(v) = read("H5GDS_EMU_FAIL_IO_ERRNO", &|v| {
            v.parse::<c_int>().is_ok_and(|e| e > 0)
        }) {
            out.fail_io_errno = v.parse().unwrap_or(libc::EIO);
        }
        if let Some(v) = read("H5GDS_EMU_SHORT_IO", &|v| {
            v.parse::<usize>().is_ok_and(|n| n > 0)
        }) {
            out.short_io = v.parse().ok();
        }
        if let Some(v) = read("H5GDS_EMU_FAIL_COPY", &positive) {
            out.fail_copy = v.parse().ok();
        }
        if let Some(v) = read("H5GDS_EMU_FAIL_COPY_ERROR", &|v| {
            v.parse::<CUresult>().is_ok_and(|code| code != 0)
        }) {
            out.fail_copy_error = v.parse().unwrap_or(CUDA_ERROR_UNKNOWN);
        }
        if let Some(v) = read("H5GDS_EMU_POISON", &|v| {
            v == "off" || v.parse::<u8>().is_ok() || parse_hex_byte(v).is_some()
        }) {
            out.poison = if v == "off" {
                None
            } else {
                v.parse::<u8>().ok().or_else(|| parse_hex_byte(&v))
            };
        }
        if let Some(v) = read("H5GDS_EMU_TRACE", &|v| v == "0" || v == "1") {
            out.trace = v == "1";
        }
        if let Some(v) = read("H5GDS_EMU_DEFER_ASYNC", &|v| v == "0" || v == "1") {
            out.defer_async = v == "1";
        }
        if let Some(v) = read("H5GDS_EMU_POOLS", &|v| v == "0" || v == "1") {
            out.pools = v == "1";
        }
        if let Some(v) = read("H5GDS_EMU_STICKY_ERROR", &positive) {
            out.sticky_error = v.parse().ok();
        }
        if let Some(v) = read("H5GDS_EMU_CUFILE_IO_ERROR", &|v| {
            v.parse::<u32>().is_ok_and(|code| code > 5000)
        }) {
            out.cufile_io_error = v.parse().ok();
        }
        if let Some(v) = read("H5GDS_EMU_REFUSE_STRIDED_DTOD", &|v| v == "0" || v == "1") {
            out.refuse_strided_dtod = v == "1";
        }
        if let Some(v) = read("H5GDS_EMU_LINK_GBPS", &|v| LinkRates::parse(v).is_some()) {
            out.link = LinkRates::parse(&v);
        }
        (out, complaints)
    }
}

/// The link's modelled rates, bytes per second (`H5GDS_EMU_LINK_GBPS=pinned[,pageable]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkRates {
    /// Copies with pinned host memory, and cuFile transfers of device memory.
    pub pinned: u64,
    /// Copies with pageable host memory (the driver stages them through its own pinned buffers).
    pub pageable: u64,
}

impl LinkRates {
    /// `pinned[,pageable]` in GB/s (10^9 bytes/s), each a positive number; pageable defaults to
    /// the pinned rate.
    pub fn parse(v: &str) -> Option<LinkRates> {
        let rate = |s: &str| {
            let gbps: f64 = s.trim().parse().ok()?;
            let bytes = gbps * 1e9;
            (gbps.is_finite() && bytes >= 1.0 && bytes < u64::MAX as f64).then_some(bytes as u64)
        };
        let mut parts = v.split(',');
        let pinned = rate(parts.next()?)?;
        let pageable = match parts.next() {
            Some(p) => rate(p)?,
            None => pinned,
        };
        parts
            .next()
            .is_none()
            .then_some(LinkRates { pinned, pageable })
    }
}

/// The storage names of `H5GDS_EMU_GDS_TARGETS`, and their `CUfileDriverStatusFlags` bits.
pub const GDS_TARGET_NAMES: [(&str, u32); 8] = [
    ("lustre", 0),
    ("wekafs", 1),
    ("nfs", 2),
    ("gpfs", 3),
    ("nvme", 4),
    ("nvmeof", 5),
    ("scsi", 6),
    ("beegfs", 9),
];

/// What cuFile reports by default: local NVMe, NVMe-oF and SCSI devices.
pub const DEFAULT_GDS_TARGETS: u32 = 1 << 4 | 1 << 5 | 1 << 6;

/// A comma-separated list of target names (or `none`) as flag bits.
fn parse_targets(v: &str) -> Option<u32> {
    if v == "none" {
        return Some(0);
    }
    v.split(',').try_fold(0u32, |bits, name| {
        let (_, bit) = GDS_TARGET_NAMES.iter().find(|(n, _)| *n == name.trim())?;
        Some(bits | 1 << bit)
    })
}

/// `0xNN` (case-insensitive) as a byte.
fn parse_hex_byte(v: &str) -> Option<u8> {
    let digits = v.strip_prefix("0x").or_else(|| v.strip_prefix("0X"))?;
    u8::from_str_radix(digits, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn parse(pairs: &[(&str, &str)]) -> (Switches, Vec<String>) {
        let env: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Switches::parse(|key| env.get(key).cloned())
    }

    #[test]
    fn defaults_when_nothing_is_set() {
        let (s, complaints) = parse(&[]);
        assert_eq!(s, Switches::default());
        assert!(complaints.is_empty());
        assert_eq!(s.devices, 1);
        assert!(s.gds);
        assert_eq!(s.fail_io_errno, libc::EIO);
        assert_eq!(s.poison, Some(0xA5));
    }

    #[test]
    fn every_switch_parses() {
        let (s, complaints) = parse(&[
            ("H5GDS_EMU_DEVICES", "3"),
            ("H5GDS_EMU_INIT_ERROR", "100"),
            ("H5GDS_EMU_GDS", "p2pdma"),
            ("H5GDS_EMU_GDS_TARGETS", "nfs,nvme"),
            ("H5GDS_EMU_CUFILE_OPEN_ERROR", "5001"),
            ("H5GDS_EMU_CUFILE_OPEN_MS", "470"),
            ("H5GDS_EMU_CUFILE_REGISTER_ERROR", "5027"),
            ("H5GDS_EMU_FAIL_ALLOC", "2"),
            ("H5GDS_EMU_FAIL_IO", "4"),
            ("H5GDS_EMU_FAIL_IO_ERRNO", "28"),
            ("H5GDS_EMU_SHORT_IO", "4096"),
            ("H5GDS_EMU_FAIL_COPY", "5"),
            ("H5GDS_EMU_FAIL_COPY_ERROR", "700"),
            ("H5GDS_EMU_POISON", "0x5a"),
            ("H5GDS_EMU_TRACE", "1"),
            ("H5GDS_EMU_DEFER_ASYNC", "1"),
            ("H5GDS_EMU_POOLS", "1"),
            ("H5GDS_EMU_STICKY_ERROR", "2"),
            ("H5GDS_EMU_CUFILE_IO_ERROR", "5008"),
            ("H5GDS_EMU_REFUSE_STRIDED_DTOD", "1"),
            ("H5GDS_EMU_LINK_GBPS", "55.4,7.6"),
        ]);
        assert!(complaints.is_empty(), "{complaints:?}");
        assert_eq!(
            s,
            Switches {
                devices: 3,
                init_error: Some(100),
                gds: true,
                p2pdma: true,
                gds_targets: 1 << 2 | 1 << 4,
                cufile_open_error: Some(5001),
                cufile_open_ms: 470,
                cufile_register_error: Some(5027),
                fail_alloc: Some(2),
                fail_io: Some(4),
                fail_io_errno: 28,
                short_io: Some(4096),
                fail_copy: Some(5),
                fail_copy_error: 700,
                poison: Some(0x5a),
                trace: true,
                defer_async: true,
                pools: true,
                sticky_error: Some(2),
                cufile_io_error: Some(5008),
                refuse_strided_dtod: true,
                link: Some(LinkRates {
                    pinned: 55_400_000_000,
                    pageable: 7_600_000_000,
                }),
            }
        );
    }

    #[test]
    fn rates_parse_as_gigabytes_per_second() {
        let both = LinkRates::parse("55.4,7.6").unwrap();
        assert_eq!(both.pinned, 55_400_000_000);
        assert_eq!(both.pageable, 7_600_000_000);
        let one = LinkRates::parse("2").unwrap();
        assert_eq!((one.pinned, one.pageable), (2_000_000_000, 2_000_000_000));
        for bad in ["", "0", "-1", "fast", "1,2,3", "inf", "NaN", "1,", "1e-10"] {
            assert_eq!(LinkRates::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn invalid_values_are_reported_and_ignored() {
        let (s, complaints) = parse(&[
            ("H5GDS_EMU_DEVICES", "many"),
            ("H5GDS_EMU_GDS", "yes"),
            ("H5GDS_EMU_SHORT_IO", "0"),
            ("H5GDS_EMU_FAIL_IO", "0"),
            ("H5GDS_EMU_CUFILE_OPEN_MS", "3600000"),
            ("H5GDS_EMU_LINK_GBPS", "0"),
        ]);
        assert_eq!(s, Switches::default());
        assert_eq!(complaints.len(), 6, "{complaints:?}");
        assert!(complaints[0].contains("H5GDS_EMU_DEVICES"));
    }

    #[test]
    fn zero_codes_mean_no_injection_and_poison_can_be_switched_off() {
        let (s, complaints) = parse(&[
            ("H5GDS_EMU_INIT_ERROR", "0"),
            ("H5GDS_EMU_CUFILE_OPEN_ERROR", "0"),
            ("H5GDS_EMU_POISON", "off"),
            ("H5GDS_EMU_DEVICES", "0"),
        ]);
        assert!(complaints.is_empty());
        assert_eq!(s.init_error, None);
        assert_eq!(s.cufile_open_error, None);
        assert_eq!(s.poison, None);
        assert_eq!(s.devices, 0);
    }
}
