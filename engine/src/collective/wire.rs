//! The bytes ranks exchange in a collective write: a little-endian, length-prefixed encoding of
//! plain facts (numbers, lists of numbers, texts), the same for both faces.

/// Builds a message.
#[derive(Default)]
pub struct Wire {
    bytes: Vec<u8>,
}

impl Wire {
    pub fn u64(mut self, v: u64) -> Wire {
        self.bytes.extend_from_slice(&v.to_le_bytes());
        self
    }

    pub fn u64s(self, v: &[u64]) -> Wire {
        v.iter().fold(self.u64(v.len() as u64), |w, &x| w.u64(x))
    }

    pub fn text(mut self, v: &str) -> Wire {
        self = self.u64(v.len() as u64);
        self.bytes.extend_from_slice(v.as_bytes());
        self
    }

    pub fn finish(self) -> Vec<u8> {
        self.bytes
    }
}

/// Reads what [`Wire`] wrote; a malformed message (another rank running other code) is an
/// error, never a panic.
pub struct Unwire<'a> {
    bytes: &'a [u8],
}

impl<'a> Unwire<'a> {
    pub fn new(bytes: &'a [u8]) -> Unwire<'a> {
        Unwire { bytes }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        if self.bytes.len() < n {
            return Err(
                "a malformed message from another rank (is every rank running the same program?)"
                    .into(),
            );
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }

    pub fn u64(&mut self) -> Result<u64, String> {
        let mut le = [0u8; 8];
        le.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(le))
    }

    pub fn u64s(&mut self) -> Result<Vec<u64>, String> {
        let n = self.u64()?;
        if n > self.bytes.len() as u64 / 8 {
            return Err("a malformed message from another rank".into());
        }
        (0..n).map(|_| self.u64()).collect()
    }

    pub fn text(&mut self) -> Result<String, String> {
        let n = self.u64()?;
        let n = usize::try_from(n).map_err(|_| "a malformed message".to_string())?;
        Ok(String::from_utf8_lossy(self.take(n)?).into_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_round_trips_and_refuses_truncated_messages() {
        let bytes = Wire::default()
            .u64(7)
            .u64s(&[1, 2, 3])
            .text("rank")
            .finish();
        let mut r = Unwire::new(&bytes);
        assert_eq!(r.u64().unwrap(), 7);
        assert_eq!(r.u64s().unwrap(), [1, 2, 3]);
        assert_eq!(r.text().unwrap(), "rank");
        let mut short = Unwire::new(&bytes[..12]);
        short.u64().unwrap();
        assert!(short.u64s().unwrap_err().contains("malformed"));
    }
}
