//! What a rank tells the others before a collective write (the file, the dataset, the element
//! type, the kind of decomposition and its tile), encoded one way for both faces, and the check
//! every rank makes alike on all of them that every rank writes the same thing (then the tiles'
//! boxes are `tiles::write_boxes`'). A disagreement is typed (the rank, the field), worded by
//! `CollectiveError`.

use super::error::{CollectiveError, Field};
use super::wire::{Unwire, Wire};
use crate::tiles::{Decomposition, TileClaim, TilesError};
use std::path::PathBuf;

/// One rank's description of its write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Description {
    pub path: String,
    pub dataset: String,
    /// The element type as the face names it; ranks agree when the texts are equal.
    pub element: String,
    /// The kind of decomposition as a code every rank must send alike: leading axis, a grid of
    /// its size, caller-given boxes.
    pub kind: [u64; 3],
    pub claim: TileClaim,
}

/// What a rank writes, as its face describes it once its own checks passed.
#[derive(Clone, Debug)]
pub struct Tile {
    /// The target file (the same on every rank).
    pub path: PathBuf,
    /// The dataset's absolute name.
    pub dataset: String,
    /// The element type as [`element_name`] names it (`f64`, `bool`), or as numpy's type string
    /// (`<f8`, `|b1`), which it names; ranks agree when the names are equal.
    pub element: String,
    /// Bytes per element.
    pub item: usize,
    pub shape: Vec<u64>,
}

impl Description {
    /// This rank's description of its write of `tile` under `decomposition`; a caller-given box
    /// must have the tile's shape.
    pub fn new(tile: &Tile, decomposition: &Decomposition) -> Result<Description, TilesError> {
        let shape = tile.shape.clone();
        let (kind, start) = match decomposition {
            Decomposition::LeadingAxis => ([0, 0, 0], None),
            Decomposition::Grid { rows, cols } => ([1, *rows as u64, *cols as u64], None),
            Decomposition::Tile { start, shape: at } => {
                let given: Vec<u64> = at.iter().map(|&d| d as u64).collect();
                if given != shape {
                    return Err(TilesError::TileShape { given, shape });
                }
                ([2, 0, 0], Some(start.iter().map(|&s| s as u64).collect()))
            }
        };
        Ok(Description {
            path: tile.path.to_string_lossy().into_owned(),
            dataset: tile.dataset.clone(),
            element: tile.element.clone(),
            kind,
            claim: TileClaim { shape, start },
        })
    }

    pub fn encode(&self) -> Vec<u8> {
        let start = self.claim.start.as_deref();
        Wire::default()
            .text(&self.path)
            .text(&self.dataset)
            .text(&self.element)
            .u64s(&self.kind)
            .u64s(&self.claim.shape)
            .u64(start.is_some() as u64)
            .u64s(start.unwrap_or(&[]))
            .finish()
    }

    /// What [`Description::encode`] wrote; a malformed message is an error naming it so.
    pub fn decode(bytes: &[u8]) -> Result<Description, String> {
        let mut r = Unwire::new(bytes);
        let (path, dataset, element) = (r.text()?, r.text()?, r.text()?);
        let kind = r
            .u64s()?
            .try_into()
            .map_err(|_| "a malformed message from another rank")?;
        let (shape, has_start) = (r.u64s()?, r.u64()? != 0);
        let claim = TileClaim {
            shape,
            start: has_start.then_some(r.u64s()?),
        };
        Ok(Description {
            path,
            dataset,
            element,
            kind,
            claim,
        })
    }

    /// `field` of this description, as the error shows it.
    fn text(&self, field: Field) -> String {
        match (field, self.kind) {
            (Field::File, _) => format!("{:?}", self.path),
            (Field::Dataset, _) => format!("{:?}", self.dataset),
            (Field::Element, _) => element_name(&self.element),
            (Field::Decomposition, [0, ..]) => "blocks of the leading axis".into(),
            (Field::Decomposition, [1, rows, cols]) => format!("a {rows} x {cols} grid"),
            (Field::Decomposition, _) => "caller-given boxes".into(),
        }
    }
}

/// The name of an element type in one vocabulary for both faces (array-io's Rust names: `f64`,
/// `u8`, `bool`), from numpy's type string of a little-endian (or single-byte) number: `<f8` is
/// `f64`, `|u1` `u8`, `|b1` `bool`; any other text (a Rust name, another byte order, a compound
/// type) is its own name.
pub fn element_name(typestr: &str) -> String {
    let number = typestr.strip_prefix(['<', '|']).and_then(|t| {
        let (kind, bytes) = t.split_at_checked(1)?;
        Some((kind, bytes.parse::<u32>().ok()?))
    });
    match number {
        Some(("b", 1)) => "bool".into(),
        Some((kind @ ("i" | "u" | "f"), bytes)) => format!("{kind}{}", bytes * 8),
        _ => typestr.to_string(),
    }
}

