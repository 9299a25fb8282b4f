//! The byte formats HDF5's compression filters store chunks in, and what of them nvCOMP
//! decodes: pure parsing, no I/O (the caller peeks at the few framing bytes it needs).
//!
//! * **deflate** (HDF5's filter 1, h5py's `compression="gzip"`): a zlib stream (RFC 1950) — a
//!   2-byte header (CM = 8, FCHECK making it a multiple of 31, no preset dictionary), raw
//!   Deflate data (RFC 1951), and the Adler-32 of the decoded bytes, big-endian. nvCOMP's
//!   Deflate decodes raw Deflate only, so the GPU gets the bytes between header and trailer.
//! * **Zstandard** (filter 32015, hdf5plugin): the chunk is one plain Zstandard frame (RFC 8878).
//!   hdf5plugin writes no content checksum; a frame whose header has the flag ends with the low
//!   32 bits of the XXH64 of its decoded bytes, little-endian, which nvCOMP does not check.
//! * **LZ4** (filter 32004, hdf5plugin's H5Zlz4): an 8-byte big-endian decoded size, a 4-byte
//!   big-endian block size, then per block a 4-byte big-endian stored size and the block: an LZ4
//!   block, or the bytes as they are when the stored size equals the block's decoded size
//!   (compression did not help). The last block may be shorter. It carries no checksum.

use h5gds_route::route::GpuCodec;

/// One piece of a stored chunk and where its decoded bytes go in the chunk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Piece {
    /// Offset of the piece in the stored chunk.
    pub at: usize,
    /// Its stored length.
    pub len: usize,
    /// Offset of its decoded bytes in the chunk.
    pub out_at: usize,
    /// Their length.
    pub out_len: usize,
    /// Whether nvCOMP decodes it (false: the bytes are stored as they are).
    pub coded: bool,
}

/// Bytes of framing before a stored chunk's first coded byte: the chunk is placed so that this
/// byte meets nvCOMP's input alignment.
pub fn payload_offset(codec: GpuCodec) -> usize {
    match codec {
        GpuCodec::Deflate => ZLIB_HEADER,
        GpuCodec::Zstd => 0,
        GpuCodec::Lz4 => LZ4_HEADER + 4,
    }
}

const ZLIB_HEADER: usize = 2;
const ADLER_TRAILER: usize = 4;
/// hdf5plugin's LZ4 framing before the first block: decoded size and block size.
pub(crate) const LZ4_HEADER: usize = 12;

/// The raw Deflate piece of a zlib-wrapped chunk of `stored` bytes decoding to `out_len`, given
/// its first two bytes; or why the header is not one HDF5's deflate filter writes.
pub fn zlib_pieces(head: &[u8], stored: usize, out_len: usize) -> Result<Vec<Piece>, String> {
    let [cmf, flg] = <[u8; 2]>::try_from(head.get(..2).unwrap_or_default())
        .map_err(|_| "it is shorter than a zlib header".to_string())?;
    if cmf & 0x0f != 8 || cmf >> 4 > 7 {
        return Err(format!(
            "it does not start with a zlib header of Deflate data (first byte {cmf:#04x})"
        ));
    }
    if (u16::from(cmf) << 8 | u16::from(flg)) % 31 != 0 {
        return Err(format!(
            "its zlib header {cmf:#04x} {flg:#04x} fails its check bits"
        ));
    }
    if flg & 0x20 != 0 {
        return Err("its zlib stream needs a preset dictionary, which HDF5 never writes".into());
    }
    if stored < ZLIB_HEADER + ADLER_TRAILER + 1 {
        return Err(format!("its {stored} bytes are too few for a zlib stream"));
    }
    Ok(vec![Piece {
        at: ZLIB_HEADER,
        len: stored - ZLIB_HEADER - ADLER_TRAILER,
        out_at: 0,
        out_len,
        coded: true,
    }])
}

