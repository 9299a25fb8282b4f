//! Property test: random sequences of write, read, vector write/read, set_eoa and truncate on an
//! open file, compared byte for byte with an in-memory model of sec2's semantics (zero-fill past
//! EOF, EOF grows with writes, truncate makes the file exactly EOA long). Small task sizes and
//! several threads put the parallel and coalescing paths to work; `direct_io=on` adds `O_DIRECT`.

use crate::abi::{H5FD_MEM_DRAW, H5F_ACC_CREAT, H5F_ACC_RDWR, H5F_ACC_TRUNC, MAXADDR};
use crate::config::{DirectIo, VfdSettings};
use crate::file::OpenFile;
use crate::io::vector::Piece;
use crate::io::{BufPtr, Direction};
use proptest::prelude::*;
use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::ffi::CString;

const SPACE: u64 = 96 << 10;

#[derive(Clone, Debug)]
enum Op {
    Write {
        addr: u64,
        data: Vec<u8>,
    },
    Read {
        addr: u64,
        len: usize,
    },
    /// Block-aligned address, length and buffer, so `O_DIRECT` applies when enabled.
    ReadAligned {
        block: u64,
        blocks: usize,
    },
    WriteVector {
        pieces: Vec<(u64, Vec<u8>)>,
    },
    ReadVector {
        pieces: Vec<(u64, usize)>,
    },
    SetEoa {
        addr: u64,
    },
    Truncate,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..SPACE, prop::collection::vec(any::<u8>(), 0..20_000)).prop_map(|(addr, data)| Op::Write { addr, data }),
        3 => (0..SPACE, 0..20_000usize).prop_map(|(addr, len)| Op::Read { addr, len }),
        1 => (0..SPACE / 4096, 1..6usize).prop_map(|(block, blocks)| Op::ReadAligned { block, blocks }),
        2 => prop::collection::vec((0..SPACE, prop::collection::vec(any::<u8>(), 1..3000)), 1..12)
            .prop_map(|pieces| Op::WriteVector { pieces }),
        2 => prop::collection::vec((0..SPACE, 1..3000usize), 1..40).prop_map(|pieces| Op::ReadVector { pieces }),
        1 => (0..SPACE + 8192).prop_map(|addr| Op::SetEoa { addr }),
        1 => Just(Op::Truncate),
    ]
}

/// sec2's behaviour on a byte vector.
#[derive(Default)]
struct Model {
    bytes: Vec<u8>,
    eoa: u64,
}

impl Model {
    fn write(&mut self, addr: u64, data: &[u8]) {
        let end = addr as usize + data.len();
        if self.bytes.len() < end {
            self.bytes.resize(end, 0);
        }
        self.bytes[addr as usize..end].copy_from_slice(data);
    }
    fn read(&self, addr: u64, len: usize) -> Vec<u8> {
        (addr as usize..addr as usize + len)
            .map(|i| self.bytes.get(i).copied().unwrap_or(0))
            .collect()
    }
}

/// A zeroed buffer aligned for `O_DIRECT`.
struct Aligned {
    ptr: *mut u8,
    layout: Layout,
}

impl Aligned {
    fn new(len: usize) -> Self {
        let layout = Layout::from_size_align(len, 4096).unwrap();
        // SAFETY: len > 0 for every caller.
        let ptr = unsafe { alloc_zeroed(layout) };
        Aligned { ptr, layout }
    }
    fn bytes(&self) -> &[u8] {
        // SAFETY: ptr holds layout.size() initialised bytes.
        unsafe { std::slice::from_raw_parts(self.ptr, self.layout.size()) }
    }
}

impl Drop for Aligned {
    fn drop(&mut self) {
        // SAFETY: allocated with this layout in `new`.
        unsafe { dealloc(self.ptr, self.layout) }
    }
}

