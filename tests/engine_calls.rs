//! The engine's dataset calls driven directly over the linked HDF5 (array-io's table), as the
//! faces drive them: the checked transfer (`engine::transfer::prepare`), the checked gather of
//! runs of rows (`prepare_gather_in_groups`), and the gathers of a read-only file's dataset with
//! no HDF5 call (`engine::stored::Stored::{gather, gather_in_place}`), and the facts the engine
//! asks of a dataset (`engine::facts`). Every wrong argument is an error naming it, with nothing
//! read.

use array_io::hdf5_raw::{self, linked_hdf5, locked, FileDriver};
use h5gds_chunk_codec::Hyperslab;
use h5gds_engine::facts::{self, StoredLayout};
use h5gds_engine::rows::RowPlan;
use h5gds_engine::stored::{self, Stored, StoredError};
use h5gds_engine::transfer::{self, GatherRead, Transfer};
use h5gds_engine::{Error, ErrorKind};
use h5gds_runtime::hdf5::Hdf5Error;
use hdf5::dataset::Layout;
use hdf5::plist::DatasetAccess;
use hdf5::{Dataset, Datatype, File};
use std::path::Path;
use std::process::Command;

/// A file created with sec2, or with the in-process `gds` driver.
fn create(path: &Path, gds: bool) -> File {
    let driver = match gds {
        true => FileDriver::Registered(array_io::gds_driver().expect("the gds driver").0),
        false => FileDriver::Sec2,
    };
    let fapl = hdf5_raw::file_access(&driver).expect("a file access list");
    hdf5_raw::create_file(path, &fapl).expect("the file")
}

/// Dataset `name` of `shape` holding `values`.
fn dataset(file: &File, name: &str, shape: &[usize], values: &[f64]) -> Dataset {
    let data = ndarray::ArrayD::from_shape_vec(shape.to_vec(), values.to_vec()).unwrap();
    file.new_dataset_builder()
        .with_data(&data)
        .create(name)
        .expect("the dataset")
}

/// `arange(n) * 1.5 - 7`, the values the Python tests write.
fn reference(n: usize) -> Vec<f64> {
    (0..n).map(|k| k as f64 * 1.5 - 7.0).collect()
}

fn f8() -> Datatype {
    Datatype::from_type::<f64>().unwrap()
}

/// The refusal's message, where `result` is a refusal of the caller's arguments.
fn refused<T>(result: Result<T, Error>) -> String {
    match result {
        Err(e) if e.kind() == ErrorKind::InvalidArgument => e.to_string(),
        Err(e) => panic!("HDF5 failed instead of a refusal: {e}"),
        Ok(_) => panic!("accepted"),
    }
}

const SHAPE: [u64; 3] = [12, 9, 5];

/// One transfer of `SHAPE`'s selection `start`, `step`, `count` as `mem_shape`, read into `buf`
/// (of `nbytes` as the caller claims), checked and run under HDF5's lock.
struct Read<'a> {
    dataset: i64,
    mem_type: i64,
    start: &'a [u64],
    step: &'a [u64],
    count: &'a [u64],
    mem_shape: &'a [u64],
    nbytes: usize,
}

impl Read<'_> {
    fn run(&self, buf: &mut [f64]) -> Result<(), Error> {
        let transfer = Transfer {
            write: false,
            dataset: self.dataset,
            mem_type: self.mem_type,
            start: self.start,
            step: self.step,
            count: self.count,
            mem_shape: self.mem_shape,
            buffer: buf.as_mut_ptr() as usize,
            nbytes: self.nbytes,
        };
        locked(|| {
            let Some(prepared) = transfer::prepare(linked_hdf5(), &transfer)? else {
                return Ok(());
            };
            // SAFETY: `buf` holds `nbytes` writable bytes, checked against the selection by
            // `prepare` (the refusals below claim other sizes and are refused there).
            unsafe { prepared.run() }.map_err(Error::hdf5)
        })
    }
}

