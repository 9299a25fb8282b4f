//! What a rank tells the others before a collective write (the file, the dataset, the element
//! type, the kind of decomposition and its tile), encoded one way for both faces, and the plan
//! every rank computes alike from all of them: every rank writes the same thing, and where the
//! tiles go. A disagreement is typed (the rank, the field); each face words it.

use super::wire::{Unwire, Wire};
use crate::tiles::{write_boxes, Decomposition, TileClaim, TilesError};
use h5gds_route::select::Block;

/// The kind of decomposition a rank uses (a grid with its size): every rank must use the same.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Split {
    LeadingAxis,
    Grid { rows: u64, cols: u64 },
    Tiles,
}

impl Split {
    pub fn of(decomposition: &Decomposition) -> Split {
        match decomposition {
            Decomposition::LeadingAxis => Split::LeadingAxis,
            Decomposition::Grid { rows, cols } => Split::Grid {
                rows: *rows as u64,
                cols: *cols as u64,
            },
            Decomposition::Tile { .. } => Split::Tiles,
        }
    }

    fn code(self) -> [u64; 3] {
        match self {
            Split::LeadingAxis => [0, 0, 0],
            Split::Grid { rows, cols } => [1, rows, cols],
            Split::Tiles => [2, 0, 0],
        }
    }

    fn from_code(code: &[u64]) -> Result<Split, String> {
        match code {
            [0, 0, 0] => Ok(Split::LeadingAxis),
            [1, rows, cols] => Ok(Split::Grid {
                rows: *rows,
                cols: *cols,
            }),
            [2, 0, 0] => Ok(Split::Tiles),
            _ => Err("a malformed message from another rank".into()),
        }
    }
}

/// One rank's description of its write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Description {
    pub path: String,
    pub dataset: String,
    /// The element type as the face names it; ranks agree when the texts are equal.
    pub element: String,
    pub split: Split,
    pub claim: TileClaim,
}

/// The fields ranks must agree on, in the order they are compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Field {
    File,
    Dataset,
    Element,
    Split,
}

/// Rank `rank`'s description differs from rank 0's in `field` (the first that differs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Disagreement {
    pub rank: usize,
    pub field: Field,
}

/// Why the ranks' descriptions make no write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PlanError {
    Disagreement(Disagreement),
    Tiles(TilesError),
}

impl Description {
    /// This rank's description of a write of a tile of `shape` under `decomposition`; a
    /// caller-given box must have the tile's shape.
    pub fn new(
        path: String,
        dataset: String,
        element: String,
        decomposition: &Decomposition,
        shape: Vec<u64>,
    ) -> Result<Description, TilesError> {
        let start = match decomposition {
            Decomposition::Tile {
                start,
                shape: given,
            } => {
                let given: Vec<u64> = given.iter().map(|&d| d as u64).collect();
                if given != shape {
                    return Err(TilesError::TileShape { given, shape });
                }
                Some(start.iter().map(|&s| s as u64).collect())
            }
            _ => None,
        };
        let split = Split::of(decomposition);
        let claim = TileClaim { shape, start };
        Ok(Description {
            path,
            dataset,
            element,
            split,
            claim,
        })
    }

    pub fn encode(&self) -> Vec<u8> {
        let start = self.claim.start.as_deref();
        Wire::default()
            .text(&self.path)
            .text(&self.dataset)
            .text(&self.element)
            .u64s(&self.split.code())
            .u64s(&self.claim.shape)
            .u64(start.is_some() as u64)
            .u64s(start.unwrap_or(&[]))
            .finish()
    }

    /// What [`Description::encode`] wrote; a malformed message is an error naming it so.
    pub fn decode(bytes: &[u8]) -> Result<Description, String> {
        let mut r = Unwire::new(bytes);
        let (path, dataset, element) = (r.text()?, r.text()?, r.text()?);
        let split = Split::from_code(&r.u64s()?)?;
        let shape = r.u64s()?;
        let has_start = r.u64()? != 0;
        let start = r.u64s()?;
        let claim = TileClaim {
            shape,
            start: has_start.then_some(start),
        };
        Ok(Description {
            path,
            dataset,
            element,
            split,
            claim,
        })
    }