fn run(ops: Vec<Op>, nthreads: usize, direct_io: DirectIo) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.bin");
    let c_path = CString::new(path.to_str().unwrap()).unwrap();
    let settings = VfdSettings {
        nthreads,
        task_size: 4096,
        direct_io,
        ..VfdSettings::default()
    };
    let flags = H5F_ACC_RDWR | H5F_ACC_CREAT | H5F_ACC_TRUNC;
    let file = OpenFile::open(&c_path, flags, MAXADDR, settings, true).unwrap();
    let mut model = Model::default();
    for op in ops {
        match op {
            Op::Write { addr, data } => {
                let buf = BufPtr::from_const(data.as_ptr());
                // SAFETY: data is a live vector of data.len() bytes.
                unsafe { file.transfer(Direction::Write, addr, data.len(), buf, H5FD_MEM_DRAW) }
                    .unwrap();
                model.write(addr, &data);
            }
            Op::Read { addr, len } => {
                let mut buf = vec![0xAAu8; len];
                let at = BufPtr::new(buf.as_mut_ptr());
                // SAFETY: buf is a live vector of len bytes.
                unsafe { file.transfer(Direction::Read, addr, len, at, H5FD_MEM_DRAW) }.unwrap();
                prop_assert_eq!(buf, model.read(addr, len), "read of {} at {}", len, addr);
            }
            Op::ReadAligned { block, blocks } => {
                let len = blocks * 4096;
                let buf = Aligned::new(len);
                let (at, addr) = (BufPtr::new(buf.ptr), block * 4096);
                // SAFETY: buf holds len bytes.
                unsafe { file.transfer(Direction::Read, addr, len, at, H5FD_MEM_DRAW) }.unwrap();
                prop_assert_eq!(buf.bytes(), &model.read(block * 4096, len)[..]);
            }
            Op::WriteVector { pieces } => {
                let list = pieces
                    .iter()
                    .map(|(addr, data)| Piece {
                        addr: *addr,
                        len: data.len(),
                        buf: BufPtr::from_const(data.as_ptr()),
                        mem_type: 3,
                    })
                    .collect();
                // SAFETY: every piece points into a live vector of its length.
                unsafe { file.transfer_vector(Direction::Write, list) }.unwrap();
                for (addr, data) in &pieces {
                    model.write(*addr, data);
                }
            }
            Op::ReadVector { pieces } => {
                let mut bufs: Vec<Vec<u8>> =
                    pieces.iter().map(|(_, len)| vec![0x55u8; *len]).collect();
                let list = pieces
                    .iter()
                    .zip(bufs.iter_mut())
                    .map(|((addr, len), buf)| Piece {
                        addr: *addr,
                        len: *len,
                        buf: BufPtr::new(buf.as_mut_ptr()),
                        mem_type: 3,
                    })
                    .collect();
                // SAFETY: every piece points into its own live vector of its length.
                unsafe { file.transfer_vector(Direction::Read, list) }.unwrap();
                for ((addr, len), buf) in pieces.iter().zip(&bufs) {
                    prop_assert_eq!(
                        buf,
                        &model.read(*addr, *len),
                        "vector piece of {} at {}",
                        len,
                        addr
                    );
                }
            }
            Op::SetEoa { addr } => {
                file.set_eoa(addr).unwrap();
                model.eoa = addr;
            }
            Op::Truncate => {
                file.truncate().unwrap();
                model.bytes.resize(model.eoa as usize, 0);
            }
        }
        prop_assert_eq!(file.eof(), model.bytes.len() as u64, "EOF");
        prop_assert_eq!(file.eoa(), model.eoa, "EOA");
    }
    prop_assert_eq!(std::fs::read(&path).unwrap(), model.bytes, "file contents");
    file.close().unwrap();
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn matches_the_model_single_thread(ops in prop::collection::vec(op(), 1..40)) {
        run(ops, 1, DirectIo::Off)?;
    }

    #[test]
    fn matches_the_model_with_the_pool(ops in prop::collection::vec(op(), 1..40)) {
        run(ops, 3, DirectIo::Off)?;
    }

    #[test]
    fn matches_the_model_with_o_direct(ops in prop::collection::vec(op(), 1..40)) {
        run(ops, 3, DirectIo::Auto)?;
    }
}