#[test]
fn a_transfer_checks_every_id_and_size_before_hdf5_sees_a_pointer() {
    let dir = tempfile::tempdir().unwrap();
    let file = create(&dir.path().join("e.h5"), false);
    let elements = SHAPE.iter().product::<u64>() as usize;
    let want = reference(elements);
    let dset = dataset(&file, "x", &[12, 9, 5], &want);
    let (f8, root) = (f8(), file.group("/").unwrap());
    let mut buf = vec![0.0f64; elements];
    let full = Read {
        dataset: dset.id(),
        mem_type: f8.id(),
        start: &[0, 0, 0],
        step: &[1, 1, 1],
        count: &SHAPE,
        mem_shape: &SHAPE,
        nbytes: elements * 8,
    };
    full.run(&mut buf).unwrap();
    assert_eq!(buf, want);
    buf.fill(0.0);
    let cases: [(Read, Option<&str>); 11] = [
        (
            Read {
                dataset: 123456789,
                ..full
            },
            Some("is not an open dataset"),
        ),
        (
            Read {
                dataset: root.id(),
                ..full
            },
            Some("is not an open dataset"),
        ),
        (
            Read {
                mem_type: dset.id(),
                ..full
            },
            Some("not a datatype"),
        ),
        (
            Read {
                nbytes: elements * 8 + 8,
                ..full
            },
            Some("the buffer has 4328 bytes, the selection needs 4320"),
        ),
        (
            Read {
                count: &[12, 9, 6],
                ..full
            },
            Some("selection out of range on axis 2"),
        ),
        (
            Read {
                start: &[11, 0, 0],
                count: &[2, 9, 5],
                mem_shape: &[2, 9, 5],
                ..full
            },
            Some("selection out of range on axis 0"),
        ),
        (
            Read {
                step: &[0, 1, 1],
                ..full
            },
            Some("selection out of range on axis 0"),
        ),
        (
            Read {
                start: &[1 << 63, 0, 0],
                step: &[1 << 63, 1, 1],
                count: &[3, 9, 5],
                ..full
            },
            Some("selection out of range"),
        ),
        (
            Read {
                count: &[12, 9],
                ..full
            },
            Some("the selection has 2 axes, the dataset 3"),
        ),
        // Another shape of the same element count is fine.
        (
            Read {
                mem_shape: &[12, 45],
                ..full
            },
            None,
        ),
        (
            Read {
                mem_shape: &[12, 9, 4],
                ..full
            },
            Some("does not hold the 540 elements"),
        ),
    ];
    for (read, message) in cases {
        match message {
            None => {
                read.run(&mut buf).unwrap();
                assert_eq!(buf, want);
            }
            Some(message) => {
                let got = refused(read.run(&mut buf));
                assert!(got.contains(message), "{got:?} does not say {message:?}");
            }
        }
    }
    assert_eq!(dset.read_raw::<f64>().unwrap(), want, "the dataset changed");
}

/// The gather of `plan`'s rows (each `rest` of the other axis) of `dataset` into `out` (of
/// `nbytes` as the caller claims), `runs_per_read` runs a read (0: one read), under HDF5's lock.
fn gather(
    dataset: &Dataset,
    plan: &RowPlan,
    rest: [&[u64]; 3],
    out: &mut [f64],
    nbytes: usize,
    runs_per_read: usize,
) -> Result<(), Error> {
    let f8 = f8();
    let read = GatherRead {
        dataset: dataset.id(),
        mem_type: f8.id(),
        runs: plan.runs(),
        rest_start: rest[0],
        rest_step: rest[1],
        rest_count: rest[2],
        buffer: out.as_mut_ptr() as usize,
        nbytes,
    };
    locked(|| {
        let reads = transfer::prepare_gather_in_groups(linked_hdf5(), &read, runs_per_read)?;
        reads.iter().try_for_each(|prepared| {
            // SAFETY: `out` holds `nbytes` writable bytes, each group's part checked against
            // its selection by `prepare_gather_in_groups` (the refusals claim other sizes).
            unsafe { prepared.run() }.map_err(Error::hdf5)
        })
    })
}

