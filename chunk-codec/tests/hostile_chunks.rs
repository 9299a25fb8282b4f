//! Hostile chunks: every filter chain h5gds decodes on the host, fed valid chunks and the same
//! chunks damaged (truncated, extended, bits flipped, bytes overwritten, lying LZ4 and Zstandard
//! size headers, arbitrary bytes, a wrong filter mask, a wrong chunk size), from a seeded random
//! generator. Each outcome is checked:
//!
//! * no panic;
//! * a decoded chunk is exactly what HDF5's own filters give for those stored bytes (the
//!   reference below undoes the filters as HDF5's deflate, shuffle, Fletcher-32 and hdf5plugin's
//!   Zstandard and LZ4 filters do, with other crates where it can: flate2's zlib, libzstd's
//!   streaming decoder, liblz4's whole-block decoder), and a valid chunk decodes to its data;
//!   everything else is an error;
//! * while decoding, no single allocation is larger than the chunk's decoded size (plus the 4
//!   bytes of a Fletcher-32 trailer) or its stored size, whichever is larger (and at least 1 KiB,
//!   room for an error message), whatever a header claims: the test binary's allocator records
//!   the largest.
//!
//! `H5GDS_FUZZ_CASES` (test-only) sets the number of cases (default 1000, a few seconds);
//! `H5GDS_FUZZ_SEED` the seed (default fixed, so a failure repeats). Run under AddressSanitizer
//! as docs/integrity.md says.

use h5gds_chunk_codec::pipeline::{fletcher32, Scratch};
use h5gds_chunk_codec::{Filter, Pipeline};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::io::{Read, Write};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// The system allocator, noting the largest single allocation a thread makes while it watches.
struct Counting;

thread_local! {
    static WATCHING: Cell<bool> = const { Cell::new(false) };
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

fn note(size: usize) {
    let _ = WATCHING.try_with(|w| {
        if w.get() {
            let _ = LARGEST.try_with(|l| l.set(l.get().max(size)));
        }
    });
}

// SAFETY: every call is forwarded to the system allocator unchanged; `note` only touches
// thread-locals with const initialisers (no allocation, no destructor).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: the caller's layout, as GlobalAlloc::alloc requires.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        // SAFETY: `ptr` was allocated by this allocator (so by System) with `layout`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Runs `f`, returning its result and the largest single allocation it made on this thread.
fn watched<T>(f: impl FnOnce() -> T) -> (T, usize) {
    LARGEST.with(|l| l.set(0));
    WATCHING.with(|w| w.set(true));
    let out = f();
    WATCHING.with(|w| w.set(false));
    (out, LARGEST.with(Cell::get))
}

const DEFLATE: i32 = 1;
const SHUFFLE: i32 = 2;
const FLETCHER32: i32 = 3;
const LZ4: i32 = 32004;
const ZSTD: i32 = 32015;

/// Every filter chain h5gds decodes, in pipeline (write) order, as h5py and hdf5plugin write them
/// (shuffle first, Fletcher-32 last) and a few orders they do not.
const CHAINS: &[&[i32]] = &[
    &[DEFLATE],
    &[SHUFFLE, DEFLATE],
    &[DEFLATE, FLETCHER32],
    &[SHUFFLE, DEFLATE, FLETCHER32],
    &[ZSTD],
    &[SHUFFLE, ZSTD],
    &[ZSTD, FLETCHER32],
    &[SHUFFLE, ZSTD, FLETCHER32],
    &[LZ4],
    &[SHUFFLE, LZ4],
    &[LZ4, FLETCHER32],
    &[SHUFFLE, LZ4, FLETCHER32],
    &[SHUFFLE],
    &[FLETCHER32],
    &[SHUFFLE, FLETCHER32],
    &[FLETCHER32, DEFLATE],
    &[DEFLATE, SHUFFLE],
];

/// A small seeded generator (SplitMix64): the cases repeat from the seed alone.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in `0..n` (n > 0).
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// Chunk data that compresses somewhat: runs, small counters and noise.
fn chunk_data(rng: &mut Rng, n: usize) -> Vec<u8> {
    let mut data = Vec::with_capacity(n);
    while data.len() < n {
        let run = 1 + rng.below(64);
        match rng.below(3) {
            0 => data.extend(std::iter::repeat_n(rng.next() as u8, run)),
            1 => {
                let start = rng.next() as u8;
                data.extend((0..run).map(|i| start.wrapping_add(i as u8)));
            }
            _ => data.extend(rng.bytes(run)),
        }
    }
    data.truncate(n);
    data
}

fn shuffle(data: &[u8], element: usize) -> Vec<u8> {
    let n = data.len() / element;
    let mut out = data.to_vec();
    for e in 0..n {
        for b in 0..element {
            out[b * n + e] = data[e * element + b];
        }
    }
    out
}

/// HDF5's unshuffle of `data`, whatever its length (H5Z_filter_shuffle on the way back).
fn unshuffle(data: &[u8], element: usize) -> Vec<u8> {
    let n = data.len() / element;
    let mut out = data.to_vec();
    if element > 1 && n > 1 {
        for e in 0..n {
            for b in 0..element {
                out[e * element + b] = data[b * n + e];
            }
        }
    }
    out
}

/// hdf5plugin's LZ4 framing in blocks of `block` bytes (a block LZ4 does not shrink is stored as
/// it is), as H5Zlz4.c writes it.
fn lz4_frame(data: &[u8], block: usize) -> Vec<u8> {
    let mut out = (data.len() as u64).to_be_bytes().to_vec();
    out.extend((block as u32).to_be_bytes());
    for piece in data.chunks(block.max(1)) {
        let coded = lz4::block::compress(piece, None, false).unwrap();
        let stored = if coded.len() < piece.len() {
            coded
        } else {
            piece.to_vec()
        };
        out.extend((stored.len() as u32).to_be_bytes());
        out.extend(stored);
    }
    out
}

/// The stored chunk HDF5 (with hdf5plugin) writes for `data` through `chain`.
fn encode(chain: &[i32], element: usize, data: &[u8], lz4_block: usize) -> Vec<u8> {
    let mut bytes = data.to_vec();
    for &id in chain {
        bytes = match id {
            SHUFFLE => shuffle(&bytes, element),
            FLETCHER32 => {
                let sum = fletcher32(&bytes);
                bytes.extend(sum.to_le_bytes());
                bytes
            }
            DEFLATE => {
                let mut e =
                    flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::new(6));
                e.write_all(&bytes).unwrap();
                e.finish().unwrap()
            }
            ZSTD => zstd::bulk::compress(&bytes, 3).unwrap(),
            LZ4 => lz4_frame(&bytes, lz4_block),
            _ => unreachable!(),
        };
    }
    bytes
}