    fn differs(&self, other: &Description) -> Option<Field> {
        [
            (Field::File, self.path != other.path),
            (Field::Dataset, self.dataset != other.dataset),
            (Field::Element, self.element != other.element),
            (Field::Split, self.split != other.split),
        ]
        .into_iter()
        .find_map(|(field, differs)| differs.then_some(field))
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
/// element type or the kind of decomposition, and the first field it differs in.
pub fn disagreement(all: &[Description]) -> Option<Disagreement> {
    let first = all.first()?;
    all.iter()
        .enumerate()
        .skip(1)
        .find_map(|(rank, d)| d.differs(first).map(|field| Disagreement { rank, field }))
}

/// Checks that every rank writes the same thing ([`disagreement`]); then the global shape and
/// every rank's box. The same descriptions on every rank give every rank the same verdict.
pub fn plan(
    all: &[Description],
    decomposition: &Decomposition,
) -> Result<(Vec<u64>, Vec<Block>), PlanError> {
    if let Some(d) = disagreement(all) {
        return Err(PlanError::Disagreement(d));
    }
    let claims: Vec<TileClaim> = all.iter().map(|d| d.claim.clone()).collect();
    write_boxes(decomposition, &claims).map_err(PlanError::Tiles)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rank(path: &str, element: &str, decomposition: &Decomposition, shape: &[u64]) -> Vec<u8> {
        let (path, dataset) = (path.to_string(), "/x".to_string());
        Description::new(path, dataset, element.into(), decomposition, shape.to_vec())
            .unwrap()
            .encode()
    }

    #[test]
    fn descriptions_round_trip_and_plan_the_boxes() {
        let tile = Decomposition::Tile {
            start: vec![2, 0],
            shape: vec![1, 3],
        };
        let bytes = rank("a.h5", "f32", &tile, &[1, 3]);
        let back = Description::decode(&bytes).unwrap();
        assert_eq!(
            (back.split, back.claim.start),
            (Split::Tiles, Some(vec![2, 0]))
        );
        let all = decode_all(&[
            rank("a.h5", "f32", &Decomposition::LeadingAxis, &[2, 3]),
            rank("a.h5", "f32", &Decomposition::LeadingAxis, &[1, 3]),
        ])
        .unwrap();
        let (shape, boxes) = plan(&all, &Decomposition::LeadingAxis).unwrap();
        assert_eq!((shape, boxes[1].start.clone()), (vec![3, 3], vec![2, 0]));
        assert!(Description::decode(&bytes[..bytes.len() - 4])
            .unwrap_err()
            .contains("malformed"));
    }

    #[test]
    fn the_first_field_a_rank_differs_in_is_named_with_the_rank() {
        let lead = Decomposition::LeadingAxis;
        let grid = Decomposition::Grid { rows: 2, cols: 1 };
        let cases = [
            (rank("b.h5", "i32", &lead, &[2]), Field::File),
            (rank("a.h5", "i32", &lead, &[2]), Field::Element),
            (rank("a.h5", "f32", &grid, &[2]), Field::Split),
        ];
        for (second, field) in cases {
            let all = decode_all(&[rank("a.h5", "f32", &lead, &[2]), second]).unwrap();
            assert_eq!(
                plan(&all, &lead),
                Err(PlanError::Disagreement(Disagreement { rank: 1, field }))
            );
        }
        let given = Decomposition::Tile {
            start: vec![0],
            shape: vec![3],
        };
        let refused = Description::new("a".into(), "/x".into(), "f32".into(), &given, vec![2]);
        assert_eq!(
            refused.unwrap_err().to_string(),
            "Decomposition::Tile gives the shape [3], but the tile has shape [2]"
        );
    }
}