#[test]
fn a_gather_checks_its_runs_and_buffer_before_hdf5_sees_a_pointer() {
    for gds in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let file = create(&dir.path().join("data.h5"), gds);
        let values = reference(20);
        let dset = dataset(&file, "x", &[10, 2], &values);
        let plan = RowPlan::of(&[3, 4, 8], 10).unwrap();
        let mut out = vec![-1.0f64; 6];
        let all: [&[u64]; 3] = [&[0], &[1], &[2]];
        let message = refused(gather(&dset, &plan, all, &mut out, 40, 0));
        assert_eq!(
            message,
            "the buffer has 40 bytes, not a whole number of rows for the 3 rows of the gather"
        );
        let message = refused(gather(&dset, &plan, [&[1], &[1], &[2]], &mut out, 48, 0));
        assert_eq!(
            message,
            "selection out of range on axis 1: start 1, step 1, count 2 for a size of 2"
        );
        let wider = RowPlan::of(&[3, 4, 8], 100).unwrap();
        let small = dataset(&file, "small", &[5, 2], &[0.0; 10]);
        let message = refused(gather(&small, &wider, all, &mut out, 48, 0));
        assert_eq!(
            message,
            "rows 8..9 are not a run after row 5 inside the first axis of size 5"
        );
        assert!(out.iter().all(|&v| v == -1.0));
        let message = refused(gather(&dset, &plan, all, &mut out, 24, 1));
        assert_eq!(
            message,
            "the buffer has 16 bytes, the gather needs 32 (4 elements of 8 bytes)"
        );
        assert!(out.iter().all(|&v| v == -1.0));
        let rows: Vec<f64> = [3, 4, 8]
            .iter()
            .flat_map(|&row| values[row * 2..row * 2 + 2].to_vec())
            .collect();
        gather(&dset, &plan, all, &mut out, 48, 0).unwrap();
        assert_eq!(out, rows, "gds: {gds}");
        out.fill(-1.0);
        gather(&dset, &plan, all, &mut out, 48, 1).unwrap(); // a read per run
        assert_eq!(out, rows, "gds: {gds}");
    }
}