/// What HDF5's own filters give for `stored` (mask `mask`), then held to a chunk of
/// `chunk_bytes`: the filters undone last first, as the C filters do, the result refused unless
/// it is exactly the chunk's size. Output is capped just above the size a stage may give, as
/// anything longer is refused anyway.
fn reference(
    chain: &[i32],
    element: usize,
    stored: &[u8],
    mask: u32,
    chunk_bytes: usize,
) -> Result<Vec<u8>, String> {
    let cap = chunk_bytes as u64 + 8;
    let mut bytes = stored.to_vec();
    for (i, &id) in chain.iter().enumerate().rev() {
        if i < 32 && mask & (1 << i) != 0 {
            continue;
        }
        bytes = match id {
            SHUFFLE => unshuffle(&bytes, element),
            FLETCHER32 => {
                let split = bytes
                    .len()
                    .checked_sub(4)
                    .ok_or("too short for Fletcher-32")?;
                let stored_sum = u32::from_le_bytes(bytes[split..].try_into().unwrap());
                let sum = fletcher32(&bytes[..split]).to_le_bytes();
                let swapped = u32::from_le_bytes([sum[1], sum[0], sum[3], sum[2]]);
                if stored_sum != u32::from_le_bytes(sum) && stored_sum != swapped {
                    return Err("Fletcher-32 mismatch".into());
                }
                bytes.truncate(split);
                bytes
            }
            DEFLATE => {
                let mut out = Vec::new();
                flate2::read::ZlibDecoder::new(&bytes[..])
                    .take(cap)
                    .read_to_end(&mut out)
                    .map_err(|e| format!("zlib: {e}"))?;
                out
            }
            ZSTD => {
                let mut out = Vec::new();
                zstd::stream::read::Decoder::new(&bytes[..])
                    .map_err(|e| format!("zstd: {e}"))?
                    .take(cap)
                    .read_to_end(&mut out)
                    .map_err(|e| format!("zstd: {e}"))?;
                out
            }
            LZ4 => lz4_reference(&bytes, cap)?,
            _ => unreachable!(),
        };
    }
    if bytes.len() != chunk_bytes {
        return Err(format!("{} bytes, not {chunk_bytes}", bytes.len()));
    }
    Ok(bytes)
}