/// Every rank's description from every rank's message (in rank order).
pub fn decode_all<M: AsRef<[u8]>>(messages: &[M]) -> Result<Vec<Description>, String> {
    messages
        .iter()
        .map(|m| Description::decode(m.as_ref()))
        .collect()
}

/// The first rank (in rank order) whose write differs from rank 0's in the file, the dataset, the
/// element type or the kind of decomposition, named with the first field it differs in.
pub fn disagreement(all: &[Description]) -> Option<CollectiveError> {
    let first = all.first()?;
    let fields = [
        Field::File,
        Field::Dataset,
        Field::Element,
        Field::Decomposition,
    ];
    all.iter().enumerate().skip(1).find_map(|(rank, d)| {
        let (field, theirs, first) = fields
            .into_iter()
            .map(|f| (f, d.text(f), first.text(f)))
            .find(|(_, theirs, first)| theirs != first)?;
        Some(CollectiveError::Disagreement {
            rank,
            field,
            theirs,
            first,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rank(path: &str, element: &str, decomposition: &Decomposition, shape: &[u64]) -> Vec<u8> {
        let tile = Tile {
            path: path.into(),
            dataset: "/x".into(),
            element: element.into(),
            item: 4,
            shape: shape.to_vec(),
        };
        Description::new(&tile, decomposition).unwrap().encode()
    }

    #[test]
    fn descriptions_round_trip_and_malformed_ones_are_refused() {
        let tile = Decomposition::Tile {
            start: vec![2, 0],
            shape: vec![1, 3],
        };
        let bytes = rank("a.h5", "f32", &tile, &[1, 3]);
        let back = Description::decode(&bytes).unwrap();
        assert_eq!((back.kind, back.claim.start), ([2, 0, 0], Some(vec![2, 0])));
        let all = decode_all(&[
            rank("a.h5", "f32", &Decomposition::LeadingAxis, &[2, 3]),
            rank("a.h5", "f32", &Decomposition::LeadingAxis, &[1, 3]),
        ])
        .unwrap();
        assert!(disagreement(&all).is_none());
        assert_eq!(all[1].claim.shape, [1, 3]);
        assert!(Description::decode(&bytes[..bytes.len() - 4])
            .unwrap_err()
            .contains("malformed"));
    }

    #[test]
    fn the_first_field_a_rank_differs_in_is_named_with_the_rank() {
        let lead = Decomposition::LeadingAxis;
        let grid = Decomposition::Grid { rows: 2, cols: 1 };
        let all = decode_all(&[
            rank("a.h5", "f32", &lead, &[2]),
            rank("a.h5", "f32", &grid, &[2]),
        ]);
        assert_eq!(
            disagreement(&all.unwrap()).unwrap().to_string(),
            "invalid decomposition: rank 1 splits the array into a 2 x 1 grid, rank 0 blocks of \
             the leading axis"
        );
        for (typestr, name) in [
            ("<f8", "f64"),
            ("|i1", "i8"),
            ("<i1", "i8"),
            ("|b1", "bool"),
        ] {
            assert_eq!(element_name(typestr), name);
        }
        assert_eq!(element_name(">f8"), ">f8");
        let all = decode_all(&[
            rank("a.h5", "<f8", &lead, &[2]),
            rank("a.h5", "<f4", &lead, &[2]),
        ]);
        assert!(disagreement(&all.unwrap())
            .unwrap()
            .to_string()
            .ends_with("rank 1 has a tile of f32, rank 0 f64"));
        let cases = [
            (rank("b.h5", "i32", &lead, &[2]), Field::File),
            (rank("a.h5", "i32", &lead, &[2]), Field::Element),
            (rank("a.h5", "f32", &grid, &[2]), Field::Decomposition),
        ];
        for (second, field) in cases {
            let all = decode_all(&[rank("a.h5", "f32", &lead, &[2]), second]).unwrap();
            let err = disagreement(&all).unwrap();
            let named = matches!(err, CollectiveError::Disagreement { rank: 1, field: f, .. } if f == field);
            assert!(named, "{err:?}");
        }
        let given = Decomposition::Tile {
            start: vec![0],
            shape: vec![3],
        };
        let tile = Tile {
            path: "a".into(),
            dataset: "/x".into(),
            element: "f32".into(),
            item: 4,
            shape: vec![2],
        };
        let refused = Description::new(&tile, &given);
        assert_eq!(
            refused.unwrap_err().to_string(),
            "the caller-given box has shape [3], but the tile has shape [2]"
        );
    }
}