/// The datasets of python/tests/test_lock_free_reads.py's `files`, written by h5py (hdf5plugin
/// for Zstandard and LZ4): every layout the engine serves.
const LAYOUTS_PY: &str = r#"
import sys, h5py, hdf5plugin, numpy as np
def data(shape, dtype="<f4"):
    n = np.arange(np.prod(shape))
    return (n % 1000 + n // 7).astype(dtype).reshape(shape)
x = data((100, 12))
with h5py.File(sys.argv[1], "w") as f:
    f.create_dataset("contiguous", data=x)
    f.create_dataset("chunked", data=x, chunks=(8, 5))
    f.create_dataset("gzip", data=x, chunks=(8, 12), compression="gzip", shuffle=True)
    f.create_dataset("zstd", data=x, chunks=(16, 6), **hdf5plugin.Zstd())
    f.create_dataset("ints", data=data((100, 12), "<i2"), chunks=(10, 12), **hdf5plugin.LZ4())
    f.create_dataset("big_endian", data=data((100, 12), ">f8"))
    f.create_dataset("cube", data=data((9, 10, 11)), chunks=(4, 3, 5), compression="gzip")
    f.create_dataset("cube_contiguous", data=data((9, 10, 11)))
"#;

/// Each dataset's name, shape and the stored bytes of element `k` (`k % 1000 + k / 7` in its
/// type and byte order).
#[allow(clippy::type_complexity)]
const LAYOUTS: [(&str, &[u64], fn(u64) -> Vec<u8>); 8] = [
    ("big_endian", &[100, 12], |k| {
        (value(k) as f64).to_be_bytes().to_vec()
    }),
    ("chunked", &[100, 12], f4),
    ("contiguous", &[100, 12], f4),
    ("cube", &[9, 10, 11], f4),
    ("cube_contiguous", &[9, 10, 11], f4),
    ("gzip", &[100, 12], f4),
    ("ints", &[100, 12], |k| {
        (value(k) as i16).to_le_bytes().to_vec()
    }),
    ("zstd", &[100, 12], f4),
];

fn value(k: u64) -> u64 {
    k % 1000 + k / 7
}

fn f4(k: u64) -> Vec<u8> {
    (value(k) as f32).to_le_bytes().to_vec()
}

/// Held while a child process is started and runs, and by a test that closes a file and opens
/// it again: HDF5's sec2 opens files without `O_CLOEXEC`, so a child started meanwhile holds the
/// file's descriptor, and with it the file's lock, and the second open fails (errno 11).
static CHILDREN_OR_REOPENS: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn children_or_reopens() -> std::sync::MutexGuard<'static, ()> {
    CHILDREN_OR_REOPENS
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The file of [`LAYOUTS`], written by the project's Python (h5py, hdf5plugin).
fn layouts_file(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("d.h5");
    let python = h5gds_tests::python::python();
    let _alone = children_or_reopens();
    let run = Command::new(&python)
        .args(["-c", LAYOUTS_PY])
        .arg(&path)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", python.display()));
    assert!(
        run.status.success(),
        "writing the datasets failed: {}",
        String::from_utf8_lossy(&run.stderr)
    );
    path
}

/// Dataset `name` of the read-only file `file` as the engine resolves it over the linked HDF5,
/// for reads into its own type (as the extension's `Layout.resolve` and array-io's `stored`).
fn resolve(file: &File, name: &str, shape: &[u64]) -> Stored {
    let dset = file.dataset(name).unwrap();
    let dtype = dset.dtype().unwrap();
    let api = linked_hdf5();
    let (id, element) = (dset.id(), dtype.size());
    locked(|| {
        let facts = h5gds_engine::facts::dataset_facts(api, id, dtype.id()).unwrap();
        assert!(facts.same_type, "{name}");
        let direct = stored::direct_file(api, id).expect("the file, opened anew");
        let index = |chunk: &[u64]| h5gds_engine::chunks::index(api, id, chunk);
        let resolved = Stored::resolve(
            name.into(),
            direct,
            shape.to_vec(),
            element,
            facts.layout,
            index,
            |_| {},
        );
        resolved
            .unwrap()
            .unwrap_or_else(|| panic!("{name}: not served"))
    })
}

/// The stored bytes of `rows` (each whole, `row` elements) of a dataset of `bytes`' elements.
fn rows_of(rows: &[u64], row: u64, bytes: fn(u64) -> Vec<u8>) -> Vec<u8> {
    rows.iter()
        .flat_map(|&r| (r * row..(r + 1) * row).flat_map(bytes))
        .collect()
}

/// `n` pseudo-random rows below `below` (repeats and any order).
fn random_rows(seed: u64, n: usize, below: u64) -> Vec<u64> {
    let mut state = seed;
    (0..n)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (state >> 33) % below
        })
        .collect()
}

/// All of the axes after the first of `shape`: (start, step, count).
fn whole_rows(shape: &[u64]) -> (Vec<u64>, Vec<u64>, Vec<u64>) {
    let rest = shape.len() - 1;
    (vec![0; rest], vec![1; rest], shape[1..].to_vec())
}

const THREADS: stored::Threads<'static> = &|| Ok(4);

#[test]
fn the_distinct_rows_of_every_layout_are_gathered_with_no_hdf5_call() {
    let dir = tempfile::tempdir().unwrap();
    let path = layouts_file(dir.path());
    let file = hdf5_raw::open_file(&path, &hdf5_raw::file_access(&FileDriver::Sec2).unwrap());
    let file = file.unwrap();
    for (seed, (name, shape, bytes)) in LAYOUTS.into_iter().enumerate() {
        let stored = resolve(&file, name, shape);
        let mut distinct = random_rows(seed as u64 + 7, 30, shape[0]);
        distinct.sort_unstable();
        distinct.dedup();
        let plan = RowPlan::of(&distinct, shape[0]).unwrap();
        let (start, step, count) = whole_rows(shape);
        let rest = Hyperslab {
            start: &start,
            step: &step,
            count: &count,
        };
        let row: u64 = count.iter().product();
        let want = rows_of(&distinct, row, bytes);
        let mut out = vec![0u8; want.len()];
        let served = stored.gather(
            plan.runs(),
            plan.distinct() as u64,
            &rest,
            &mut out,
            THREADS,
        );
        assert!(served.unwrap(), "{name}: left to HDF5");
        assert!(out == want, "{name}: other bytes than the file's");
    }
}