/// H5Zlz4.c's decoding: the header's total size, its block size, then per block a stored size;
/// a block whose stored size is the block's size is copied, any other decoded whole.
fn lz4_reference(stored: &[u8], cap: u64) -> Result<Vec<u8>, String> {
    let be = |at: usize, n: usize| -> Result<u64, String> {
        let b = stored.get(at..at + n).ok_or("LZ4 framing past the end")?;
        Ok(b.iter().fold(0u64, |v, &x| v << 8 | u64::from(x)))
    };
    let total = be(0, 8)?;
    let block = be(8, 4)?;
    if total > cap || block == 0 {
        return Err("LZ4 header refused".into());
    }
    let mut out = Vec::new();
    let mut at = 12;
    while (out.len() as u64) < total {
        let this = block.min(total - out.len() as u64) as usize;
        let len = be(at, 4)? as usize;
        at += 4;
        let src = stored.get(at..at + len).ok_or("LZ4 block past the end")?;
        if len == this {
            out.extend_from_slice(src);
        } else {
            let decoded = lz4::block::decompress(src, Some(this as i32))
                .map_err(|e| format!("LZ4 block: {e}"))?;
            if decoded.len() != this {
                return Err("LZ4 block decodes short".into());
            }
            out.extend(decoded);
        }
        at += len;
    }
    Ok(out)
}

// liblz4's partial block decoder (the library the lz4 crate links), for the reference.
extern "C" {
    fn LZ4_decompress_safe_partial(
        src: *const std::ffi::c_char,
        dst: *mut std::ffi::c_char,
        src_size: std::ffi::c_int,
        target_output_size: std::ffi::c_int,
        dst_capacity: std::ffi::c_int,
    ) -> std::ffi::c_int;
}

