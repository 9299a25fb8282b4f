//! hdf5plugin's LZ4 framing (filter 32004) on the host, both ways: a chunk framed in blocks
//! ([`encode_lz4`]), a framed chunk decoded whole ([`decode_lz4`]), and only its first bytes
//! ([`decode_lz4_prefix`]). The framing itself is parsed by [`crate::format::lz4_pieces`].

use crate::format::{self, LZ4_HEADER};
use crate::step_buffers::room;

/// hdf5plugin's LZ4 framing of `input` in blocks of `block` bytes (at most the input) into
/// `spare`; returns the stored length.
pub(crate) fn encode_lz4(input: &[u8], block: usize, spare: &mut Vec<u8>) -> Result<usize, String> {
    let total = input.len();
    let block = block.min(total).max(1);
    let block32 = u32::try_from(block)
        .map_err(|_| format!("the LZ4 block size {block} does not fit the filter's header"))?;
    let blocks = total.div_ceil(block);
    // Each block stores at most its own bytes (LZ4's output is kept only when smaller).
    let out = room(spare, LZ4_HEADER + 4 * blocks + total);
    out[..8].copy_from_slice(&(total as u64).to_be_bytes());
    out[8..12].copy_from_slice(&block32.to_be_bytes());
    let mut at = LZ4_HEADER;
    for piece in input.chunks(block) {
        let body = at + 4;
        // Room for one byte less than the block: LZ4 fails exactly when its output would not be
        // smaller, and then the block is stored as it is.
        let limit = body + piece.len() - 1;
        let stored = match lz4::block::compress_to_buffer(piece, None, false, &mut out[body..limit])
        {
            Ok(n) if n > 0 && n < piece.len() => n,
            _ => {
                out[body..body + piece.len()].copy_from_slice(piece);
                piece.len()
            }
        };
        out[at..body].copy_from_slice(&(stored as u32).to_be_bytes());
        at = body + stored;
    }
    Ok(at)
}

/// Walks the framing's pieces of a stored chunk `input` decoding to `chunk_bytes`, handing each
/// to `each`; the error names where the framing runs past the stored bytes.
fn each_piece(
    input: &[u8],
    chunk_bytes: usize,
    each: impl FnMut(format::Piece) -> Result<(), String>,
) -> Result<(), String> {
    format::lz4_each(
        input.len(),
        chunk_bytes,
        |at, len| {
            input
                .get(at..at + len)
                .map(<[u8]>::to_vec)
                .ok_or_else(|| format!("its LZ4 framing runs past its end at byte {at}"))
        },
        each,
    )
}

/// hdf5plugin's LZ4 framing: each block decoded (or copied, when stored as it is) into place.
pub(crate) fn decode_lz4(input: &[u8], out: &mut [u8]) -> Result<(), String> {
    each_piece(input, out.len(), |p| {
        let (src, dst) = (
            &input[p.at..p.at + p.len],
            &mut out[p.out_at..p.out_at + p.out_len],
        );
        if p.coded {
            let n = lz4::block::decompress_to_buffer(src, Some(p.out_len as i32), dst)
                .map_err(|e| format!("its LZ4 block at byte {} does not decode: {e}", p.at))?;
            if n != p.out_len {
                return Err(format!(
                    "its LZ4 block at byte {} decodes to {n} bytes, not {}",
                    p.at, p.out_len
                ));
            }
        } else {
            dst.copy_from_slice(src);
        }
        Ok(())
    })
}

// liblz4's partial block decoder, from the library lz4-sys builds and links (which declares no
// binding of it): decodes at least `target_output_size` bytes of a block (or all of a shorter
// one) into `dst`, writing at most `dst_capacity`; returns the bytes written, or a negative
// number for a malformed block. Never reads or writes out of bounds.
extern "C" {
    fn LZ4_decompress_safe_partial(
        src: *const std::ffi::c_char,
        dst: *mut std::ffi::c_char,
        src_size: std::ffi::c_int,
        target_output_size: std::ffi::c_int,
        dst_capacity: std::ffi::c_int,
    ) -> std::ffi::c_int;
}

/// hdf5plugin's LZ4 framing, the first `dest.len()` bytes of a chunk of `chunk_bytes`: the
/// blocks before them decoded whole, the one they end in decoded partly.
pub(crate) fn decode_lz4_prefix(
    input: &[u8],
    chunk_bytes: usize,
    dest: &mut [u8],
) -> Result<(), String> {
    let wanted = dest.len();
    // The whole framing is walked (and so checked); the blocks past the bytes wanted are not
    // decoded.
    each_piece(input, chunk_bytes, |p| {
        if p.out_at >= wanted {
            return Ok(());
        }
        let take = p.out_len.min(wanted - p.out_at);
        let (src, dst) = (
            &input[p.at..p.at + p.len],
            &mut dest[p.out_at..p.out_at + take],
        );
        if !p.coded {
            dst.copy_from_slice(&src[..take]);
            return Ok(());
        }
        let too_large = |what: usize| {
            std::ffi::c_int::try_from(what)
                .map_err(|_| format!("its LZ4 block at byte {} is too large to decode", p.at))
        };
        let (src_size, target) = (too_large(src.len())?, too_large(take)?);
        // SAFETY: `src` and `dst` are live slices of the sizes given; the decoder writes at most
        // `dst_capacity` (= `dst.len()`) bytes and reads at most `src_size`.
        let n = unsafe {
            LZ4_decompress_safe_partial(
                src.as_ptr().cast(),
                dst.as_mut_ptr().cast(),
                src_size,
                target,
                target,
            )
        };
        if n < target {
            return Err(format!(
                "its LZ4 block at byte {} does not decode ({n} of the first {take} bytes)",
                p.at
            ));
        }
        Ok(())
    })
}