#[test]
fn whole_rows_of_contiguous_datasets_are_gathered_straight_into_the_callers_order() {
    let dir = tempfile::tempdir().unwrap();
    let path = layouts_file(dir.path());
    let file = hdf5_raw::open_file(&path, &hdf5_raw::file_access(&FileDriver::Sec2).unwrap());
    let file = file.unwrap();
    const UNTOUCHED: u8 = 0xA5;
    for (seed, (name, shape, bytes)) in LAYOUTS.into_iter().enumerate() {
        let stored = resolve(&file, name, shape);
        let (start, step, count) = whole_rows(shape);
        let rest = Hyperslab {
            start: &start,
            step: &step,
            count: &count,
        };
        let row: u64 = count.iter().product();
        let row_bytes = bytes(0).len() * row as usize;
        // Random order, repeats, neighbours in the caller's order (4, 5, 6) and out of it (8
        // then 7).
        let last = shape[0] - 1;
        for rows in [
            random_rows(seed as u64 + 8, 40, shape[0]),
            vec![4, 5, 6, 8, 7, 4, 4, last],
        ] {
            let plan = RowPlan::of(&rows, shape[0]).unwrap();
            let mut out = vec![UNTOUCHED; rows.len() * row_bytes];
            let runs = plan.caller_runs();
            let served = stored.gather_in_place(runs, plan.len() as u64, &rest, &mut out, THREADS);
            // Whole rows of contiguous datasets only: chunked ones go through `gather` and a
            // scatter.
            let contiguous = ["contiguous", "big_endian", "cube_contiguous"].contains(&name);
            assert_eq!(served.unwrap(), contiguous, "{name}");
            if contiguous {
                assert!(out == rows_of(&rows, row, bytes), "{name}: {rows:?}");
            } else {
                assert!(out.iter().all(|&b| b == UNTOUCHED), "{name}: written");
            }
        }
        let plan = RowPlan::of(&[3, 1], shape[0]).unwrap();
        if shape.len() > 1 {
            // Part of each row: not in place, nothing read.
            let part_count: Vec<u64> = [1].iter().chain(&shape[2..]).copied().collect();
            let part = Hyperslab {
                count: &part_count,
                ..rest
            };
            let part_bytes = part_count.iter().product::<u64>() as usize * bytes(0).len();
            let mut out = vec![UNTOUCHED; 2 * part_bytes];
            let served = stored.gather_in_place(plan.caller_runs(), 2, &part, &mut out, THREADS);
            assert!(!served.unwrap(), "{name}: part of each row read in place");
            assert!(out.iter().all(|&b| b == UNTOUCHED), "{name}: written");
        }
        let plan = RowPlan::of(&[2, 1], shape[0]).unwrap();
        let mut out = vec![UNTOUCHED; 3];
        match stored.gather_in_place(plan.caller_runs(), 2, &rest, &mut out, THREADS) {
            Err(StoredError::Invalid(message)) => {
                assert!(message.contains("not a whole number of rows"), "{message}")
            }
            other => panic!(
                "{name}: a buffer of 3 bytes for 2 rows: {:?}",
                other.map_err(|e| e.to_string())
            ),
        }
    }
}

/// hdf5-metno's lock on the linked HDF5, per call, as array-io gives it to the dataset handle.
struct Metno;

impl h5gds_engine::Hdf5Lock for Metno {
    fn call<T>(call: impl FnOnce() -> T) -> T {
        locked(call)
    }
}

/// The bytes of `values`.
fn bytes(values: &[f64]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_ne_bytes()).collect()
}