/// The first `wanted` bytes HDF5's decoder gives for a chunk whose one applied filter is
/// Zstandard or LZ4 (the chunks h5gds decodes in part), before it reaches any damage beyond them:
/// libzstd's streaming decoder stopped there; H5Zlz4.c's framing checked whole and its blocks
/// decoded up to there (the last one by liblz4's partial decoder).
fn reference_prefix(
    chain: &[i32],
    stored: &[u8],
    mask: u32,
    chunk_bytes: usize,
    wanted: usize,
) -> Result<Vec<u8>, String> {
    let applied: Vec<i32> = (0..chain.len())
        .filter(|&i| mask & (1 << i) == 0)
        .map(|i| chain[i])
        .collect();
    let mut out = Vec::new();
    match applied[..] {
        [ZSTD] => {
            zstd::stream::read::Decoder::new(stored)
                .map_err(|e| format!("zstd: {e}"))?
                .take(wanted as u64)
                .read_to_end(&mut out)
                .map_err(|e| format!("zstd: {e}"))?;
        }
        [LZ4] => {
            let be = |at: usize, n: usize| -> Result<u64, String> {
                let b = stored.get(at..at + n).ok_or("LZ4 framing past the end")?;
                Ok(b.iter().fold(0u64, |v, &x| v << 8 | u64::from(x)))
            };
            let (total, block) = (be(0, 8)?, be(8, 4)?);
            if total != chunk_bytes as u64 || block == 0 {
                return Err("LZ4 header refused".into());
            }
            let (mut at, mut done) = (12, 0u64);
            while done < total {
                let this = block.min(total - done) as usize;
                let len = be(at, 4)? as usize;
                let src = stored
                    .get(at + 4..at + 4 + len)
                    .ok_or("LZ4 block past the end")?;
                if out.len() < wanted {
                    if len == this {
                        out.extend_from_slice(src);
                    } else {
                        // The block the bytes wanted end in, decoded up to there by liblz4.
                        let take = this.min(wanted - out.len());
                        let mut part = vec![0u8; take];
                        // SAFETY: `src` and `part` are live buffers of the lengths given; liblz4
                        // writes at most `take` bytes and reads at most `src.len()`.
                        let n = unsafe {
                            LZ4_decompress_safe_partial(
                                src.as_ptr().cast(),
                                part.as_mut_ptr().cast(),
                                src.len() as i32,
                                take as i32,
                                take as i32,
                            )
                        };
                        if n < take as i32 {
                            return Err("LZ4 block does not decode".into());
                        }
                        out.extend(part);
                    }
                }
                at += 4 + len;
                done += this as u64;
            }
            out.truncate(wanted);
        }
        _ => return Err(format!("filters {applied:?} do not decode in part")),
    }
    if out.len() != wanted {
        return Err(format!("{} bytes, not {wanted}", out.len()));
    }
    Ok(out)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Damage {
    None,
    Truncated,
    Extended,
    BitsFlipped,
    BytesOverwritten,
    LyingSizeHeader,
    Arbitrary,
    WrongMask,
    WrongChunkSize,
}

const DAMAGES: &[Damage] = &[
    Damage::None,
    Damage::Truncated,
    Damage::Extended,
    Damage::BitsFlipped,
    Damage::BytesOverwritten,
    Damage::LyingSizeHeader,
    Damage::Arbitrary,
    Damage::WrongMask,
    Damage::WrongChunkSize,
];

/// A size header of the outermost codec rewritten to a lie: LZ4's total or block size or a
/// block's stored size; a Zstandard frame's content size or window size.
fn lie(rng: &mut Rng, chain: &[i32], stored: &mut Vec<u8>, chunk_bytes: usize) {
    let outermost = chain.iter().rev().find(|&&id| id != FLETCHER32).copied();
    match outermost {
        Some(LZ4) if stored.len() >= 16 => {
            let huge = [
                0,
                1,
                chunk_bytes as u64 + 1,
                chunk_bytes as u64 * 2,
                1 << 40,
                u64::MAX,
            ];
            match rng.below(3) {
                0 => {
                    let total = *rng.pick(&huge);
                    stored[..8].copy_from_slice(&total.to_be_bytes());
                }
                1 => {
                    let random = rng.next() as u32;
                    let block = *rng.pick(&[0u32, 1, 2, 7, u32::MAX, random]);
                    stored[8..12].copy_from_slice(&block.to_be_bytes());
                }
                _ => {
                    let size =
                        *rng.pick(&[0u32, 1, u32::MAX, (chunk_bytes as u32).wrapping_add(1)]);
                    stored[12..16].copy_from_slice(&size.to_be_bytes());
                }
            }
        }
        Some(ZSTD) if stored.len() >= 6 => {
            // Frame header: magic (4), descriptor (1), window descriptor unless single-segment,
            // dictionary id, content size (FCS_Field_Size from the descriptor's top two bits).
            let fhd = stored[4];
            let single = fhd & 0x20 != 0;
            let dict = [0, 1, 2, 4][usize::from(fhd & 3)];
            let fcs = match fhd >> 6 {
                0 => usize::from(single),
                1 => 2,
                2 => 4,
                _ => 8,
            };
            let fcs_at = 5 + usize::from(!single) + dict;
            if rng.below(2) == 0 && fcs > 0 && stored.len() >= fcs_at + fcs {
                // The content size: huge, one more or one less than the chunk, or random.
                let value = match rng.below(4) {
                    0 => u64::MAX,
                    1 => chunk_bytes as u64 + 1,
                    2 => (chunk_bytes as u64).saturating_sub(1),
                    _ => rng.next(),
                };
                stored[fcs_at..fcs_at + fcs].copy_from_slice(&value.to_le_bytes()[..fcs]);
            } else if !single {
                // The window size: the largest the format can say.
                stored[5] = 0xff;
            } else {
                // Single-segment frames carry no window descriptor: claim a huge content size
                // in an 8-byte field instead, dropping the old field.
                let mut lied = stored[..4].to_vec();
                lied.push((fhd & 0x3f) | 0xc0);
                lied.extend_from_slice(&stored[5..fcs_at]);
                lied.extend((1u64 << 40).to_le_bytes());
                lied.extend_from_slice(&stored[fcs_at + fcs..]);
                *stored = lied;
            }
        }
        _ => {
            // No size header: damage the first bytes instead.
            let n = stored.len().min(16);
            for b in &mut stored[..n] {
                *b ^= rng.next() as u8;
            }
        }
    }
}

/// Counts of outcomes, for the table in docs/integrity.md.
#[derive(Default, Debug)]
struct Tally {
    cases: usize,
    decoded_exactly: usize,
    refused: usize,
    refused_where_hdf5_decodes: usize,
    prefix_before_the_damage: usize,
}

fn cases() -> usize {
    std::env::var("H5GDS_FUZZ_CASES")
        .ok()
        .map(|v| v.parse().expect("H5GDS_FUZZ_CASES is a number of cases"))
        .unwrap_or(1000)
}

fn seed() -> u64 {
    std::env::var("H5GDS_FUZZ_SEED")
        .ok()
        .map(|v| v.parse().expect("H5GDS_FUZZ_SEED is a number"))
        .unwrap_or(0x4835_6764_7320_4e49)
}

/// One way of asking for a chunk: whole into the scratch buffers, whole into the caller's
/// buffer, or its first bytes only.
#[derive(Clone, Copy, Debug)]
enum Call {
    Decode,
    DecodeInto,
    Prefix(usize),
}

fn run_call(
    p: &Pipeline,
    call: Call,
    stored: &[u8],
    mask: u32,
    chunk_bytes: usize,
    scratch: &mut Scratch,
) -> Result<Vec<u8>, String> {
    match call {
        Call::Decode => p
            .decode(stored, mask, chunk_bytes, scratch)
            .map(<[u8]>::to_vec),
        Call::DecodeInto => {
            let mut dest = vec![0u8; chunk_bytes];
            p.decode_into(stored, mask, scratch, &mut dest)
                .map(|()| dest)
        }
        Call::Prefix(wanted) => {
            let mut dest = vec![0u8; wanted];
            p.decode_prefix_into(stored, mask, chunk_bytes, scratch, &mut dest)
                .map(|()| dest)
        }
    }
}

#[test]
fn hostile_chunks_decode_exactly_or_are_refused_within_the_chunks_memory() {
    let mut rng = Rng(seed());
    let mut tally = Tally::default();
    let mut per_damage = std::collections::BTreeMap::<String, (usize, usize)>::new();
    for case in 0..cases() {
        let chain = *rng.pick(CHAINS);
        let element = *rng.pick(&[1usize, 2, 4, 8]);
        let chunk_bytes = match rng.below(4) {
            0 => 1 + rng.below(64),
            _ => 1 + rng.below(24 * 1024),
        };
        let data = chunk_data(&mut rng, chunk_bytes);
        let lz4_block = *rng.pick(&[1 << 30, 4096, 1000, 16]);
        let valid = encode(chain, element, &data, lz4_block);
        let filters: Vec<Filter> = chain
            .iter()
            .map(|&id| Filter {
                id,
                values: if id == SHUFFLE {
                    vec![element as u32]
                } else {
                    vec![]
                },
            })
            .collect();
        let p = Pipeline::for_filters(&filters, element).expect("h5gds decodes every chain here");
        let damage = *rng.pick(DAMAGES);
        let (mut stored, mut mask, mut target) = (valid.clone(), 0u32, chunk_bytes);
        match damage {
            Damage::None => {}
            Damage::Truncated => stored.truncate(rng.below(valid.len().max(1))),
            Damage::Extended => {
                let extra = 1 + rng.below(16);
                stored.extend(rng.bytes(extra));
            }
            Damage::BitsFlipped => {
                for _ in 0..1 + rng.below(8) {
                    if !stored.is_empty() {
                        let at = rng.below(stored.len());
                        stored[at] ^= 1 << rng.below(8);
                    }
                }
            }
            Damage::BytesOverwritten => {
                if !stored.is_empty() {
                    let at = rng.below(stored.len());
                    let n = (1 + rng.below(32)).min(stored.len() - at);
                    let noise = rng.bytes(n);
                    stored[at..at + n].copy_from_slice(&noise);
                }
            }
            Damage::LyingSizeHeader => lie(&mut rng, chain, &mut stored, chunk_bytes),
            Damage::Arbitrary => {
                let n = rng.below(2 * valid.len() + 16);
                stored = rng.bytes(n);
            }
            Damage::WrongMask => mask = 1 + rng.below((1 << chain.len()) - 1) as u32,
            Damage::WrongChunkSize => {
                target = match rng.below(3) {
                    0 => chunk_bytes + 1,
                    1 => chunk_bytes - 1,
                    _ => chunk_bytes * 2,
                }
            }
        }
        let call = match rng.below(3) {
            0 => Call::Decode,
            1 => Call::DecodeInto,
            _ if p.decodes_prefix(mask) && target > 0 => Call::Prefix(1 + rng.below(target)),
            _ => Call::Decode,
        };
        // The decoders and buffers a decoding thread keeps, made by a first, valid chunk.
        let mut scratch = Scratch::default();
        let warm = run_call(&p, Call::Decode, &valid, 0, chunk_bytes, &mut scratch);
        assert_eq!(
            warm.as_deref(),
            Ok(&data[..]),
            "case {case}: {chain:?} valid chunk"
        );
        if p.decodes_prefix(0) {
            let warm = run_call(
                &p,
                Call::Prefix(chunk_bytes),
                &valid,
                0,
                chunk_bytes,
                &mut scratch,
            );
            assert_eq!(
                warm.as_deref(),
                Ok(&data[..]),
                "case {case}: {chain:?} valid prefix"
            );
        }
        let what = format!(
            "case {case} (seed {:#x}): {chain:?} element {element}, {chunk_bytes} bytes, {damage:?}, \
             mask {mask:#b}, asked {target} via {call:?}",
            seed()
        );
        let (result, largest) = watched(|| {
            catch_unwind(AssertUnwindSafe(|| {
                run_call(&p, call, &stored, mask, target, &mut scratch)
            }))
        });
        let result = result.unwrap_or_else(|_| panic!("{what}: decoding panicked"));
        let trailer = if chain.contains(&FLETCHER32) { 4 } else { 0 };
        let bound = (target + trailer).max(stored.len()).max(1024);
        assert!(
            largest <= bound,
            "{what}: an allocation of {largest} bytes, above the chunk's {bound} (stored {})",
            stored.len()
        );
        let hdf5 = reference(chain, element, &stored, mask, target);
        let counts = per_damage.entry(format!("{damage:?}")).or_default();
        tally.cases += 1;
        match result {
            Ok(bytes) => {
                match (&hdf5, call) {
                    (Ok(expected), Call::Prefix(wanted)) => {
                        assert!(
                            bytes == expected[..wanted],
                            "{what}: bytes differ from HDF5's"
                        )
                    }
                    (Ok(expected), _) => {
                        assert!(bytes == *expected, "{what}: bytes differ from HDF5's")
                    }
                    // The first bytes of a chunk decode without its tail, where the damage lies:
                    // they must be what HDF5's decoder gives first.
                    (Err(_), Call::Prefix(wanted)) => {
                        let first = reference_prefix(chain, &stored, mask, target, wanted);
                        assert!(
                            first.as_deref() == Ok(&bytes[..]),
                            "{what}: the first {wanted} bytes decoded where HDF5's filters refuse \
                             the chunk, and they are not what its decoder gives first ({first:?})"
                        );
                        tally.prefix_before_the_damage += 1;
                    }
                    (Err(e), _) => panic!("{what}: decoded where HDF5's filters refuse ({e})"),
                }
                if damage == Damage::None {
                    assert_eq!(bytes, data[..bytes.len()], "{what}");
                }
                tally.decoded_exactly += 1;
                counts.0 += 1;
            }
            Err(reason) => {
                assert!(
                    damage != Damage::None,
                    "{what}: a valid chunk refused: {reason}"
                );
                assert!(
                    reason.starts_with("its ")
                        || reason.starts_with("it ")
                        || reason.starts_with("the first"),
                    "{what}: the reason reads as a clause about the chunk: {reason}"
                );
                tally.refused += 1;
                if hdf5.is_ok() {
                    tally.refused_where_hdf5_decodes += 1;
                }
                counts.1 += 1;
            }
        }
    }
    // The figures docs/integrity.md quotes (with --nocapture).
    println!("hostile chunks: {tally:?}");
    for (damage, (ok, refused)) in &per_damage {
        println!("  {damage}: {ok} decoded exactly, {refused} refused");
    }
    assert!(tally.decoded_exactly > 0 && tally.refused > 0);
}
