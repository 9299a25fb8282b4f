//! Many ranks, one file: each rank writes its tile of a 2-D float32 array (uneven rows), reads
//! its block back, and with `--device` does the same from and into its GPU (device = node-local
//! rank modulo the device count). Prints `MPI TILES OK` on rank 0.
//!
//! ```sh
//! cargo build --release -p array-io --features mpi --example mpi_tiles
//! mpirun -np 4 target/release/examples/mpi_tiles out/tiles.h5 [--device]
//! ```

use array_io::collective::{self, mpi::traits::*};
use array_io::DeviceArray;
use ndarray::Array2;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let universe = collective::mpi::initialize().ok_or("MPI was already initialised")?;
    let world = universe.world();
    let (rank, size) = (world.rank() as usize, world.size() as usize);
    let path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "out/tiles.h5".into());
    let device = std::env::args().any(|a| a == "--device");

    // 1000 rows over p ranks: rank r holds rows [r*1000/p, (r+1)*1000/p), 256 columns.
    let (n, cols) = (1000, 256);
    let (first, end) = (rank * n / size, (rank + 1) * n / size);
    let tile = Array2::from_shape_fn((end - first, cols), |(i, j)| {
        ((first + i) * cols + j) as f32
    });

    if device {
        let ctx = collective::local_device(&world)?;
        let on_gpu = DeviceArray::from_host(&ctx, &tile)?;
        collective::to_file(&world, &on_gpu, &path, "/x")?; // straight from each rank's GPU
        let back = collective::from_file_to_device::<_, f32>(&world, &path, "/x", &ctx)?;
        assert_eq!(back.to_host()?, tile.clone().into_dyn());
    } else {
        collective::to_file(&world, &tile, &path, "/x")?;
        let back = collective::from_file::<_, f32>(&world, &path, "/x")?;
        assert_eq!(back, tile.into_dyn());
    }
    // Every rank's error would name the failed ranks; reaching here, all succeeded.
    if rank == 0 {
        let whole = array_io::from_file::<f32>(&path, "/x")?; // one ordinary HDF5 file
        assert_eq!(whole.shape(), [n, cols]);
        assert_eq!(whole[[n - 1, cols - 1]], (n * cols - 1) as f32);
        println!(
            "MPI TILES OK ({size} ranks, {})",
            if device { "device" } else { "host" }
        );
    }
    Ok(())
}