#[test]
fn the_dataset_handle_writes_then_reads_every_selection_with_and_without_hdf5() {
    use h5gds_engine::{Dataset as Handle, Kept, Selection};
    let _alone = children_or_reopens();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("handle.h5");
    let n = SHAPE.iter().product::<u64>() as usize;
    let values = reference(n);
    let shape: Vec<usize> = SHAPE.iter().map(|&d| d as usize).collect();
    let file = create(&path, false);
    let dset = dataset(&file, "x", &shape, &vec![0.0; n]);
    let (id, api, f8) = (dset.id(), linked_hdf5(), f8());
    let handle = Handle::new(api, id, f8.id(), 8, Metno).named("/x");
    let all = Hyperslab {
        start: &[0, 0, 0],
        step: &[1, 1, 1],
        count: &SHAPE,
    };
    handle.write(all, &bytes(&values)).unwrap();
    // A buffer of another size is refused, naming both sizes.
    assert!(refused(handle.write(all, &bytes(&values[1..]))).contains("the buffer has"));
    // A writable file: no storage to read with no HDF5 call; every read through HDF5.
    assert!(!handle.reads_stored().unwrap());
    let read = |handle: &Handle<Metno>, sel: Selection, len: usize| {
        let mut out = vec![0u8; len * 8];
        handle.read(sel, &mut out).unwrap();
        out
    };
    assert_eq!(read(&handle, Selection::All, n), bytes(&values));
    let slab = Hyperslab {
        start: &[1, 2, 0],
        step: &[3, 2, 1],
        count: &[3, 2, 5],
    };
    let at = |i: u64, j: u64, k: u64| values[((i * 9 + j) * 5 + k) as usize];
    let expected: Vec<f64> = (0..3)
        .flat_map(|i| (0..2).flat_map(move |j| (0..5).map(move |k| (1 + 3 * i, 2 + 2 * j, k))))
        .map(|(i, j, k)| at(i, j, k))
        .collect();
    assert_eq!(read(&handle, Selection::Slab(slab), 30), bytes(&expected));
    let rows = [7u64, 0, 7, 11];
    let rest = Hyperslab {
        start: &[0, 0],
        step: &[1, 1],
        count: &[9, 5],
    };
    let gathered: Vec<f64> = rows
        .iter()
        .flat_map(|&r| values[(r * 45) as usize..((r + 1) * 45) as usize].to_vec())
        .collect();
    let sel = Selection::Rows { rows: &rows, rest };
    assert_eq!(read(&handle, sel, 4 * 45), bytes(&gathered));
    // A row past the first axis is refused, nothing read.
    let mut out = vec![0u8; 45 * 8];
    let past = Selection::Rows { rows: &[12], rest };
    assert!(refused(handle.read(past, &mut out)).contains("out of range"));
    drop((handle, dset, file));
    // The same file read-only: its storage resolved, the same bytes with no HDF5 call.
    let fapl = hdf5_raw::file_access(&FileDriver::Sec2).unwrap();
    let file = hdf5_raw::open_file(&path, &fapl).unwrap();
    let dset = file.dataset("x").unwrap();
    let kept = Kept::default();
    let handle = Handle::new(api, dset.id(), f8.id(), 8, Metno).named("/x");
    let handle = handle.keeping(&kept);
    assert!(handle.reads_stored().unwrap(), "a read-only file's storage");
    assert_eq!(read(&handle, Selection::All, n), bytes(&values));
    assert_eq!(
        read(&handle, Selection::Rows { rows: &rows, rest }, 4 * 45),
        bytes(&gathered)
    );
    // What is kept reads with no handle: a slab, checked against the dataset first.
    assert_eq!(kept.shape(), Some(&SHAPE[..]));
    let mut out = vec![0u8; 30 * 8];
    assert!(kept.read(slab, &mut out).unwrap());
    assert_eq!(out, bytes(&expected));
    assert!(refused(kept.read(slab, &mut out[8..])).contains("the buffer has 232 bytes"));
    // Nothing kept of a writable file's dataset: no read with no HDF5 call.
    assert!(!Kept::across_calls().read(slab, &mut out).unwrap());
}