/// The Adler-32 a zlib trailer holds.
pub fn adler_trailer(tail: &[u8; 4]) -> u32 {
    u32::from_be_bytes(*tail)
}

/// Zstandard's frame magic number, little-endian at the start of every frame (RFC 8878 3.1.1).
const ZSTD_MAGIC: u32 = 0xFD2F_B528;

/// Whether a stored chunk whose first bytes are `head` starts with a Zstandard frame whose header
/// says a content checksum ends it (Frame_Header_Descriptor bit 2, RFC 8878 3.1.1.1.1.5).
pub fn zstd_content_checksum(head: &[u8]) -> bool {
    match head {
        [a, b, c, d, descriptor, ..] => {
            u32::from_le_bytes([*a, *b, *c, *d]) == ZSTD_MAGIC && descriptor & 0x04 != 0
        }
        _ => false,
    }
}

fn be32(bytes: &[u8]) -> u32 {
    u32::from_be_bytes(bytes[..4].try_into().expect("4 bytes"))
}

/// The blocks of an hdf5plugin LZ4 chunk of `stored` bytes that decodes to `out_len`.
/// `peek(at, len)` returns `len` stored bytes from `at` (the caller reads them from the device).
pub fn lz4_pieces(
    stored: usize,
    out_len: usize,
    peek: impl FnMut(usize, usize) -> Result<Vec<u8>, String>,
) -> Result<Vec<Piece>, String> {
    let mut pieces = Vec::new();
    lz4_each(stored, out_len, peek, |piece| {
        pieces.push(piece);
        Ok(())
    })?;
    Ok(pieces)
}

