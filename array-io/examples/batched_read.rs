//! Writes a dataset, reads it back in chunks with `from_file_batched`, and checks that every
//! chunk holds the right elements, that boundary chunks are clipped, and that the chunks cover
//! the dataset exactly once in row-major order (the counterpart of Legate's HDF5 batched-read
//! verification script). Prints `HDF5 BATCHED READ OK` when all checks pass.
//!
//! `cargo run --release -p array-io --example batched_read [-- --device] [--dir DIR]`
//!
//! With `--device` the chunks are read into GPU memory (device 0).

use array_io::{from_file_batched, from_file_batched_to_device, to_file};
use ndarray::{ArrayD, IxDyn, SliceInfoElem};
use std::path::PathBuf;

fn main() {
    let mut device = false;
    let mut dir = std::env::temp_dir().join(format!("array-io-batched-{}", std::process::id()));
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--device" => device = true,
            "--dir" => dir = PathBuf::from(it.next().expect("--dir takes a directory")),
            other => {
                panic!("unknown argument {other:?}; usage: batched_read [--device] [--dir DIR]")
            }
        }
    }
    std::fs::create_dir_all(&dir).unwrap();
    let stream = device.then(|| {
        cudarc::driver::CudaContext::new(0)
            .expect("--device needs CUDA (a GPU, or the emulator in tests)")
            .default_stream()
    });
    let path = dir.join("batched.h5");

    // A length of 5 in chunks of 2 gives 2, 2, 1.
    to_file(&ndarray::arr1(&[10i32, 11, 12, 13, 14]), &path, "/line").unwrap();
    let lengths: Vec<(usize, Vec<usize>)> = match &stream {
        None => from_file_batched::<i32>(&path, "/line", &[2])
            .unwrap()
            .map(|r| {
                let (c, o) = r.unwrap();
                assert_eq!(c.as_slice().unwrap()[0], 10 + o[0] as i32);
                (c.len(), o)
            })
            .collect(),
        Some(s) => from_file_batched_to_device::<i32>(&path, "/line", &[2], s)
            .unwrap()
            .map(|r| {
                let (c, o) = r.unwrap();
                assert_eq!(
                    c.to_host().unwrap().as_slice().unwrap()[0],
                    10 + o[0] as i32
                );
                (c.len(), o)
            })
            .collect(),
    };
    assert_eq!(
        lengths,
        [(2, vec![0]), (2, vec![2]), (1, vec![4])],
        "boundary chunks are clipped"
    );
    println!("  1-d: chunks of 2 over 5 elements: 2, 2, 1");

    let shape = [1000usize, 700];
    let n: usize = shape.iter().product();
    let data =
        ArrayD::from_shape_vec(IxDyn(&shape), (0..n).map(|k| k as f32 * 0.5).collect()).unwrap();
    to_file(&data, &path, "/grid").unwrap();
    for chunk_shape in [[256usize, 300], [1000, 700], [333, 1]] {
        let mut seen = ArrayD::<u8>::zeros(IxDyn(&shape));
        let mut previous: Option<Vec<usize>> = None;
        let mut count = 0;
        let mut visit = |chunk: ArrayD<f32>, offsets: Vec<usize>| {
            if let Some(p) = &previous {
                assert!(p < &offsets, "row-major order");
            }
            previous = Some(offsets.clone());
            let slice: Vec<SliceInfoElem> = (0..2)
                .map(|d| {
                    let want = chunk_shape[d].min(shape[d] - offsets[d]);
                    assert_eq!(chunk.shape()[d], want, "clipped at the boundary");
                    (offsets[d]..offsets[d] + want).into()
                })
                .collect();
            assert_eq!(chunk, data.slice(slice.as_slice()), "chunk at {offsets:?}");
            seen.slice_mut(slice.as_slice()).mapv_inplace(|v| v + 1);
            count += 1;
        };
        match &stream {
            None => {
                for r in from_file_batched::<f32>(&path, "/grid", &chunk_shape).unwrap() {
                    let (c, o) = r.unwrap();
                    visit(c, o);
                }
            }
            Some(s) => {
                for r in
                    from_file_batched_to_device::<f32>(&path, "/grid", &chunk_shape, s).unwrap()
                {
                    let (c, o) = r.unwrap();
                    visit(c.to_host().unwrap(), o);
                }
            }
        }
        assert!(seen.iter().all(|&v| v == 1), "every element exactly once");
        println!("  2-d {shape:?} in chunks of {chunk_shape:?}: {count} chunks");
    }
    std::fs::remove_dir_all(&dir).ok();
    // Staged transfers keep their pinned buffers for reuse; hand them back before exiting.
    array_io::release_pinned_buffers();
    println!("HDF5 BATCHED READ OK");
}