/// The engine's one query through the HDF5 array-io links: each layout as HDF5 stores it,
/// the stored element, the file's intent, the name, the dimensions, and a failure's text.
#[test]
fn the_engine_asks_the_linked_hdf5_how_each_dataset_is_stored() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("layouts.h5");
    let sec2 = hdf5_raw::file_access(&FileDriver::Sec2).unwrap();
    let api = linked_hdf5();
    {
        let file = hdf5_raw::create_file(&path, &sec2).unwrap();
        let unwritten = file.new_dataset::<f32>().shape([4, 3]);
        unwritten.create("unwritten").unwrap();
        let written = file.new_dataset_builder().with_data(&[1i16, 2, 3]);
        let written = written.create("written").unwrap();
        let compact = file.new_dataset::<u8>().shape(8).layout(Layout::Compact);
        compact.create("compact").unwrap();
        let external = file.new_dataset::<u8>().shape(8).external("ext.bin", 0, 8);
        external.create("external").unwrap();
        let chunked = file
            .new_dataset::<f64>()
            .shape([4, 6])
            .chunk([2, 3])
            .deflate(4);
        chunked.create("chunked").unwrap();
        assert!(!locked(|| facts::read_only_file(api, written.id())).unwrap());
    }
    let file = hdf5_raw::open_file(&path, &sec2).unwrap();
    let layout = |name: &str| {
        let ds = file.dataset(name).unwrap();
        locked(|| facts::stored_layout(api, ds.id())).unwrap()
    };
    let unallocated = StoredLayout::Contiguous {
        address: None,
        external: false,
    };
    assert_eq!(layout("unwritten"), unallocated);
    let written = layout("written");
    assert!(
        matches!(written, StoredLayout::Contiguous { address: Some(a), external: false } if a > 0),
        "{written:?}"
    );
    assert_eq!(layout("compact"), StoredLayout::Compact);
    let external = layout("external");
    assert!(
        matches!(external, StoredLayout::Contiguous { external: true, .. }),
        "{external:?}"
    );
    // Opened with a chunk cache of its own, which the engine reads from the dataset.
    let dapl = DatasetAccess::build()
        .chunk_cache(521, 3 << 20, 0.5)
        .finish()
        .unwrap();
    let chunked = hdf5_raw::open_dataset(&file, "chunked", &dapl).unwrap();
    let chunked_layout = locked(|| facts::stored_layout(api, chunked.id())).unwrap();
    // Deflate (filter 1) at level 4.
    let expected = StoredLayout::Chunked {
        chunk: vec![2, 3],
        filters: vec![h5gds_chunk_codec::Filter {
            id: 1,
            values: vec![4],
        }],
        cache_bytes: 3 << 20,
    };
    assert_eq!(chunked_layout, expected);
    let (f64_type, f32_type) = (
        Datatype::from_type::<f64>().unwrap(),
        Datatype::from_type::<f32>().unwrap(),
    );
    locked(|| {
        let same = facts::dataset_facts(api, chunked.id(), f64_type.id()).unwrap();
        assert!(same.same_type && same.stored_size == 8);
        let other = facts::dataset_facts(api, chunked.id(), f32_type.id()).unwrap();
        assert!(!other.same_type && other.stored_size == 8);
        assert!(facts::read_only_file(api, chunked.id()).unwrap());
        assert_eq!(
            facts::object_name(api, chunked.id()).as_deref(),
            Some("/chunked")
        );
        assert_eq!(facts::dimensions(api, chunked.id()).unwrap(), [4, 6]);
        // A datatype is no dataset: the failure names the call and carries HDF5's stack.
        let err = facts::stored_layout(api, f64_type.id()).unwrap_err();
        let Hdf5Error::Failed { call, stack } = &err else {
            panic!("{err}");
        };
        assert_eq!(*call, "H5Dget_create_plist");
        assert!(stack.contains("H5Dget_create_plist"), "{stack}");
        // The stack was cleared: the next failure carries its own records only.
        let err = facts::dimensions(api, f64_type.id())
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("H5Dget_space failed: ") && !err.contains("create_plist"),
            "{err}"
        );
    });
}