/// [`lz4_pieces`] one piece at a time, in order, handed to `each`, which may stop the walk with
/// an error: nothing is collected, so a chunk framed in many small blocks (or claiming to be)
/// costs no memory beyond its bytes.
pub fn lz4_each(
    stored: usize,
    out_len: usize,
    mut peek: impl FnMut(usize, usize) -> Result<Vec<u8>, String>,
    mut each: impl FnMut(Piece) -> Result<(), String>,
) -> Result<(), String> {
    if stored < LZ4_HEADER + 4 {
        return Err(format!(
            "its {stored} bytes are too few for the LZ4 filter's header"
        ));
    }
    let head = peek(0, LZ4_HEADER + 4)?;
    let total = u64::from_be_bytes(head[..8].try_into().expect("8 bytes"));
    if total != out_len as u64 {
        return Err(format!(
            "its LZ4 header says it decodes to {total} bytes, but a chunk holds {out_len}"
        ));
    }
    let mut block = be32(&head[8..12]) as usize;
    if block == 0 {
        return Err("its LZ4 header gives a block size of 0".into());
    }
    block = block.min(out_len);
    let (mut at, mut done) = (LZ4_HEADER, 0usize);
    let mut size_bytes = Some(head[LZ4_HEADER..].to_vec());
    while done < out_len {
        let this = block.min(out_len - done);
        let size = match size_bytes.take() {
            Some(bytes) => bytes,
            None => {
                if at + 4 > stored {
                    return Err(format!("its LZ4 block at byte {at} runs past its end"));
                }
                peek(at, 4)?
            }
        };
        let len = be32(&size) as usize;
        at += 4;
        if len == 0 || at + len > stored {
            return Err(format!(
                "its LZ4 block at byte {} claims {len} bytes, of {stored} stored",
                at - 4
            ));
        }
        each(Piece {
            at,
            len,
            out_at: done,
            out_len: this,
            coded: len != this,
        })?;
        at += len;
        done += this;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zlib_headers_are_checked_and_the_trailer_cut() {
        // 0x78 0x9c: what zlib writes at the default level.
        let p = zlib_pieces(&[0x78, 0x9c], 100, 400).unwrap();
        assert_eq!(
            p,
            [Piece {
                at: 2,
                len: 94,
                out_at: 0,
                out_len: 400,
                coded: true
            }]
        );
        assert!(zlib_pieces(&[0x78, 0x9d], 100, 400)
            .unwrap_err()
            .contains("check bits"));
        assert!(zlib_pieces(&[0x28, 0xb5], 100, 400)
            .unwrap_err()
            .contains("zlib header"));
        assert!(zlib_pieces(&[0x78, 0xbb], 100, 400)
            .unwrap_err()
            .contains("dictionary"));
        assert!(zlib_pieces(&[0x78, 0x9c], 6, 400).is_err());
        assert_eq!(adler_trailer(&[0, 0, 1, 2]), 258);
    }

    #[test]
    fn a_zstandard_frame_header_says_whether_a_content_checksum_ends_it() {
        let data = vec![7u8; 5000];
        let plain = zstd::bulk::compress(&data, 3).unwrap();
        assert!(!zstd_content_checksum(&plain));
        let mut checked = zstd::bulk::Compressor::new(3).unwrap();
        checked.include_checksum(true).unwrap();
        assert!(zstd_content_checksum(&checked.compress(&data).unwrap()));
        // Not a Zstandard frame, or too short to say: no checksum is claimed.
        assert!(!zstd_content_checksum(&[0x78, 0x9c, 0, 0, 0xff]));
        assert!(!zstd_content_checksum(&[0x28, 0xb5, 0x2f, 0xfd]));
    }

    fn framed(total: u64, block: u32, blocks: &[&[u8]]) -> Vec<u8> {
        let mut out = total.to_be_bytes().to_vec();
        out.extend(block.to_be_bytes());
        for b in blocks {
            out.extend((b.len() as u32).to_be_bytes());
            out.extend(*b);
        }
        out
    }

    fn peek_into(bytes: &[u8]) -> impl FnMut(usize, usize) -> Result<Vec<u8>, String> + '_ {
        |at, len| Ok(bytes[at..at + len].to_vec())
    }

    #[test]
    fn lz4_framing_gives_every_block_and_spots_stored_ones() {
        // Three blocks of 8, 8 and 4 decoded bytes: coded, stored as is, coded.
        let data = framed(20, 8, &[&[1, 2, 3], &[9; 8], &[4, 5]]);
        let p = lz4_pieces(data.len(), 20, peek_into(&data)).unwrap();
        let summary: Vec<_> = p
            .iter()
            .map(|p| (p.at, p.len, p.out_at, p.out_len, p.coded))
            .collect();
        assert_eq!(
            summary,
            [
                (16, 3, 0, 8, true),
                (23, 8, 8, 8, false),
                (35, 2, 16, 4, true)
            ]
        );
        // One block (hdf5plugin's default block size exceeds any chunk).
        let one = framed(20, 1 << 30, &[&[7; 5]]);
        let p = lz4_pieces(one.len(), 20, peek_into(&one)).unwrap();
        assert_eq!((p.len(), p[0].at, p[0].out_len), (1, 16, 20));
    }

    #[test]
    fn lz4_framing_errors_say_what_is_wrong() {
        let data = framed(20, 8, &[&[1, 2, 3]]);
        let short = lz4_pieces(data.len(), 20, peek_into(&data)).unwrap_err();
        assert!(short.contains("runs past its end"), "{short}");
        let wrong = lz4_pieces(data.len(), 24, peek_into(&data)).unwrap_err();
        assert!(
            wrong.contains("decodes to 20 bytes, but a chunk holds 24"),
            "{wrong}"
        );
        let mut cut = framed(8, 8, &[&[1, 2, 3]]);
        cut.truncate(cut.len() - 1);
        let cut_err = lz4_pieces(cut.len(), 8, peek_into(&cut)).unwrap_err();
        assert!(cut_err.contains("claims 3 bytes"), "{cut_err}");
        assert!(lz4_pieces(10, 8, peek_into(&[0; 10])).is_err());
    }
}
